package agent

import (
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
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", r.Question[0].Name, ip))
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	dir := t.TempDir()
	base := fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\nupstream: [%s]\n", addr, up.Addr)
	writeConfigMap(t, dir, base+"hosts:\n  entries: [192.0.2.50 static.example]\n  fallthrough: []\n")
	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args, reloadPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
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
		dnstest.Eventually(t, 5*time.Second, fmt.Sprintf("%s answered %q", name, want), func() error {
			if got := ask(name); got != want {
				return fmt.Errorf("%s: %q, want %q", name, got, want)
			}
			return nil
		})
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

// TestPluginsLiveReload: local, the access list and templates change with
// the config file, without a restart.
func TestPluginsLiveReload(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	dir := t.TempDir()
	base := fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\nupstream: [%s]\n", addr, up.Addr)
	writeConfigMap(t, dir, base)
	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args, Version: "1.2.3", reloadPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
	c := &dns.Client{Timeout: time.Second}
	ask := func(name string, qtype, qclass uint16) string {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Question[0].Qclass = qclass
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err.Error()
		}
		out := []string{dns.RcodeToString[r.Rcode]}
		for _, rr := range r.Answer {
			out = append(out, strings.Fields(rr.String())[4])
		}
		return strings.Join(out, " ")
	}
	waitFor := func(name string, qtype, qclass uint16, want string) {
		t.Helper()
		dnstest.Eventually(t, 5*time.Second, fmt.Sprintf("%s %s answered %q", name, dns.TypeToString[qtype], want), func() error {
			if got := ask(name, qtype, qclass); got != want {
				return fmt.Errorf("%s %s: %q, want %q", name, dns.TypeToString[qtype], got, want)
			}
			return nil
		})
	}
	waitFor("www.example.com.", dns.TypeAAAA, dns.ClassINET, "NOERROR 2001:db8::1")
	waitFor("version.bind.", dns.TypeTXT, dns.ClassCHAOS, "REFUSED")

	writeConfigMap(t, dir, base+`local: true
chaos: true
acl:
  - zones: [blocked.example.com]
    policies: [{action: block}]
templates:
  - {type: AAAA, rcode: NOERROR}
`)
	waitFor("www.example.com.", dns.TypeAAAA, dns.ClassINET, "NOERROR")
	waitFor("version.bind.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR \"nodedns-1.2.3\"")
	waitFor("localhost.", dns.TypeA, dns.ClassINET, "NOERROR 127.0.0.1")
	waitFor("x.blocked.example.com.", dns.TypeA, dns.ClassINET, "REFUSED")
	waitFor("www.example.com.", dns.TypeA, dns.ClassINET, "NOERROR 192.0.2.1")

	// A bad template changes nothing.
	writeConfigMap(t, dir, base+"templates:\n  - {type: AAAA, match: ['(']}\n")
	dnstest.Eventually(t, 5*time.Second, "the bad template to be rejected", func() error {
		if n := a.reloads.failures.Load(); n != 1 {
			return fmt.Errorf("%d failed reloads", n)
		}
		return nil
	})
	waitFor("www.example.com.", dns.TypeAAAA, dns.ClassINET, "NOERROR")
	// Off again.
	writeConfigMap(t, dir, base)
	waitFor("www.example.com.", dns.TypeAAAA, dns.ClassINET, "NOERROR 2001:db8::1")
	waitFor("x.blocked.example.com.", dns.TypeA, dns.ClassINET, "NOERROR 192.0.2.1")
}
