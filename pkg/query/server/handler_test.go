package server

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// fakeResolver is the transport's tests' Handler: it answers every query
// off the reader, as a pipeline with nothing but an upstream would, with
// an A record, or as fn says; a query it is refused gets SERVFAIL. Bad
// packets (the pipeline's business, tested there) are dropped.
type fakeResolver struct {
	calls atomic.Int64
	fn    func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
}

func (f *fakeResolver) Answer(dst []byte, req *Request) ([]byte, Verdict) {
	if req.Err != nil || req.Query.Response() {
		return dst, Drop
	}
	return dst, Wait
}

func (f *fakeResolver) Resolve(ctx context.Context, dst []byte, req *Request) []byte {
	q := new(dns.Msg)
	if err := q.Unpack(req.Packet); err != nil || len(q.Question) != 1 {
		return dst
	}
	f.calls.Add(1)
	var m *dns.Msg
	if f.fn != nil {
		var err error
		if m, err = f.fn(ctx, q); err != nil {
			return f.Refuse(dst, req)
		}
	} else {
		m = new(dns.Msg)
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
	}
	m.SetReply(q)
	m.RecursionAvailable = true
	if req.Proto == "udp" {
		m.Truncate(dns.MinMsgSize)
	}
	b, err := m.Pack()
	if err != nil {
		return f.Refuse(dst, req)
	}
	return append(dst, b...)
}

func (f *fakeResolver) Refuse(dst []byte, req *Request) []byte {
	q := new(dns.Msg)
	if err := q.Unpack(req.Packet); err != nil {
		return dst
	}
	m := new(dns.Msg)
	m.SetRcode(q, dns.RcodeServerFailure)
	b, err := m.Pack()
	if err != nil {
		return dst
	}
	return append(dst, b...)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// start runs a server on 127.0.0.1:0 and stops it at test end.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	return startOn(t, "127.0.0.1:0", cfg)
}

// startOn runs a server on listen (handler: a fakeResolver unless cfg
// names one) and stops it at test end (a Shutdown the test made itself
// first is fine).
func startOn(t *testing.T, listen string, cfg Config) (*Server, string) {
	t.Helper()
	return startWith(t, listen, cfg, nil)
}

// startWith is startOn with hook, when not nil, called on the server
// before its sockets are opened and its readers run.
func startWith(t *testing.T, listen string, cfg Config, hook func(s *Server)) (*Server, string) {
	t.Helper()
	cfg.Listen = []string{listen}
	if cfg.SocketsPerAddr == 0 {
		cfg.SocketsPerAddr = 1
	}
	if cfg.Handler == nil {
		cfg.Handler = &fakeResolver{}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(s)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	// UDP and TCP share the port only when it was asked for explicitly; with
	// port 0 the TCP listener has its own.
	return s, s.Addrs()[0].String()
}

func q(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// TestRequestDetached: the copy a goroutine gets owns its packet and its
// question name, whatever the reader does with its own buffer next.
func TestRequestDetached(t *testing.T) {
	buf := dnstest.Pack(q("Www.Example.Test.", dns.TypeA))
	r := new(Request)
	r.Read("udp", 0, netip.MustParseAddr("127.0.0.1"), time.Now(), buf)
	c := r.detached()
	for i := range buf {
		buf[i] = 0
	}
	r.Read("udp", 0, netip.MustParseAddr("127.0.0.1"), time.Now(), dnstest.Pack(q("other.example.", dns.TypeAAAA)))
	if c.Err != nil || c.Query.Name != "www.example.test." || string(c.Query.RawName[1:4]) != "Www" || c.Packet[12] != 3 {
		t.Fatalf("detached copy changed with the reader's buffer: %q %q", c.Query.Name, c.Query.RawName)
	}
}
