// Package dnstest runs real DNS servers on loopback for tests and
// benchmarks: an upstream whose behaviour a test scripts per query, and
// counters of what it was asked. Servers listen on 127.0.0.1:0 (UDP and TCP
// on the same port) and stop when the test ends.
//
// Besides the miekg/dns based Server there is Raw, a server scripted in
// bytes for upstreams that misbehave on purpose (wrong IDs, garbage,
// silence), and Gate, which holds answers back until a test lets them go.
// Collector (dnstap.go) is a dnstap collector, decoding with the
// reference types of github.com/dnstap/golang-dnstap. helpers.go holds
// the small helpers the tests of every package share (WaitFor,
// Eventually, MustRR, Exchange, FreePort, SyncBuffer, ...), so that none
// writes its own copy. The package imports no package of this module:
// any package's in-package tests may import it.
package dnstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// shutdownWait bounds how long Close waits for handlers still running.
const shutdownWait = 5 * time.Second

// Server is a scripted DNS server.
type Server struct {
	Addr string // 127.0.0.1:port, UDP and TCP

	// life guards the listeners (Stop and Restart replace them).
	life     sync.Mutex
	udp, tcp *dns.Server
	running  bool

	mu      sync.Mutex
	handler dns.HandlerFunc
	queries []dns.Question
	ids     []uint16
	total   atomic.Int64
	udpN    atomic.Int64
	tcpN    atomic.Int64
	conns   atomic.Int64
}

// Start starts a server answering with h; it is shut down at test end.
func Start(t testing.TB, h dns.HandlerFunc) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatalf("starting test DNS server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Listen starts a server on addr (port 0 picks one) answering with h.
func Listen(addr string, h dns.HandlerFunc) (*Server, error) {
	s := &Server{handler: h}
	if err := s.listen(addr); err != nil {
		return nil, err
	}
	return s, nil
}

// listenPair listens on UDP and TCP on one port. With port 0 the UDP port
// is the kernel's pick and that TCP port may be taken (by some client's
// connection, say): it picks again, a bounded number of times.
func listenPair(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	var err error
	for try := 0; try < 20; try++ {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return nil, nil, fmt.Errorf("listening UDP %s: %w", addr, err)
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln, nil
		}
		pc.Close()
		err = fmt.Errorf("listening TCP on %s: %w", pc.LocalAddr(), err)
		if port != "0" {
			break
		}
	}
	return nil, nil, err
}

func (s *Server) listen(addr string) error {
	pc, ln, err := listenPair(addr)
	if err != nil {
		return err
	}
	s.Addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	s.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve("udp")), NotifyStartedFunc: notify}
	s.tcp = &dns.Server{Listener: &countingListener{Listener: ln, n: &s.conns}, Handler: dns.HandlerFunc(s.serve("tcp")),
		NotifyStartedFunc: notify, ReadTimeout: 2 * time.Second, IdleTimeout: func() time.Duration { return 5 * time.Second }}
	udp, tcp := s.udp, s.tcp
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	<-started
	<-started
	s.running = true
	return nil
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (s *Server) serve(proto string) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		s.total.Add(1)
		if proto == "udp" {
			s.udpN.Add(1)
		} else {
			s.tcpN.Add(1)
		}
		s.mu.Lock()
		if len(r.Question) > 0 && len(s.queries) < 100000 {
			s.queries = append(s.queries, r.Question[0])
			s.ids = append(s.ids, r.Id)
		}
		h := s.handler
		s.mu.Unlock()
		h(w, r)
	}
}

// SetHandler replaces the handler.
func (s *Server) SetHandler(h dns.HandlerFunc) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// Count is how many queries arrived (UDP and TCP).
func (s *Server) Count() int { return int(s.total.Load()) }

// TCPCount is how many queries arrived over TCP.
func (s *Server) TCPCount() int { return int(s.tcpN.Load()) }

// TCPConns is how many TCP connections the server accepted.
func (s *Server) TCPConns() int { return int(s.conns.Load()) }

// CountName is how many queries arrived for name (any case) and type.
func (s *Server) CountName(name string, qtype uint16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queries {
		if strings.EqualFold(q.Name, name) && q.Qtype == qtype {
			n++
		}
	}
	return n
}

// IDs returns the message IDs of the queries that arrived, in order.
func (s *Server) IDs() []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint16(nil), s.ids...)
}

// Close stops the server. It waits a bounded time for handlers still
// running (open a Gate first if one holds them).
func (s *Server) Close() {
	s.life.Lock()
	defer s.life.Unlock()
	if !s.running {
		return
	}
	s.running = false
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	_ = s.udp.ShutdownContext(ctx)
	_ = s.tcp.ShutdownContext(ctx)
}

