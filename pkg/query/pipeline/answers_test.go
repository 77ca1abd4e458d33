package pipeline

import (
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// lastEvent keeps the last event without allocating, as a real observer
// must on the hot path.
type lastEvent struct{ ev Event }

func (l *lastEvent) Observe(ev Event) { l.ev = ev }

// TestEventAnswers: the event carries the answer count and TC bit of the
// reply as sent, for every kind of answer, so a NOERROR without answers
// (NODATA) can be told from an answer; and the hot path stays at zero
// allocations with an observer.
func TestEventAnswers(t *testing.T) {
	s := hotServer(t)
	obs := &lastEvent{}
	s.cfg.Observer = obs
	out := make([]byte, 0, 4096)
	for _, c := range []struct {
		name    string
		qname   string
		qtype   uint16
		rcode   int
		answers int
	}{
		{"cache hit", "www.example.test.", dns.TypeA, dns.RcodeSuccess, 1},
		{"cluster answer", "web.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, 1},
		{"cluster NODATA", "web.team-a.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, 0},
		{"cluster NXDOMAIN", "nope.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, 0},
		{"refused class of query", "x.example.test.", dns.TypeAXFR, dns.RcodeRefused, 0},
		{"RFC 8482 ANY", "x.example.test.", dns.TypeANY, dns.RcodeSuccess, 1},
	} {
		obs.ev = Event{Answers: -1}
		if _, v := serveOnce(s, packet(t, c.qname, c.qtype, true), out); v != server.Reply {
			t.Fatalf("%s: verdict %d, want a reply on the reader", c.name, v)
		}
		if obs.ev.Rcode != c.rcode || obs.ev.Answers != c.answers || obs.ev.Truncated {
			t.Errorf("%s: event rcode %d answers %d truncated %v; want %d, %d, false", c.name, obs.ev.Rcode, obs.ev.Answers, obs.ev.Truncated, c.rcode, c.answers)
		}
	}

	// A reply that does not fit a client without EDNS (512 bytes) goes out
	// empty with TC: the event says so.
	big := new(dns.Msg)
	big.SetQuestion("big.example.test.", dns.TypeTXT)
	big.Response = true
	for i := 0; i < 5; i++ {
		big.Answer = append(big.Answer, dnstest.MustRRf("%s", `big.example.test. 300 IN TXT "`+strings.Repeat("a", 200)+`"`))
	}
	s.cfg.Resolver.(*cache.Cache).Put(cache.KeyOf(big), big)
	if _, v := serveOnce(s, packet(t, "big.example.test.", dns.TypeTXT, false), out); v != server.Reply {
		t.Fatalf("truncated hit: verdict %d", v)
	}
	if !obs.ev.Truncated || obs.ev.Answers != 0 || obs.ev.Rcode != dns.RcodeSuccess {
		t.Errorf("truncated hit: event %+v, want TC, 0 answers, NOERROR", obs.ev)
	}

	for _, c := range []struct{ name, qname string }{{"cache hit", "www.example.test."}, {"cluster answer", "web.team-a.svc.cluster.local."}} {
		pkt := packet(t, c.qname, dns.TypeA, true)
		if n := testing.AllocsPerRun(200, func() { serveOnce(s, pkt, out) }); n != 0 {
			t.Errorf("%s with an observer: %.1f allocations per query, want 0", c.name, n)
		}
	}
}
