package server

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// bindingSockets is a socket holder that binds on demand, as the
// supervisor does before it starts a serving process.
type bindingSockets struct{}

func (bindingSockets) UDP(addr netip.AddrPort, _ int, _ bool) (*os.File, error) {
	return BindUDP(addr)
}

func (bindingSockets) TCP(addr netip.AddrPort) (*os.File, error) { return BindTCP(addr) }

// TestBacklogGrace: a server given its sockets (a supervised process that
// may find the queries queued while none read them) does not hold one
// client to its share of the slow path for backlogGrace after Serve, only
// to MaxInflight; after the grace the share applies again.
func TestBacklogGrace(t *testing.T) {
	// expect reads n answers of rcode from c.
	expect := func(t *testing.T, c *net.UDPConn, n, rcode int) {
		t.Helper()
		buf := make([]byte, 1500)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := range n {
			k, err := c.Read(buf)
			if err != nil {
				t.Fatalf("answer %d of %d: %v", i+1, n, err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:k]); err != nil || r.Rcode != rcode {
				t.Fatalf("answer %d: %v (%v), want %s", i+1, r, err, dns.RcodeToString[rcode])
			}
		}
	}
	dial := func(t *testing.T, s *Server) *net.UDPConn {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, net.UDPAddrFromAddrPort(s.Addrs()[0]))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	waitInflight := func(t *testing.T, s *Server, n int) {
		t.Helper()
		dnstest.Eventually(t, 5*time.Second, sprintf("%d in flight", n), func() error {
			if st := s.Stats(); st.InFlight != n {
				return fmt.Errorf("in flight %d, want %d (stats %+v)", st.InFlight, n, st)
			}
			return nil
		})
	}

	t.Run("during", func(t *testing.T) {
		release := make(chan struct{})
		s, _ := start(t, Config{Handler: blocked(release), MaxInflight: 64, MaxClientInflight: 2, Sockets: bindingSockets{}, backlogGrace: time.Hour})
		c := dial(t, s)
		for i := range 10 {
			if _, err := c.Write(dnstest.Pack(q(sprintf("slow%d.example.", i), dns.TypeA))); err != nil {
				t.Fatal(err)
			}
		}
		waitInflight(t, s, 10)
		if st := s.Stats(); st.ClientLimited != 0 {
			t.Fatalf("stats %+v: refused at the client bound during the grace", st)
		}
		close(release)
		expect(t, c, 10, dns.RcodeSuccess)
	})

	t.Run("after", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		s, _ := start(t, Config{Handler: blocked(hold), MaxInflight: 64, MaxClientInflight: 2, Sockets: bindingSockets{}, backlogGrace: 20 * time.Millisecond})
		dnstest.WaitFor(t, 5*time.Second, "the grace to end", func() bool { return !s.fair.open.Load() })
		c := dial(t, s)
		for i := range 5 {
			if _, err := c.Write(dnstest.Pack(q(sprintf("slow%d.example.", i), dns.TypeA))); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, c, 3, dns.RcodeServerFailure)
		waitInflight(t, s, 2)
		if st := s.Stats(); st.ClientLimited != 3 {
			t.Fatalf("stats %+v, want 3 refused at the client bound", st)
		}
	})
}
