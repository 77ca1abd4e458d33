package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestShutdownAnswersInflight: a query read before the drain whose
// resolution outlasts it (a slow upstream) is still answered; Shutdown
// closes the UDP sockets only once it has gone out.
func TestShutdownAnswersInflight(t *testing.T) {
	for _, readers := range []string{"threads", "poller"} {
		t.Run(readers, func(t *testing.T) {
			const slow = 300 * time.Millisecond
			res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
				time.Sleep(slow)
				m := new(dns.Msg)
				m.SetReply(q)
				m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
				return m, nil
			}}
			s, addr := start(t, Config{Handler: res, UDPReaders: readers})
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wire := dnstest.Pack(q("slow.example.", dns.TypeA))
			if _, err := c.Write(wire); err != nil {
				t.Fatal(err)
			}
			dnstest.WaitFor(t, 5*time.Second, "the resolver to be called", func() bool { return res.calls.Load() == 1 })

			// The drain is shorter than the resolution.
			s.Drain(50 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}

			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 1500)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("no answer to the query in flight at shutdown: %v", err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("answer %v, %v", r, err)
			}
		})
	}
}
