package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// TestDropInLiveReload: hosts, rewrite and loadbalance change with the
// config file, without a restart.
func TestDropInLiveReload(t *testing.T) {
	reloadPoll = 50 * time.Millisecond
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", r.Question[0].Name, ip))
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	base := fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\nupstream: [%s]\n", addr, up.Addr)
	writeConfigMap(t, dir, base+"hosts:\n  entries: [192.0.2.50 static.example]\n  fallthrough: []\n")
	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	c := &dns.Client{Timeout: time.Second}
	ask := func(name string) string {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, rr := range r.Answer {
			out = append(out, rr.Header().Name+" "+rr.(*dns.A).A.String())
		}
		return dns.RcodeToString[r.Rcode] + " " + strings.Join(out, ",")
	}
	waitFor := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := ask(name)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q, want %q", name, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("static.example.", "NOERROR static.example. 192.0.2.50")
	waitFor("svc.legacy.", "NOERROR svc.legacy. 192.0.2.1,svc.legacy. 192.0.2.2")

	writeConfigMap(t, dir, base+`hosts:
  entries: [192.0.2.51 static.example, 192.0.2.60 target.internal]
  fallthrough: []
rewrite:
  - {type: suffix, from: .legacy, to: .internal}
loadbalance: round_robin
`)
	waitFor("static.example.", "NOERROR static.example. 192.0.2.51")
	waitFor("target.legacy.", "NOERROR target.legacy. 192.0.2.60")
	// Round robin: the upstream's two addresses take turns in first place.
	firsts := map[string]bool{}
	for i := 0; i < 4; i++ {
		firsts[strings.Fields(ask("pool.example."))[2]] = true
	}
	if len(firsts) != 2 {
		t.Fatalf("loadbalance after reload: first addresses %v", firsts)
	}
	// Off again.
	writeConfigMap(t, dir, base)
	waitFor("static.example.", "NOERROR static.example. 192.0.2.1,static.example. 192.0.2.2")
}
