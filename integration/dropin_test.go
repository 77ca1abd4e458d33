//go:build integration

package integration

// The features that let nodedns replace CoreDNS's hosts, rewrite,
// loadbalance and errors plugins, through the real agent binary on
// loopback, as an operator configures them in the ConfigMap: static records
// (entries and a hosts file re-read on change), name rewrites answered
// under the name asked, round-robin order across queries, and the warn
// lines for SERVFAILs, rate-limited. No API server is needed: the features
// sit in front of the cluster zone.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// dropinUpstream answers pool.example.com with three addresses,
// broken.example.com with SERVFAIL, <x>.new.example with A 192.0.2.77,
// and NXDOMAIN for everything else.
func dropinUpstream(t *testing.T) (*dnstest.Server, *atomic.Int64) {
	var broken atomic.Int64
	srv := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		switch {
		case name == "pool.example.com." && q.Qtype == dns.TypeA:
			for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
				m.Answer = append(m.Answer, dnstest.MustRR(q.Name+" 300 IN A "+ip))
			}
		case strings.HasPrefix(name, "broken"):
			broken.Add(1)
			m.Rcode = dns.RcodeServerFailure
		case strings.HasSuffix(name, ".new.example."):
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN A 192.0.2.77")}
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{dnstest.MustRR("example.com. 300 IN SOA ns.example.com. h.example.com. 1 7200 1800 86400 300")}
		}
		_ = w.WriteMsg(m)
	})
	return srv, &broken
}

// startDropinAgent runs the binary with --config file and waits for /ready.
func startDropinAgent(t *testing.T, config string) (addr, logPath string) {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	addr = "127.0.0.1:" + strconv.Itoa(dnsPort)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("listen: [%s]\nadmin: %s\nloop-check: false\nlameduck: 0s\n%s", addr, admin, config)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(dir, "nodedns.log")
	p, err := startCPProc("nodedns", logPath, nodednsBin, "serve", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nodedns log (last 60 lines):\n%s", tailFile(logPath, 60))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("agent not ready: %v\n%s", err, tailFile(logPath, 40))
	}
	return addr, logPath
}

