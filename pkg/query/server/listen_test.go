package server

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestListensOnlyOnConfiguredAddresses: a server bound to 127.0.0.2 answers
// there, from that address, and nowhere else on the machine: the same port
// on 127.0.0.1 and 127.0.0.3 (the node's "other IPs") is closed, over UDP
// and TCP. The agent never binds a wildcard address.
func TestListensOnlyOnConfiguredAddresses(t *testing.T) {
	res := &fakeResolver{}
	s, _ := startOn(t, "127.0.0.2:0", Config{Handler: res, SocketsPerAddr: 2})
	for _, a := range append(s.Addrs(), s.TCPAddrs()...) {
		if a.Addr() != netip.MustParseAddr("127.0.0.2") {
			t.Fatalf("bound %s, configured 127.0.0.2", a)
		}
	}
	udp, tcp := s.Addrs()[0], s.TCPAddrs()[0]

	// The configured address answers, from itself: an unconnected socket
	// sees the reply's source.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	m := q("here.example.", dns.TypeA)
	if _, err := pc.WriteTo(packTB(t, m), net.UDPAddrFromAddrPort(udp)); err != nil {
		t.Fatal(err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no answer on the configured address: %v", err)
	}
	if got := from.(*net.UDPAddr).AddrPort(); got != udp {
		t.Fatalf("answer came from %s, query went to %s", got, udp)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil || r.Id != m.Id {
		t.Fatalf("answer %v, %v", r, err)
	}

	// Elsewhere: whatever else may happen to use the same port number on
	// those addresses, this server never sees the query (its resolver is
	// not asked) nor the connection.
	calls := res.calls.Load()
	for _, other := range []string{"127.0.0.1", "127.0.0.3"} {
		ua := netip.AddrPortFrom(netip.MustParseAddr(other), udp.Port())
		_ = raw(t, ua.String(), packTB(t, q("elsewhere.example.", dns.TypeA)))
		if n := res.calls.Load(); n != calls {
			t.Errorf("a query to UDP %s reached the server; only 127.0.0.2 is configured", ua)
		}
		ta := netip.AddrPortFrom(netip.MustParseAddr(other), tcp.Port())
		if c, err := net.DialTimeout("tcp", ta.String(), time.Second); err == nil {
			time.Sleep(50 * time.Millisecond)
			if n := s.Stats().TCPConns; n != 0 {
				t.Errorf("TCP %s reached the server (%d connections); only 127.0.0.2 is configured", ta, n)
			}
			c.Close()
		}
	}
}
