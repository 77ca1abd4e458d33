package agent

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// TestClusterZoneForward: with --cluster-zone forward the cluster's zones
// and the reverse zones go to --cluster-dns over TCP, are cached no longer
// than the cluster TTL, and external names still go to the upstream.
func TestClusterZoneForward(t *testing.T) {
	central := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		switch {
		case q.Qtype == dns.TypePTR:
			rr, _ := dns.NewRR(q.Name + " 30 IN PTR web.team-a.svc.cluster.local.")
			m.Answer = []dns.RR{rr}
		case strings.HasPrefix(q.Name, "web."):
			rr, _ := dns.NewRR(q.Name + " 30 IN A 10.96.0.10")
			m.Answer = []dns.RR{rr}
		default:
			m.Rcode = dns.RcodeNameError
			soa, _ := dns.NewRR("cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30")
			m.Ns = []dns.RR{soa}
		}
		_ = w.WriteMsg(m)
	})
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	stub := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN PTR onprem.corp.example.")
		m.Answer = []dns.RR{rr}
		_ = w.WriteMsg(m)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	args := []string{"--listen", addr, "--admin", "", "--loop-check=false", "--lameduck", "0s", "--upstream", up.Addr,
		"--stub-domain", "10.in-addr.arpa=" + stub.Addr,
		"--cluster-zone", "forward", "--cluster-dns", central.Addr, "--cluster-ttl", "2s", "--cluster-domain", "cluster.local,example.internal",
		"--node-name", ""}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The caches' clock runs ahead of real time by skew: the cluster TTL
	// passes without waiting for it.
	var skew atomic.Int64
	origin := time.Now()
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args,
		cacheClock: func() time.Duration { return time.Since(origin) + time.Duration(skew.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
	c := &dns.Client{Timeout: time.Second}
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		var r *dns.Msg
		dnstest.Eventually(t, 5*time.Second, "an answer to "+name, func() error {
			var err error
			if r, _, err = c.Exchange(m, addr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
		return r
	}
	r := ask("web.team-a.svc.cluster.local.", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.96.0.10" || r.Answer[0].Header().Ttl > 2 {
		t.Fatalf("forwarded cluster name: %v", r)
	}
	if central.Count() != 1 || central.TCPCount() != 1 {
		t.Fatalf("central saw %d queries, %d over TCP; want 1 over TCP", central.Count(), central.TCPCount())
	}
	// Cached: no second query within the cluster TTL.
	ask("web.team-a.svc.cluster.local.", dns.TypeA)
	if central.Count() != 1 {
		t.Fatalf("central asked again within the cluster TTL: %d", central.Count())
	}
	// The second zone, the reverse zones and negative answers too.
	if r := ask("web.team-a.svc.example.internal.", dns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("second zone: %v", r)
	}
	if r := ask("10.0.96.172.in-addr.arpa.", dns.TypePTR); len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "web.team-a.svc.cluster.local." {
		t.Fatalf("PTR: %v", r)
	}
	// A stub domain inside a forwarded zone keeps its servers.
	if r := ask("5.0.0.10.in-addr.arpa.", dns.TypePTR); len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "onprem.corp.example." || stub.Count() != 1 {
		t.Fatalf("PTR in the stub domain: %v", r)
	}
	if r := ask("nope.team-a.svc.cluster.local.", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || r.Ns[0].Header().Ttl > 2 {
		t.Fatalf("NXDOMAIN: %v", r)
	}
	if central.Count() != 4 {
		t.Fatalf("central saw %d queries, want 4", central.Count())
	}
	// External names go upstream, not to the cluster DNS.
	if r := ask("www.example.com.", dns.TypeA); len(r.Answer) != 1 || up.Count() != 1 || central.Count() != 4 {
		t.Fatalf("external: %v (upstream %d, central %d)", r, up.Count(), central.Count())
	}
	// After the cluster TTL the name is asked again.
	skew.Add(int64(2100 * time.Millisecond))
	ask("web.team-a.svc.cluster.local.", dns.TypeA)
	if central.Count() != 5 {
		t.Fatalf("central saw %d queries after the TTL, want 5", central.Count())
	}
}

func TestLocalOnlyOptions(t *testing.T) {
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:5353", "--cluster-zone", "forward", "--cluster-dns", "192.0.2.10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := localOnlyOptions(cfg); len(got) != 0 {
		t.Fatalf("defaults reported as set: %v", got)
	}
	cfg, err = config.Load([]string{"--listen", "127.0.0.1:5353", "--cluster-zone", "forward", "--cluster-dns", "192.0.2.10",
		"--pods", "verified", "--namespaces", "a", "--fallthrough="}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(localOnlyOptions(cfg), ","); got != "pods,namespaces,fallthrough" {
		t.Fatalf("%s", got)
	}
}
