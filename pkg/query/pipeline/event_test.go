package pipeline

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// The Event says which listen address a query came in on (UDP and TCP,
// both readers), how big the query and the reply were, and whether the
// client set DO: what CoreDNS-compatible metrics are labelled by.
func TestEventListenerSizesDO(t *testing.T) {
	for _, readers := range []string{"threads", "poller"} {
		t.Run(readers, func(t *testing.T) {
			ev := &events{}
			s, _ := start(t, Config{Resolver: &fakeResolver{}, Observer: ev}, func(c *server.Config) {
				c.Listen, c.SocketsPerAddr, c.UDPReaders = []string{"127.0.0.1:0", "127.0.0.2:0"}, 2, readers
			})
			udp, tcp := s.srv.Addrs(), s.TCPAddrs()
			for li := range 2 {
				for _, proto := range []string{"udp", "tcp"} {
					addr := udp[li].String()
					if proto == "tcp" {
						addr = tcp[li].String()
					}
					m := q("a.example.", dns.TypeA)
					m.SetEdns0(1232, li == 1)
					wire, err := m.Pack()
					if err != nil {
						t.Fatal(err)
					}
					r := dnstest.Exchange(t, addr, proto, m)
					got := ev.last()
					if got.Listener != li || got.Proto != proto {
						t.Errorf("%s to listener %d: event says listener %d, %s", proto, li, got.Listener, got.Proto)
					}
					if got.RequestSize != len(wire) {
						t.Errorf("%s: request size %d, want %d", proto, got.RequestSize, len(wire))
					}
					r.Compress = true // as the server packs
					if rb, _ := r.Pack(); got.ResponseSize != len(rb) {
						t.Errorf("%s: response size %d, want %d", proto, got.ResponseSize, len(rb))
					}
					if got.DO != (li == 1) {
						t.Errorf("%s to listener %d: DO %v", proto, li, got.DO)
					}
				}
			}
		})
	}
}

// The reply size of a cache hit and a cluster answer (the paths that
// patch stored wire bytes) is what goes out.
func TestEventResponseSizeHotPath(t *testing.T) {
	s := hotServer(t)
	ev := &events{}
	s.cfg.Observer = ev
	out := make([]byte, 0, 4096)
	for _, name := range []string{"Www.Example.Test.", "web.team-a.svc.cluster.local."} {
		b, v := serveOnce(s, packet(t, name, dns.TypeA, true), out)
		if v != server.Reply {
			t.Fatalf("%s: verdict %d", name, v)
		}
		if got := ev.last(); got.ResponseSize != len(b) || got.ResponseSize == 0 {
			t.Errorf("%s: event response size %d, reply is %d bytes", name, got.ResponseSize, len(b))
		}
	}
}

// noopObserver keeps the Event from being optimised away.
type noopObserver struct{ n int }

func (o *noopObserver) Observe(ev Event) { o.n += ev.ResponseSize }

// Reporting an answer to an Observer allocates nothing on the hot path.
func TestHotPathAllocsObserved(t *testing.T) {
	s := hotServer(t)
	s.cfg.Observer = &noopObserver{}
	out := make([]byte, 0, 4096)
	for _, name := range []string{"Www.Example.Test.", "web.team-a.svc.cluster.local."} {
		pkt := packet(t, name, dns.TypeA, true)
		serveOnce(s, pkt, out)
		if n := testing.AllocsPerRun(200, func() { serveOnce(s, pkt, out) }); n != 0 {
			t.Errorf("%s: %.1f allocations per query with an observer, want 0", name, n)
		}
	}
}
