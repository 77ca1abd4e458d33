package pipeline

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// TestStalledZoneUpstreamShare: pods flood random names under a zone whose
// server never answers, so each of their misses holds one of the
// forwarder's in-flight slots for the whole exchange budget. The server's
// per-client share lets them all in (their shares together are more than
// the forwarder has), so the forwarder must keep shares of its own slots:
// another pod's cache misses are still resolved, not SERVFAIL, whether
// the flooders are in namespaces of their own, in the other pod's own
// namespace, or more than the shares can hold.
func TestStalledZoneUpstreamShare(t *testing.T) {
	cases := []struct {
		name     string
		flooders int
		ns       func(i int) string // namespace of pod i (the other pod is the last)
	}{
		{"four pods in four namespaces", 4, func(i int) string { return sprintf("ns-%d", i) }},
		{"four pods in the other pod's namespace", 4, func(int) string { return "team" }},
		{"twelve pods", 12, func(i int) string { return sprintf("ns-%d", i) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			stalled := dnstest.Start(t, dnstest.Drop)
			good := dnstest.Start(t, dnstest.Zone(60))
			fwd, err := upstream.New(upstream.Config{Servers: []string{good.Addr}, Stubs: map[string][]string{"stalled.example.": {stalled.Addr}},
				MaxInflight: 128, TryTimeout: 3 * time.Second, Budget: 4 * time.Second, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			c, err := cache.New(cache.Config{Size: 1000, PrefetchHits: -1, Logger: quiet}, fwd)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}) }
			pods := fakePods{}
			for i := 0; i <= tc.flooders; i++ {
				pods[addr(i)] = tc.ns(i)
			}
			// The server lets each client hold 40: the flooders together
			// could take more than the forwarder's 128 slots (the four
			// pods do with its old default share of a quarter).
			s, _ := start(t, Config{Resolver: c, Pods: pods, Logger: quiet}, func(c *server.Config) {
				c.MaxInflight, c.MaxClientInflight = 1024, 40
			})
			server := net.UDPAddrFromAddrPort(s.srv.Addrs()[0])
			for i := 0; i < tc.flooders; i++ {
				fl, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr(i), 0)), server)
				if err != nil {
					t.Fatal(err)
				}
				defer fl.Close()
				for j := 0; j < 40; j++ {
					if _, err := fl.Write(dnstest.Pack(q(sprintf("r%d-%d.stalled.example.", i, j), dns.TypeA))); err != nil {
						t.Fatal(err)
					}
				}
			}
			dnstest.WaitFor(t, 5*time.Second, "every flooder stalled at the upstream", func() bool { return stalled.Count() >= 4*tc.flooders })
			time.Sleep(200 * time.Millisecond) // let the flood settle

			other, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr(tc.flooders), 0)), server)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			co := &dns.Conn{Conn: other}
			for i := 0; i < 10; i++ {
				m := q(sprintf("miss%d.example.test.", i), dns.TypeA)
				if err := co.WriteMsg(m); err != nil {
					t.Fatal(err)
				}
				_ = other.SetReadDeadline(time.Now().Add(3 * time.Second))
				for {
					r, err := co.ReadMsg()
					if err != nil {
						t.Fatalf("another pod's cache miss %d during the flood: %v", i, err)
					}
					if r.Id != m.Id {
						continue
					}
					if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
						t.Fatalf("another pod's cache miss %d during the flood: %v (forwarder refused %d, %d at a share)",
							i, r, fwd.Overloaded(), fwd.ClientLimited())
					}
					break
				}
			}
		})
	}
}
