package server

import (
	"context"
	"net/netip"
	"time"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// Handler answers the queries the listeners receive (pkg/query/pipeline is
// the agent's). It is the whole contract between the transport and what
// answers: the transport reads, bounds and writes; the handler decides
// every byte of every reply.
//
// A query is first offered to Answer on the socket's reader, which must
// not block: most queries (cache hits, cluster names) are answered there,
// into the reader's own buffer, at no allocation. When the answer needs
// waiting (an upstream exchange), Answer says so and the transport calls
// Resolve on a goroutine of its bounded pool, or Refuse when the pool, or
// the client's share of it, is full.
type Handler interface {
	// Answer appends the reply to req to dst and returns it with Reply, or
	// returns Drop (no reply at all) or Wait (resolve it off the reader).
	// It runs on the reader: it must not block, and must keep neither req
	// nor dst past the call.
	Answer(dst []byte, req *Request) (out []byte, v Verdict)
	// Resolve answers req, for which Answer said Wait, off the reader,
	// waiting at most until ctx is done (the transport's own context,
	// cancelled when it shuts down), and appends the reply to dst.
	Resolve(ctx context.Context, dst []byte, req *Request) []byte
	// Refuse appends the reply to req, for which Answer said Wait, when
	// the transport will not resolve it: its in-flight bound, or the
	// client's share of it, is full.
	Refuse(dst []byte, req *Request) []byte
}

// Verdict is what Answer did with a query.
type Verdict uint8

// Verdicts.
const (
	// Drop: no reply at all (a response sent as a query, a packet
	// without a header).
	Drop Verdict = iota
	// Reply: the reply has been appended to dst.
	Reply
	// Wait: the answer needs waiting; call Resolve off the reader.
	Wait
)

// Request is one query as a listener received it.
type Request struct {
	// Packet is the DNS message, without TCP's length prefix. On the
	// reader it lives in a buffer that the next datagram reuses; Resolve
	// and Refuse get a copy of their own.
	Packet []byte
	// Query is the header and first question read from Packet
	// (dnswire.ParseQuery), and Err what reading them failed on: nil,
	// dnswire.ErrHeader when not even the header is there, or the error
	// of the question or OPT record.
	Query dnswire.Query
	Err   error
	// Proto is "udp" or "tcp".
	Proto string
	// Client is the sender's address (IPv4 unmapped), ClientPort its
	// port (set by the transport after Read; 0 when unknown).
	Client     netip.Addr
	ClientPort uint16
	// Listener is the index in Config.Listen of the address the query
	// came in on.
	Listener int
	// Received is when the transport read the query.
	Received time.Time
}

// Read makes r the request for packet, received at now from client on the
// listener, as the listeners do (and tests of a Handler): everything it
// held before is overwritten, so one Request per reader serves every
// query (its parsed name lives inside it: nothing is allocated).
func (r *Request) Read(proto string, listener int, client netip.Addr, now time.Time, packet []byte) {
	*r = Request{Packet: packet, Proto: proto, Client: client, Listener: listener, Received: now}
	r.Err = dnswire.ParseQuery(packet, &r.Query)
}

// detached returns a copy of r that owns its packet and question name, for
// a goroutine: the reader reuses r and its buffer for the next query.
func (r *Request) detached() *Request {
	c := new(Request)
	*c = *r
	c.Packet = append([]byte(nil), r.Packet...)
	if n := len(r.Query.RawName); n > 0 && len(c.Packet) >= dnswire.HeaderLen+n {
		c.Query.RawName = c.Packet[dnswire.HeaderLen : dnswire.HeaderLen+n]
	}
	c.Query.Detach()
	return c
}
