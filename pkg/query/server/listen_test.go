package server

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestListensOnlyOnConfiguredAddresses: a server bound to 127.0.0.2 answers
// there, from that address, and nowhere else on the machine: the same port
// on 127.0.0.1 and 127.0.0.3 (the node's "other IPs") is not the server's,
// over UDP and TCP. The agent never binds a wildcard address.
//
// The test binds those ports itself: a datagram is delivered to one socket
// and a connection to one listener, so the test's own getting them proves
// at once that the server did not, with no wait for something not to
// happen. Ports taken by something else, or by a server that bound more
// than it was told to, cannot be bound: the server is started again on
// other ports, a few times, and then the test fails.
func TestListensOnlyOnConfiguredAddresses(t *testing.T) {
	res := &fakeResolver{}
	others := []string{"127.0.0.1", "127.0.0.3"}
	var s *Server
	var decoys *elsewhere
	for try := 1; ; try++ {
		s, _ = startOn(t, "127.0.0.2:0", Config{Handler: res, SocketsPerAddr: 2})
		for _, a := range append(s.Addrs(), s.TCPAddrs()...) {
			if a.Addr() != netip.MustParseAddr("127.0.0.2") {
				t.Fatalf("bound %s, configured 127.0.0.2", a)
			}
		}
		var err error
		if decoys, err = bindElsewhere(others, s.Addrs()[0].Port(), s.TCPAddrs()[0].Port()); err == nil {
			break
		}
		if try == 5 {
			t.Fatalf("the server's ports are taken on the addresses it was not told to serve, %d servers in a row (something else holds them, or the server does): %v", try, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		serr := s.Shutdown(ctx)
		cancel()
		if serr != nil {
			t.Fatal(serr)
		}
	}
	defer decoys.close()
	udp := s.Addrs()[0]

	// The configured address answers, from itself: an unconnected socket
	// sees the reply's source.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	m := q("here.example.", dns.TypeA)
	if _, err := pc.WriteTo(dnstest.Pack(m), net.UDPAddrFromAddrPort(udp)); err != nil {
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

	// Elsewhere: the test's sockets get the query and the connection.
	calls := res.calls.Load()
	query := dnstest.Pack(q("elsewhere.example.", dns.TypeA))
	for i := range others {
		u, l := decoys.udp[i], decoys.tcp[i]
		ua, ta := u.LocalAddr().String(), l.Addr().String()
		if _, err := pc.WriteTo(query, u.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		_ = u.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, _, err := u.ReadFrom(buf); err != nil {
			t.Errorf("the query to UDP %s did not reach the test's socket there: %v", ua, err)
		}
		if n := res.calls.Load(); n != calls {
			t.Errorf("a query to UDP %s reached the server; only 127.0.0.2 is configured", ua)
		}
		c, err := net.DialTimeout("tcp", ta, 3*time.Second)
		if err != nil {
			t.Fatalf("TCP to the test's listener on %s: %v", ta, err)
		}
		_ = l.SetDeadline(time.Now().Add(3 * time.Second))
		ac, err := l.Accept()
		c.Close()
		if err != nil {
			t.Fatalf("the connection to TCP %s did not reach the test's listener there: %v", ta, err)
		}
		ac.Close()
		if n := s.Stats().TCPConns; n != 0 {
			t.Errorf("the server holds %d TCP connections; none was made to it", n)
		}
	}
}

// elsewhere holds a server's ports on addresses it was not told to serve.
type elsewhere struct {
	udp []*net.UDPConn
	tcp []*net.TCPListener
}

// bindElsewhere binds UDP port udpPort and TCP port tcpPort on each of
// addrs; on error it binds nothing.
func bindElsewhere(addrs []string, udpPort, tcpPort uint16) (*elsewhere, error) {
	e := &elsewhere{}
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, udpPort)))
		if err != nil {
			e.close()
			return nil, err
		}
		e.udp = append(e.udp, u)
		l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, tcpPort)))
		if err != nil {
			e.close()
			return nil, err
		}
		e.tcp = append(e.tcp, l)
	}
	return e, nil
}

func (e *elsewhere) close() {
	for _, u := range e.udp {
		u.Close()
	}
	for _, l := range e.tcp {
		l.Close()
	}
}