// TestDropInAgent: hosts, rewrite, loadbalance and failure lines through
// the binary.
func TestDropInAgent(t *testing.T) {
	up, broken := dropinUpstream(t)
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostsFile, []byte("# managed by a test\n192.0.2.60 files.corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, logPath := startDropinAgent(t, fmt.Sprintf(`upstream: [%s]
hosts:
  entries:
    - 192.0.2.50 static.corp.example static-alias.corp.example
    - 192.0.2.51 static.corp.example
    - 2001:db8::50 static.corp.example
    - 192.0.2.52 v4only.corp.example
  file: %s
  ttl: 120s
  reload: 100ms
  zones: [corp.example]
rewrite:
  - {type: exact, from: db.legacy.example, to: static.corp.example}
  - {type: regex, from: '^(.+)\.old\.example\.$', to: '{1}.new.example'}
loadbalance: round_robin
`, up.Addr, hostsFile))

	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		r, err := dnstest.Query(addr, "udp", name, qtype)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	addrs := func(r *dns.Msg) []string {
		var out []string
		for _, rr := range r.Answer {
			switch v := rr.(type) {
			case *dns.A:
				out = append(out, v.A.String())
			case *dns.AAAA:
				out = append(out, v.AAAA.String())
			case *dns.PTR:
				out = append(out, v.Ptr)
			}
		}
		return out
	}

	// Static records: authoritative, the TTL asked for, the client's case.
	r := ask("Static.Corp.Example.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 2 || r.Answer[0].Header().Ttl != 120 ||
		r.Answer[0].Header().Name != "Static.Corp.Example." {
		t.Fatalf("hosts A: %v", r)
	}
	if got := addrs(ask("static.corp.example.", dns.TypeAAAA)); strings.Join(got, ",") != "2001:db8::50" {
		t.Fatalf("hosts AAAA: %v", got)
	}
	if r := ask("v4only.corp.example.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 0 {
		t.Fatalf("NODATA for the missing family: %v", r)
	}
	if got := addrs(ask("50.2.0.192.in-addr.arpa.", dns.TypePTR)); strings.Join(got, ",") != "static.corp.example.,static-alias.corp.example." {
		t.Fatalf("PTR: %v", got)
	}
	// In the zone without a record and without fallthrough: SERVFAIL, as
	// CoreDNS; outside the zone: the upstream.
	if r := ask("nope.corp.example.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("in zone, no record: %v", r)
	}
	if r := ask("nope.example.com.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("outside the zone: %v", r)
	}
	// The hosts file, and a change to it.
	if got := addrs(ask("files.corp.example.", dns.TypeA)); strings.Join(got, ",") != "192.0.2.60" {
		t.Fatalf("hosts file: %v", got)
	}
	if err := os.WriteFile(hostsFile, []byte("192.0.2.61 files.corp.example\n192.0.2.62 new.corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dnstest.Eventually(t, 10*time.Second, "the hosts file re-read", func() error {
		if got := addrs(ask("new.corp.example.", dns.TypeA)); strings.Join(got, ",") != "192.0.2.62" {
			return fmt.Errorf("new.corp.example: %v", got)
		}
		return nil
	})
	if got := addrs(ask("files.corp.example.", dns.TypeA)); strings.Join(got, ",") != "192.0.2.61" {
		t.Fatalf("changed entry: %v", got)
	}

	// A real client: dig sees the answer under the name it asked.
	{
		digBin := needTool(t, "dig")
		host, port, _ := strings.Cut(addr, ":")
		out, err := exec.Command(digBin, "@"+host, "-p", port, "+noall", "+answer", "DB.legacy.example", "A").CombinedOutput()
		if err != nil {
			t.Fatalf("dig: %v: %s", err, out)
		}
		if !regexp.MustCompile(`(?m)^DB\.legacy\.example\.\s+120\s+IN\s+A\s+192\.0\.2\.5[01]$`).Match(out) {
			t.Fatalf("dig through the exact rewrite:\n%s", out)
		}
	}
	// Rewrites: to the static records and, by regex, to the upstream.
	r = ask("db.legacy.example.", dns.TypeA)
	if len(r.Answer) != 2 || r.Answer[0].Header().Name != "db.legacy.example." || r.Question[0].Name != "db.legacy.example." {
		t.Fatalf("exact rewrite: %v", r)
	}
	r = ask("www.old.example.", dns.TypeA)
	if got := addrs(r); len(got) != 1 || got[0] != "192.0.2.77" || r.Answer[0].Header().Name != "www.old.example." {
		t.Fatalf("regex rewrite: %v", r)
	}

	// Round robin: over three queries each of the three addresses comes
	// first once (cache hits on the reader included), and the static
	// records' two addresses take turns.
	first := map[string]int{}
	for i := 0; i < 6; i++ {
		first[addrs(ask("pool.example.com.", dns.TypeA))[0]]++
	}
	if len(first) != 3 || first["192.0.2.1"] != 2 || first["192.0.2.2"] != 2 || first["192.0.2.3"] != 2 {
		t.Fatalf("first address over 6 replies: %v", first)
	}
	firstStatic := map[string]bool{}
	for i := 0; i < 2; i++ {
		firstStatic[addrs(ask("static.corp.example.", dns.TypeA))[0]] = true
	}
	if len(firstStatic) != 2 {
		t.Fatalf("static records not rotated: %v", firstStatic)
	}

	// Failures at warn level, rate-limited: 60 SERVFAILs from the upstream
	// (distinct names: nothing cached) make a burst of lines, not 60.
	for i := 0; i < 60; i++ {
		if r := ask(fmt.Sprintf("broken%d.example.com.", i), dns.TypeA); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("broken%d: %v", i, r)
		}
	}
	if broken.Load() < 60 {
		t.Fatalf("upstream saw %d SERVFAIL queries", broken.Load())
	}
	logs, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^.*level=WARN msg="SERVFAIL sent".*reason="upstream answered SERVFAIL".*$`).FindAll(logs, -1)
	if len(lines) < 1 || len(lines) > 15 {
		t.Fatalf("%d warn lines for 60 upstream SERVFAILs, want a rate-limited burst:\n%s", len(lines), tailFile(logPath, 30))
	}
	if !strings.Contains(string(lines[0]), "name=broken0.example.com.") {
		t.Errorf("first line: %s", lines[0])
	}
	// An upstream's SERVFAIL is its answer, not a failed exchange (issue
	// 13): the SERVFAIL lines above say so, and no exchange failure is
	// logged for it.
	if n := strings.Count(string(logs), `msg="upstream exchange failed"`); n != 0 {
		t.Errorf("%d upstream failure lines for SERVFAIL answers, want none", n)
	}
	// One more after the bucket refilled carries the suppressed count.
	time.Sleep(1100 * time.Millisecond)
	ask("broken-late.example.com.", dns.TypeA)
	dnstest.Eventually(t, 5*time.Second, "the suppressed count", func() error {
		logs, _ := os.ReadFile(logPath)
		if !regexp.MustCompile(`msg="SERVFAIL sent".*name=broken-late\.example\.com\..*suppressed=[1-9]`).Match(logs) {
			return fmt.Errorf("no line for broken-late with suppressed=N")
		}
		return nil
	})
	t.Logf("FIGURE dropin: %d SERVFAIL warn lines for 61 SERVFAILs", len(lines)+1)
}