// Stop closes the server's sockets, as if the process had died: queries to
// Addr are then refused (ICMP port unreachable, TCP RST). Restart brings
// it back on the same address. Counters are kept.
func (s *Server) Stop() { s.Close() }

// Restart listens again on Addr after Stop, retrying for up to a second
// while the address is busy. A failure is reported with t.Errorf (Restart
// may run on a goroutine of the test's own), and the server stays stopped.
// Start the server with StartStable when it will be restarted: a port
// from the ephemeral range can be taken by some client's socket while the
// server is down.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.life.Lock()
	defer s.life.Unlock()
	if s.running {
		return
	}
	var err error
	for deadline := time.Now().Add(time.Second); ; {
		if err = s.listen(s.Addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("restarting test DNS server on %s: %v", s.Addr, err)
	}
}

// StartPair starts two servers on one port, the first on 127.0.0.1 and the
// second on 127.0.0.2: the endpoints of a Service that name one port. When
// that port is taken on 127.0.0.2 it picks another pair, a bounded number
// of times, and fails the test when none is free: a busy port is no reason
// to skip. Both are shut down at test end.
func StartPair(t testing.TB, h1, h2 dns.HandlerFunc) (*Server, *Server) {
	t.Helper()
	var err error
	for try := 0; try < 50; try++ {
		var a, b *Server
		if a, err = Listen("127.0.0.1:0", h1); err != nil {
			break
		}
		_, port, _ := net.SplitHostPort(a.Addr)
		if b, err = Listen(net.JoinHostPort("127.0.0.2", port), h2); err == nil {
			t.Cleanup(a.Close)
			t.Cleanup(b.Close)
			return a, b
		}
		a.Close()
	}
	t.Fatalf("starting two test DNS servers on one port of 127.0.0.1 and 127.0.0.2: %v", err)
	return nil, nil
}

// StartStable is Start on a loopback port below the kernel's ephemeral
// range, so that after Stop no client socket can be given the port as its
// source port and Restart always gets it back.
func StartStable(t testing.TB, h dns.HandlerFunc) *Server {
	t.Helper()
	lo := ephemeralLow()
	var err error
	for try := 0; try < 50; try++ {
		port := 10000 + rand.IntN(max(lo-10000, 1))
		var s *Server
		if s, err = Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), h); err == nil {
			t.Cleanup(s.Close)
			return s
		}
	}
	t.Fatalf("starting test DNS server below port %d: %v", lo, err)
	return nil
}

// ephemeralLow is the lowest port the kernel hands out as a source port.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 10100 {
				return n
			}
		}
	}
	return 32768
}

// Zone answers like a small authoritative server for the test zone
// "example.test." (and "example.com."): A/AAAA for any name under it,
// MX and TXT at every name, NXDOMAIN with SOA for names starting "nx",
// NODATA with SOA for other types, and a large TXT (over 1232 bytes) at
// names starting "big". ttl is the TTL of every record.
func Zone(ttl uint32) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), o.Do())
		}
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		zone := zoneOf(name)
		soa := &dns.SOA{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
			Ns: under("ns", zone), Mbox: under("hostmaster", zone), Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl}
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: ttl}
		switch {
		case strings.HasPrefix(name, "nx"):
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		case q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 1)}}
		case q.Qtype == dns.TypeAAAA:
			m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("2001:db8::1")}}
		case q.Qtype == dns.TypeMX:
			m.Answer = []dns.RR{&dns.MX{Hdr: hdr, Preference: 10, Mx: under("mail", zone)}}
		case q.Qtype == dns.TypeTXT && strings.HasPrefix(name, "big"):
			for i := 0; i < 12; i++ {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr, Txt: []string{strings.Repeat(fmt.Sprint(i%10), 200)}})
			}
		case q.Qtype == dns.TypeTXT:
			m.Answer = []dns.RR{&dns.TXT{Hdr: hdr, Txt: []string{"v=test"}}}
		default:
			m.Ns = []dns.RR{soa}
		}
		WriteTruncated(w, r, m)
	}
}

// BigAZone is Zone, except that A at names starting "big" is 40 records
// (~700 octets: over 512, under 1232), not authoritative, truncated to the
// client's UDP size: the upstream of the protocol conformance tests.
func BigAZone(ttl uint32) dns.HandlerFunc {
	zone := Zone(ttl)
	return func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		if !strings.HasPrefix(strings.ToLower(q.Name), "big") || q.Qtype != dns.TypeA {
			zone(w, r)
			return
		}
		m := new(dns.Msg)
		m.SetReply(r)
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), o.Do())
		}
		for i := 0; i < 40; i++ {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A: net.IPv4(192, 0, 2, byte(i))})
		}
		WriteTruncated(w, r, m)
	}
}

