package upstream_test

// An upstream that sets TC over UDP and again over TCP (or over TCP only:
// force-tcp, a tcp:// server). A truncated reply read over a stream is no
// answer: TC tells a UDP client to ask over TCP, and over TCP there is
// nothing further to ask. Handed back as a reply it became an empty
// NOERROR at the client ("no such record"); it must be a failed attempt,
// so the exchange fails (SERVFAIL, or the stale answer) when every
// attempt does.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// alwaysTruncated answers every query, over UDP and TCP alike, with an
// empty NOERROR reply that has TC set.
func alwaysTruncated(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Truncated = true
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	_ = w.WriteMsg(m)
}

func TestAttackTCTwiceIsNotAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(addr string) upstream.Config
	}{
		{"udp-then-tcp", func(addr string) upstream.Config {
			return upstream.Config{Servers: []string{addr}}
		}},
		{"force-tcp", func(addr string) upstream.Config {
			return upstream.Config{Servers: []string{addr}, ForceTCP: true}
		}},
		{"tcp-scheme", func(addr string) upstream.Config {
			return upstream.Config{Servers: []string{"tcp://" + addr}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := dnstest.Start(t, alwaysTruncated)
			cfg := tc.cfg(up.Addr)
			cfg.TryTimeout, cfg.Budget, cfg.Logger = time.Second, 2*time.Second, quiet
			f, err := upstream.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			q := new(dns.Msg)
			q.SetQuestion("tc-twice.example.", dns.TypeA)
			q.SetEdns0(1232, false)
			start := time.Now()
			r, err := f.Exchange(context.Background(), stage.Origin{}, q)
			if up.TCPCount() == 0 {
				t.Fatalf("the upstream was never asked over TCP (UDP %d): the test does not exercise the retry", up.Count())
			}
			if err == nil {
				t.Fatalf("truncated over UDP and over TCP: got a reply (%s, TC %v, %d answers, %d authority), "+
					"want an error (SERVFAIL to the client): an empty NOERROR reads as \"no such record\"",
					dns.RcodeToString[r.Rcode], r.Truncated, len(r.Answer), len(r.Ns))
			}
			if !errors.Is(err, upstream.ErrAllFailed) {
				t.Errorf("error %v, want ErrAllFailed", err)
			}
			if took := time.Since(start); took > 500*time.Millisecond {
				t.Errorf("the exchange took %v: a truncated reply is a failed attempt at once, not a timeout", took)
			}
			if s := f.Servers()[0]; s.Down() {
				t.Errorf("server marked down for answering truncated (it is alive): %s", s.Stats().LastError)
			}
		})
	}
}
