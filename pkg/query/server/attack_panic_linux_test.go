package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// panicky is a Handler that panics where a query's name says: on the
// reader (Answer) or off it (Resolve). The pipeline recovers its own
// panics; the transport must survive a handler, or its own code, that
// does not.
type panicky struct{ fakeResolver }

func (h *panicky) Answer(dst []byte, req *Request) ([]byte, Verdict) {
	if strings.HasPrefix(req.Query.Name, "panic-reader") {
		panic("injected: answering on the reader")
	}
	return h.fakeResolver.Answer(dst, req)
}

func (h *panicky) Resolve(ctx context.Context, dst []byte, req *Request) []byte {
	if strings.HasPrefix(req.Query.Name, "panic-resolve") {
		panic("injected: resolving off the reader")
	}
	return h.fakeResolver.Resolve(ctx, dst, req)
}

// TestTransportPanicsRecovered: a panic on a transport goroutine (a UDP
// reader, a TCP connection, a query resolved off the reader, the TCP
// acceptor) costs the query or connection concerned, is counted in the
// agent's panic figure, and the server goes on serving: the reader
// restarts on its socket, the acceptor accepts the next connection, and
// every bound is given back.
func TestTransportPanicsRecovered(t *testing.T) {
	for _, readers := range []string{"threads", "poller"} {
		t.Run(readers, func(t *testing.T) {
			var acceptPanic atomic.Bool
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			s, addr := startHooked(t, Config{Handler: &panicky{}, UDPReaders: readers, Logger: quiet}, func(s *Server) {
				s.faultAccept = func() {
					if acceptPanic.CompareAndSwap(true, false) {
						panic("injected: accepting")
					}
				}
			})
			tcpAddr := s.TCPAddrs()[0].String()
			panics := func(want uint64) {
				t.Helper()
				if got := s.Stats().Panics; got != want {
					t.Fatalf("panics %d, want %d (stats %+v)", got, want, s.Stats())
				}
			}

			// A UDP reader: the query is lost, the reader restarts.
			_ = dnstest.ExchangeRawUDP(t, addr, dnstest.Pack(q("panic-reader.example.", dns.TypeA)))
			if err := answeredWithin(addr, 3*time.Second); err != nil {
				t.Fatalf("after a panic on the UDP reader: %v (stats %+v)", err, s.Stats())
			}
			panics(1)
			if st := s.Stats(); st.UDPReaderRestarts != 1 || st.UDPReadersLive != 1 {
				t.Fatalf("stats %+v: want the reader restarted once and live", st)
			}

			// A query resolved off the reader: its slot is given back.
			_ = dnstest.ExchangeRawUDP(t, addr, dnstest.Pack(q("panic-resolve.example.", dns.TypeA)))
			dnstest.WaitFor(t, 5*time.Second, "the second panic to be counted", func() bool { return s.Stats().Panics == 2 })
			dnstest.WaitFor(t, 5*time.Second, "the panicked query's slot to be given back", func() bool { return s.Stats().InFlight == 0 })
			dnstest.Exchange(t, addr, "udp", q("after-resolve.example.", dns.TypeA))

			// A TCP connection: it is closed, its place given back.
			c, err := net.Dial("tcp", tcpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := (&dns.Conn{Conn: c}).WriteMsg(q("panic-reader.example.", dns.TypeA)); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(c, 3*time.Second) {
				t.Fatal("the connection whose goroutine panicked was not closed")
			}
			panics(3)
			dnstest.WaitFor(t, 5*time.Second, "no TCP connection open", func() bool { return s.Stats().TCPConns == 0 })

			// A TCP query resolved off the connection: that query gets
			// nothing, the connection serves the next.
			c2, err := net.Dial("tcp", tcpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			co := &dns.Conn{Conn: c2}
			if err := co.WriteMsg(q("panic-resolve.example.", dns.TypeA)); err != nil {
				t.Fatal(err)
			}
			dnstest.WaitFor(t, 5*time.Second, "the fourth panic to be counted", func() bool { return s.Stats().Panics == 4 })
			askOn(t, c2, "after-tcp-resolve.example.")
			c2.Close()
			dnstest.WaitFor(t, 5*time.Second, "no TCP connection open and nothing in flight", func() bool { return s.Stats().TCPConns == 0 && s.Stats().InFlight == 0 })

			// The acceptor: the connection it held is closed, the next
			// one served.
			acceptPanic.Store(true)
			c3, err := net.Dial("tcp", tcpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c3.Close()
			if !closedWithin(c3, 3*time.Second) {
				t.Fatal("the connection the acceptor panicked on was not closed")
			}
			panics(5)
			dnstest.Exchange(t, tcpAddr, "tcp", q("after-accept.example.", dns.TypeA))
			dnstest.WaitFor(t, 5*time.Second, "no TCP connection open", func() bool { return s.Stats().TCPConns == 0 })
		})
	}
}