// WriteTruncated writes m as the reply to r, truncated (TC set) to the
// client's UDP size when it came over UDP, as a real server does.
func WriteTruncated(w dns.ResponseWriter, r, m *dns.Msg) {
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

// under is label.zone, for the root zone too.
func under(label, zone string) string {
	if zone == "." {
		return label + "."
	}
	return label + "." + zone
}

// zoneOf is the last two labels of name (the name itself when it has
// fewer: "example." and the root are their own zones).
func zoneOf(name string) string {
	labels := dns.SplitDomainName(name)
	if len(labels) < 2 {
		return dns.Fqdn(name)
	}
	return dns.Fqdn(strings.Join(labels[len(labels)-2:], "."))
}

// Records answers every query with rcode and the records given in
// presentation form. "{q}" in a record stands for the question name as
// asked. SOA records go to the authority section, the rest to the answer.
// A record that does not parse panics the handler (a test bug).
func Records(rcode int, rrs ...string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Rcode = rcode
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), o.Do())
		}
		for _, s := range rrs {
			rr, err := dns.NewRR(strings.ReplaceAll(s, "{q}", r.Question[0].Name))
			if err != nil {
				panic(fmt.Sprintf("dnstest.Records: %q: %v", s, err))
			}
			if rr.Header().Rrtype == dns.TypeSOA {
				m.Ns = append(m.Ns, rr)
			} else {
				m.Answer = append(m.Answer, rr)
			}
		}
		WriteTruncated(w, r, m)
	}
}

// Rcode answers every query with an empty reply carrying rcode.
func Rcode(rcode int) dns.HandlerFunc { return Records(rcode) }

// Drop never answers (the query is read and ignored): an upstream that
// times out.
func Drop(dns.ResponseWriter, *dns.Msg) {}

// Gate holds the answers of the handlers it wraps until Open is called (or
// a generous bound passes, so that a test bug cannot hang the run).
type Gate struct {
	ch      chan struct{}
	once    sync.Once
	waiting atomic.Int64
}

// NewGate returns a closed gate; it is opened at test end.
func NewGate(t testing.TB) *Gate {
	g := &Gate{ch: make(chan struct{})}
	t.Cleanup(g.Open)
	return g
}

// Wrap returns h behind the gate.
func (g *Gate) Wrap(h dns.HandlerFunc) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		g.waiting.Add(1)
		select {
		case <-g.ch:
		case <-time.After(30 * time.Second):
		}
		g.waiting.Add(-1)
		h(w, r)
	}
}

// Waiting is how many queries are held at the gate.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// Open lets every held and future query through.
func (g *Gate) Open() { g.once.Do(func() { close(g.ch) }) }

// Raw is a loopback server on one port for UDP and TCP whose behaviour is
// scripted in bytes, for upstreams that misbehave: UDP is called for every
// datagram with a send function that writes a datagram back to its sender;
// TCP, when set, is handed every accepted connection (and must return once
// the connection fails; it is closed at test end). With TCP nil,
// connections are accepted and closed at once.
type Raw struct {
	Addr string

	pc     net.PacketConn
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   map[net.Conn]bool
	closed bool
	udpN   atomic.Int64
	conns  atomic.Int64
}

// StartRaw starts a Raw server; it is shut down at test end.
func StartRaw(t testing.TB, udp func(pkt []byte, send func([]byte)), tcp func(c net.Conn)) *Raw {
	t.Helper()
	pc, ln, err := listenPair("127.0.0.1:0")
	if err != nil {
		t.Fatalf("raw server: %v", err)
	}
	s := &Raw{Addr: pc.LocalAddr().String(), pc: pc, ln: ln, open: map[net.Conn]bool{}}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.udpN.Add(1)
			if udp != nil {
				pkt := append([]byte(nil), buf[:n]...)
				udp(pkt, func(b []byte) { _, _ = pc.WriteTo(b, from) })
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			if tcp == nil {
				c.Close()
				continue
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.open[c] = true
			s.wg.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.open, c)
					s.mu.Unlock()
					c.Close()
				}()
				tcp(c)
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and waits for its goroutines.
func (s *Raw) Close() {
	s.pc.Close()
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// UDPCount is how many datagrams arrived.
func (s *Raw) UDPCount() int { return int(s.udpN.Load()) }

// TCPConns is how many TCP connections were accepted.
func (s *Raw) TCPConns() int { return int(s.conns.Load()) }

// ReadTCP reads one length-prefixed DNS message from c.
func ReadTCP(c net.Conn) (*dns.Msg, error) {
	co := &dns.Conn{Conn: c}
	return co.ReadMsg()
}

// WriteTCP writes m to c with its length prefix.
func WriteTCP(c net.Conn, m *dns.Msg) error {
	co := &dns.Conn{Conn: c}
	return co.WriteMsg(m)
}

// Pack packs m or panics (a test bug).
func Pack(m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		panic(fmt.Sprintf("dnstest.Pack: %v", err))
	}
	return b
}
