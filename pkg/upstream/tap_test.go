package upstream_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

type forwarded struct {
	tcp         bool
	server      netip.AddrPort
	sent, rcvd  time.Time
	query, resp *dns.Msg
}

type recordingTap struct {
	mu  sync.Mutex
	got []forwarded
}

func (r *recordingTap) Forwarded(tcp bool, server netip.AddrPort, sent time.Time, q *dns.Msg, received time.Time, reply *dns.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := forwarded{tcp: tcp, server: server, sent: sent, rcvd: received, query: q.Copy()}
	if reply != nil {
		f.resp = reply.Copy()
	}
	r.got = append(r.got, f)
}

func (r *recordingTap) take() []forwarded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// TestTapExchanges: each attempt of an exchange is logged, as CoreDNS's
// forward logs its dnstap messages: the query as it went on the wire (its
// ID that of the wire), the reply when one came, the server, the
// transport; a truncated UDP reply and its TCP retry are two.
func TestTapExchanges(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	tap := new(recordingTap)
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}, Tap: tap})
	before := time.Now()
	forward(t, f, "small.example.test.", dns.TypeTXT)
	got := tap.take()
	server := netip.MustParseAddrPort(up.Addr)
	if len(got) != 1 || got[0].tcp || got[0].server != server || got[0].resp == nil {
		t.Fatalf("logged %+v, want one UDP exchange with %v and its reply", got, server)
	}
	g := got[0]
	if g.query.Question[0].Name != "small.example.test." || g.query.Id != g.resp.Id || g.query.Id == 4242 {
		t.Errorf("query %v (ID %d), reply ID %d: want the query as sent, a fresh ID, the reply's the same", g.query.Question, g.query.Id, g.resp.Id)
	}
	if g.sent.Before(before) || g.rcvd.Before(g.sent) {
		t.Errorf("times: sent %v, received %v, the exchange began %v", g.sent, g.rcvd, before)
	}

	forward(t, f, "big.example.test.", dns.TypeTXT)
	got = tap.take()
	if len(got) != 2 || got[0].tcp || !got[0].resp.Truncated || !got[1].tcp || got[1].resp == nil || got[1].resp.Truncated {
		t.Fatalf("truncated: logged %d exchanges, want the UDP one (TC) and the TCP retry", len(got))
	}

	// No reply: the query alone.
	dead := newForwarder(t, upstream.Config{Servers: []string{"127.0.0.1:1"}, Tap: tap, TryTimeout: 100 * time.Millisecond, Budget: 300 * time.Millisecond})
	if _, err := dead.Exchange(context.Background(), stage.Origin{}, query("x.example.test.", dns.TypeA)); err == nil {
		t.Fatal("an exchange with a closed port succeeded")
	}
	got = tap.take()
	if len(got) == 0 {
		t.Fatal("failed exchange: nothing logged")
	}
	for _, g := range got {
		if g.resp != nil || g.server != netip.MustParseAddrPort("127.0.0.1:1") {
			t.Errorf("failed exchange: logged %+v, want the query alone", g)
		}
	}
}
