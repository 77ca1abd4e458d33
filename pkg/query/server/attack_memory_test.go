package server

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// formerrHandler answers, on the reader, FORMERR to a query whose header
// or question could not be read (as the pipeline does) and A records to
// the rest, off the reader (fakeResolver).
type formerrHandler struct{ fakeResolver }

func (h *formerrHandler) Answer(dst []byte, req *Request) ([]byte, Verdict) {
	if req.Err == nil {
		return h.fakeResolver.Answer(dst, req)
	}
	if len(req.Packet) < 12 {
		return dst, Drop
	}
	m := new(dns.Msg)
	m.Id = uint16(req.Packet[0])<<8 | uint16(req.Packet[1])
	m.Response = true
	m.Rcode = dns.RcodeFormatError
	b, err := m.Pack()
	if err != nil {
		return dst, Drop
	}
	return append(dst, b...), Reply
}

// paddedQuery is a query for name that is size bytes long: its OPT
// record carries an EDNS padding option (RFC 7830) making up the rest.
func paddedQuery(t *testing.T, name string, size int) *dns.Msg {
	t.Helper()
	m := q(name, dns.TypeA)
	m.SetEdns0(1232, false)
	base := len(dnstest.Pack(m))
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, size-base-4)})
	if n := len(dnstest.Pack(m)); n != size {
		t.Fatalf("padded query is %d bytes, want %d", n, size)
	}
	return m
}

// TestAttackTCPMemoryPerConnection: a connection that announces a 65,535
// byte message and sends only its header makes the server allocate no
// more than a query's bound for it, whatever length it announced; before,
// the whole announced length was allocated at once (1,000 connections:
// ~64 MiB before sending anything).
func TestAttackTCPMemoryPerConnection(t *testing.T) {
	s, _ := start(t, Config{Handler: &formerrHandler{}, UDPReaders: "poller", TCPReadTimeout: 3 * time.Second, TCPIdleTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()
	const perSrc, srcs = 50, 8
	const n = perSrc * srcs
	header := []byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0} // one question, RD
	frame := append([]byte{0xff, 0xff}, header...)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < srcs; i++ {
		src := sprintf("127.0.0.%d", i+2)
		for j := 0; j < perSrc; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := dialFrom(t, src, addr)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				if _, err := c.Write(frame); err != nil {
					errs <- err
					return
				}
				// Held until the server cuts the message at its deadline
				// (nothing else comes: a one-byte buffer is all this end
				// allocates).
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				var b [1]byte
				if _, err := c.Read(b[:]); err == nil || isTimeout(err) {
					errs <- fmt.Errorf("%s: not closed at the message deadline (%v)", c.LocalAddr(), err)
				}
			}()
		}
	}
	// Meanwhile: what the server holds with every message under way.
	dnstest.WaitFor(t, 5*time.Second, "every partial TCP message to be held", func() bool { return s.partialTCP() == n })
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perConn := (after.TotalAlloc - before.TotalAlloc) / n
	held := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d connections announcing 65,535 bytes: %d KiB allocated a connection; %d KiB of heap held with all under way (%d KiB a connection)",
		n, perConn>>10, held>>10, held/n>>10)
	if perConn > 8<<10 {
		t.Fatalf("%d KiB allocated for each connection that announced 65,535 bytes and sent 12: want no more than a query's bound (4 KiB) and the connection's own state, both ends together", perConn>>10)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// partialTCP counts the open connections with a message under way.
func (s *Server) partialTCP() int {
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	n := 0
	for _, st := range s.tcpConns {
		if st.partial.Load() {
			n++
		}
	}
	return n
}

// TestOversizedQueryFormErr: a query longer than maxQuerySize, over TCP or
// read by a poller reader (a thread reader's buffer is that long), is
// answered FORMERR from its header, and the connection goes on serving the
// next one: no query costs more than the bound off the reader.
func TestOversizedQueryFormErr(t *testing.T) {
	s, addr := start(t, Config{Handler: &formerrHandler{}, UDPReaders: "poller"})
	big := paddedQuery(t, "big.example.", maxQuerySize+1)
	fits := paddedQuery(t, "fits.example.", maxQuerySize)

	c, err := net.Dial("tcp", s.TCPAddrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := &dns.Conn{Conn: c}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	for _, m := range []*dns.Msg{big, fits} {
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int{dns.RcodeFormatError, dns.RcodeSuccess} {
		r, err := co.ReadMsg()
		if err != nil {
			t.Fatalf("TCP reply %d: %v", i, err)
		}
		if r.Rcode != want {
			t.Fatalf("TCP reply %d (id %d, big %d, fits %d): rcode %s, want %s", i, r.Id, big.Id, fits.Id, dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
		}
	}

	for _, tc := range []struct {
		m    *dns.Msg
		want int
	}{{big, dns.RcodeFormatError}, {fits, dns.RcodeSuccess}} {
		b := dnstest.ExchangeRawUDP(t, addr, dnstest.Pack(tc.m))
		r := new(dns.Msg)
		if b == nil || r.Unpack(b) != nil && len(b) < 12 {
			t.Fatalf("UDP %d bytes: no reply", len(dnstest.Pack(tc.m)))
		}
		_ = r.Unpack(b)
		if r.Rcode != tc.want {
			t.Fatalf("UDP %d bytes: rcode %s, want %s", len(dnstest.Pack(tc.m)), dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.want])
		}
	}
}
