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

// Scripted is an upstream whose answers follow the first label of the
// name asked, whose behaviour can switch mid-test (SetMode) and which logs
// who asked what, so that tests compare who was asked, how, how often:
//
//	sf*      SERVFAIL
//	ref*     REFUSED
//	nx*      NXDOMAIN, the SOA of the name's parent
//	nodata*  NOERROR, no answer, the SOA of the name's parent
//	other    A: A V4, AAAA: AAAA V6 (TTL TTL); other types: NODATA + SOA
//
// NS questions (health probes) get NOERROR and no record. Every record
// carries TTL, so an answer says which server gave it.
type Scripted struct {
	*Server
	V4, V6 string
	TTL    uint32

	mode atomic.Int32
	mu   sync.Mutex
	log  []Asked
}

// Mode is what a Scripted server does with every query.
type Mode int32

// Modes.
const (
	ModeScript    Mode = iota // answer by the script
	ModeServfail              // SERVFAIL to everything
	ModeRefused               // REFUSED to everything
	ModeNXDomain              // NXDOMAIN to everything but NS
	ModeBlackhole             // never answer (probes neither)
)

// Asked is one query a Scripted server got.
type Asked struct {
	Name string
	Type uint16
	RD   bool
	EDNS bool
	Net  string // udp or tcp
	At   time.Time
}

func (a Asked) String() string {
	return fmt.Sprintf("%s %s rd=%v edns=%v %s", a.Name, dns.TypeToString[a.Type], a.RD, a.EDNS, a.Net)
}

// StartScripted starts a scripted server on 127.0.0.1:0 whose addresses
// are v4 and v6 with TTL ttl.
func StartScripted(t testing.TB, v4, v6 string, ttl uint32) *Scripted {
	t.Helper()
	s := &Scripted{V4: v4, V6: v6, TTL: ttl}
	s.Server = Start(t, s.handle)
	return s
}

// SetMode switches the server's behaviour.
func (s *Scripted) SetMode(m Mode) { s.mode.Store(int32(m)) }

// Asked returns the queries logged, in order.
func (s *Scripted) Asked() []Asked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Asked(nil), s.log...)
}

// AskedFor is how many queries asked name (any case) of qtype.
func (s *Scripted) AskedFor(name string, qtype uint16) int {
	n := 0
	for _, a := range s.Asked() {
		if strings.EqualFold(a.Name, name) && a.Type == qtype {
			n++
		}
	}
	return n
}

// Queries is how many queries were not health probes (NS).
func (s *Scripted) Queries() int {
	n := 0
	for _, a := range s.Asked() {
		if a.Type != dns.TypeNS {
			n++
		}
	}
	return n
}

func (s *Scripted) handle(w dns.ResponseWriter, r *dns.Msg) {
	q := r.Question[0]
	netw := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		netw = "tcp"
	}
	s.mu.Lock()
	s.log = append(s.log, Asked{Name: strings.ToLower(q.Name), Type: q.Qtype, RD: r.RecursionDesired, EDNS: r.IsEdns0() != nil, Net: netw, At: time.Now()})
	s.mu.Unlock()
	m := s.Reply(r)
	if m == nil {
		return
	}
	_ = w.WriteMsg(m)
}

// Reply is what the server answers r (nil: nothing).
func (s *Scripted) Reply(r *dns.Msg) *dns.Msg {
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	label, parent, _ := strings.Cut(name, ".")
	if parent == "" {
		parent = "."
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(1232, o.Do())
	}
	soa := func() dns.RR {
		rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN SOA ns.%s hostmaster.%s 1 7200 1800 86400 %d", parent, s.TTL, strings.TrimPrefix(parent, "."), strings.TrimPrefix(parent, "."), s.TTL))
		return rr
	}
	mode := Mode(s.mode.Load())
	switch {
	case mode == ModeBlackhole:
		return nil
	case mode == ModeServfail:
		m.Rcode = dns.RcodeServerFailure
		return m
	case mode == ModeRefused:
		m.Rcode = dns.RcodeRefused
		return m
	case q.Qtype == dns.TypeNS:
		return m
	case mode == ModeNXDomain:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa()}
		return m
	case strings.HasPrefix(label, "sf"):
		m.Rcode = dns.RcodeServerFailure
	case strings.HasPrefix(label, "ref"):
		m.Rcode = dns.RcodeRefused
	case strings.HasPrefix(label, "nx"):
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa()}
	case strings.HasPrefix(label, "nodata"):
		m.Ns = []dns.RR{soa()}
	case q.Qtype == dns.TypeA && s.V4 != "":
		rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN A %s", q.Name, s.TTL, s.V4))
		m.Answer = []dns.RR{rr}
	case q.Qtype == dns.TypeAAAA && s.V6 != "":
		rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN AAAA %s", q.Name, s.TTL, s.V6))
		m.Answer = []dns.RR{rr}
	default:
		m.Ns = []dns.RR{soa()}
	}
	return m
}
