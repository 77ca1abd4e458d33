// Package dnstest runs real DNS servers on loopback for tests and
// benchmarks: an upstream whose behaviour a test scripts per query, and
// counters of what it was asked. Servers listen on 127.0.0.1:0 (UDP and TCP
// on the same port) and stop when the test ends.
package dnstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Server is a scripted DNS server.
type Server struct {
	Addr string // 127.0.0.1:port, UDP and TCP

	udp, tcp *dns.Server

	mu      sync.Mutex
	handler dns.HandlerFunc
	queries []dns.Question
	total   atomic.Int64
	udpN    atomic.Int64
	tcpN    atomic.Int64
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
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening UDP %s: %w", addr, err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	host, _, _ := net.SplitHostPort(pc.LocalAddr().String())
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("listening TCP on port %d: %w", port, err)
	}
	s.Addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	s.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve("udp")), NotifyStartedFunc: notify}
	s.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(s.serve("tcp")), NotifyStartedFunc: notify,
		ReadTimeout: 2 * time.Second, IdleTimeout: func() time.Duration { return 5 * time.Second }}
	go func() { _ = s.udp.ActivateAndServe() }()
	go func() { _ = s.tcp.ActivateAndServe() }()
	<-started
	<-started
	return s, nil
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

// Close stops the server.
func (s *Server) Close() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
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
		soa := &dns.SOA{Hdr: dns.RR_Header{Name: zoneOf(name), Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
			Ns: "ns." + zoneOf(name), Mbox: "hostmaster." + zoneOf(name), Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl}
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
			m.Answer = []dns.RR{&dns.MX{Hdr: hdr, Preference: 10, Mx: "mail." + zoneOf(name)}}
		case q.Qtype == dns.TypeTXT && strings.HasPrefix(name, "big"):
			for i := 0; i < 12; i++ {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr, Txt: []string{strings.Repeat(fmt.Sprint(i%10), 200)}})
			}
		case q.Qtype == dns.TypeTXT:
			m.Answer = []dns.RR{&dns.TXT{Hdr: hdr, Txt: []string{"v=test"}}}
		default:
			m.Ns = []dns.RR{soa}
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		_ = w.WriteMsg(m)
	}
}

func zoneOf(name string) string {
	labels := dns.SplitDomainName(name)
	if len(labels) < 2 {
		return "."
	}
	return dns.Fqdn(strings.Join(labels[len(labels)-2:], "."))
}
