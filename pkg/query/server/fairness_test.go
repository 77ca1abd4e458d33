package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/cache"
	"github.com/nodedns/nodedns/pkg/query/upstream"
)

// TestClientFairShare: one client holding its whole share of the slow
// path (queries stuck upstream) gets SERVFAIL at once for more, while
// another client's misses are still resolved; when the first client's
// queries finish, its share is free again.
func TestClientFairShare(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		if strings.HasPrefix(q.Question[0].Name, "flood") {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{mustRR("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		return m, nil
	}}
	s, addr := start(t, Config{Resolver: res, MaxInflight: 64, MaxClientInflight: 8})
	server := net.UDPAddrFromAddrPort(s.Addrs()[0])

	// The flooder, from 127.0.0.2: 8 queries stick, the other 22 are
	// refused at once.
	fl, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, server)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	for i := 0; i < 30; i++ {
		if _, err := fl.Write(packTB(t, q(sprintf("flood%d.example.", i), dns.TypeA))); err != nil {
			t.Fatal(err)
		}
	}
	servfails := 0
	_ = fl.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	for servfails < 22 {
		n, err := fl.Read(buf)
		if err != nil {
			t.Fatalf("flooder: %d SERVFAIL, want 22: %v", servfails, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil || r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("flooder got %v (%v) while its share is taken", r, err)
		}
		servfails++
	}
	if st := s.Stats(); st.InFlight != 8 || st.ClientLimited != 22 || st.Overloaded != 0 {
		t.Fatalf("stats %+v, want 8 in flight, 22 refused at the client bound", st)
	}

	// Another client's misses still get through, from another address.
	other, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)}, server)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	co := &dns.Conn{Conn: other}
	for i := 0; i < 20; i++ {
		m := q(sprintf("other%d.example.", i), dns.TypeA)
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		_ = other.SetReadDeadline(time.Now().Add(3 * time.Second))
		r, err := co.ReadMsg()
		if err != nil || r.Rcode != dns.RcodeSuccess || r.Id != m.Id {
			t.Fatalf("other client during the flood: %v, %v", r, err)
		}
	}

	// The flooder's share comes back once its queries are answered.
	open()
	waitFor(t, func() bool { return s.Stats().InFlight == 0 })
	r := exchange(t, addr, "udp", q("flood-again.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after the flood: %v", r)
	}
	if n := countEntries(s.fair); n != 0 {
		t.Fatalf("%d per-client entries left with nothing in flight", n)
	}
}

func countEntries(l *clientLimiter) int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].n)
		l.shards[i].mu.Unlock()
	}
	return n
}

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
			s, _ := start(t, Config{Resolver: c, HitCache: c, Pods: pods, MaxInflight: 1024, MaxClientInflight: 40, Logger: quiet})
			server := net.UDPAddrFromAddrPort(s.Addrs()[0])
			for i := 0; i < tc.flooders; i++ {
				fl, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr(i), 0)), server)
				if err != nil {
					t.Fatal(err)
				}
				defer fl.Close()
				for j := 0; j < 40; j++ {
					if _, err := fl.Write(packTB(t, q(sprintf("r%d-%d.stalled.example.", i, j), dns.TypeA))); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitFor(t, func() bool { return stalled.Count() >= 4*tc.flooders })
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
