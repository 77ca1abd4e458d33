package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
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
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		return m, nil
	}}
	s, addr := start(t, Config{Handler: res, MaxInflight: 64, MaxClientInflight: 8})
	server := net.UDPAddrFromAddrPort(s.Addrs()[0])

	// The flooder, from 127.0.0.2: 8 queries stick, the other 22 are
	// refused at once.
	fl, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, server)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	for i := 0; i < 30; i++ {
		if _, err := fl.Write(dnstest.Pack(q(sprintf("flood%d.example.", i), dns.TypeA))); err != nil {
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
	dnstest.WaitFor(t, 5*time.Second, "nothing in flight", func() bool { return s.Stats().InFlight == 0 })
	r := dnstest.Exchange(t, addr, "udp", q("flood-again.example.", dns.TypeA))
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
