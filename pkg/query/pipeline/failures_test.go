package pipeline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// recordLimiter lets every line through and remembers the reasons asked.
type recordLimiter struct {
	mu      sync.Mutex
	reasons []string
	deny    bool
}

func (l *recordLimiter) Allow(reason string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.deny {
		return 0, false
	}
	l.reasons = append(l.reasons, reason)
	return 0, true
}

func (l *recordLimiter) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reasons...)
}

// TestServfailLogged: every SERVFAIL the server sends is put to the failure
// limiter with its reason and written at warn level, without debug.
func TestServfailLogged(t *testing.T) {
	lim := &recordLimiter{}
	var logs dnstest.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		switch q.Question[0].Name {
		case "down.example.":
			return nil, errors.New("every attempt failed: i/o timeout")
		case "sf.example.":
			m := new(dns.Msg)
			m.SetRcode(q, dns.RcodeServerFailure)
			return m, nil
		}
		m := new(dns.Msg)
		m.SetReply(q)
		return m, nil
	}}
	cl := testCluster()
	cl.notSynced = true
	_, addr := start(t, Config{Resolver: res, Cluster: cl, Failures: lim, Logger: log})
	for _, n := range []string{"down.example.", "sf.example.", "web.team-a.svc.cluster.local."} {
		if r := dnstest.Exchange(t, addr, "udp", q(n, dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("%s: rcode %d, want SERVFAIL", n, r.Rcode)
		}
	}
	if r := dnstest.Exchange(t, addr, "udp", q("ok.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("ok.example.: rcode %d", r.Rcode)
	}
	want := []string{failUpstream, failUpstreamSF, failNotSynced}
	if got := lim.got(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("reasons %q, want %q", got, want)
	}
	out := logs.String()
	for _, w := range []string{`level=WARN msg="SERVFAIL sent" component=server reason="upstream failed" name=down.example. type=A`,
		`err="every attempt failed: i/o timeout"`, `reason="upstream answered SERVFAIL" name=sf.example.`} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
}

// TestCachedServfailHitAllocs: a cached SERVFAIL served on the reader goes
// to the failure log too, and costs no allocation when the limiter holds
// the line back (the storm case).
func TestCachedServfailHitAllocs(t *testing.T) {
	c, err := cache.New(cache.Config{Size: 100}, noUpstream{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m := new(dns.Msg)
	m.SetQuestion("broken.example.", dns.TypeA)
	m.Response, m.Rcode = true, dns.RcodeServerFailure
	c.Put(cache.KeyOf(m), m)
	lim := &recordLimiter{}
	s, err := New(Config{Resolver: c, Failures: lim,
		Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pkt := packet(t, "broken.example.", dns.TypeA, true)
	out := make([]byte, 0, 4096)
	b, v := serveOnce(s, pkt, out)
	if v != server.Reply || b[3]&0xF != dns.RcodeServerFailure {
		t.Fatalf("verdict %d rcode %d: want a cached SERVFAIL on the reader", v, b[3]&0xF)
	}
	if got := lim.got(); len(got) != 1 || got[0] != failCached {
		t.Fatalf("reasons %q", got)
	}
	lim.deny = true
	if n := testing.AllocsPerRun(200, func() { serveOnce(s, pkt, out) }); n != 0 {
		t.Fatalf("%.1f allocations per suppressed cached SERVFAIL", n)
	}
}
