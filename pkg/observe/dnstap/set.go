package dnstap

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Set is the agent's taps, every one told every message (CoreDNS runs
// each dnstap directive of a block): what the query pipeline and the
// forwarder call. A nil Set is none.
type Set struct {
	taps []*Tap
	full bool // some tap wants the DNS messages
}

// NewSet returns the set of taps; nil when there are none.
func NewSet(taps ...*Tap) *Set {
	if len(taps) == 0 {
		return nil
	}
	s := &Set{taps: taps}
	for _, t := range taps {
		s.full = s.full || t.cfg.Full
	}
	return s
}

// Taps are the set's taps.
func (s *Set) Taps() []*Tap { return s.taps }

// Run runs every tap until ctx is done, and returns when all have
// stopped.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range s.taps {
		wg.Go(func() { t.Run(ctx) })
	}
	wg.Wait()
}

// Stats are the figures of every tap, in order.
func (s *Set) Stats() []Stats {
	out := make([]Stats, 0, len(s.taps))
	for _, t := range s.taps {
		out = append(out, t.Stats())
	}
	return out
}

// send sends m to every tap: with its DNS messages to those that want
// them, without to the others.
func (s *Set) send(m *Message) {
	for _, t := range s.taps {
		if t.cfg.Full {
			t.Send(m)
			continue
		}
		bare := *m
		bare.QueryMessage, bare.ResponseMessage = nil, nil
		t.Send(&bare)
	}
}

// ClientQuery logs a query as a client sent it (CLIENT_QUERY), on the
// reader: query is the message as received, read during the call only.
func (s *Set) ClientQuery(tcp bool, client netip.AddrPort, received time.Time, query []byte) {
	s.send(&Message{Type: ClientQuery, TCP: tcp, Query: client, QueryTime: received, QueryMessage: query})
}

// ClientResponse logs the reply sent to a client (CLIENT_RESPONSE), with
// the time its query was received.
func (s *Set) ClientResponse(tcp bool, client netip.AddrPort, received, sent time.Time, reply []byte) {
	s.send(&Message{Type: ClientResponse, TCP: tcp, Query: client, QueryTime: received, ResponseTime: sent, ResponseMessage: reply})
}

// Forwarded logs one exchange with an upstream server: the query as sent
// (FORWARDER_QUERY) and, when one came (reply not nil), the reply
// (FORWARDER_RESPONSE), both with the time the query was sent, as
// CoreDNS's forward.
func (s *Set) Forwarded(tcp bool, server netip.AddrPort, sent time.Time, query *dns.Msg, received time.Time, reply *dns.Msg) {
	q := Message{Type: ForwarderQuery, TCP: tcp, Response: server, QueryTime: sent}
	if s.full && query != nil {
		q.QueryMessage, _ = query.Pack()
	}
	s.send(&q)
	if reply == nil {
		return
	}
	r := Message{Type: ForwarderResponse, TCP: tcp, Response: server, QueryTime: sent, ResponseTime: received}
	if s.full {
		r.ResponseMessage, _ = reply.Pack()
	}
	s.send(&r)
}
