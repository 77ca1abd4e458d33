//go:build integration

package integration

// Differential test of CoreDNS 1.15's forward options: each configuration
// is one Corefile, run by CoreDNS and (through `nodedns migrate`) by
// nodedns, against scripted upstreams whose modes the script switches
// (fwdiff_harness_test.go). Replies, the exchanges each upstream saw per
// question, the health probes' questions and, where a configuration is
// about time, how long the replies took must agree.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fwdAllowed are the differences nodedns makes on purpose.
var fwdAllowed = []fdAllow{
	{configs: []string{"no_failover"}, match: func(a *fdAsk, c, n string) bool {
		return c == n && strings.HasPrefix(a.name, "plain-answer.") && sum(a.c.counts) == sum(a.n.counts)+1
	}, why: "a question asked again: nodedns always keeps a cache (its migrate says so), CoreDNS without the cache plugin asks the upstream again"},
}

func fwdConfigs() []fdConfig {
	plain := func(n int) []fdUpSpec { return make([]fdUpSpec, n) }
	return []fdConfig{
		{name: "failover", ups: plain(3), blocks: []fdBlock{{".", `forward . {U0} {U1} {U2} {
  policy sequential
  failover SERVFAIL REFUSED
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdServfail)
			r.mode(1, fdRefused)
			r.expect(r.ask("failover-third"), dns.RcodeSuccess, 1, 1, 1)
			r.mode(2, fdServfail)
			r.expect(r.ask("failover-last-reply"), dns.RcodeServerFailure, 1, 1, 1)
			r.mode(1, fdAnswer)
			r.expect(r.ask("failover-second"), dns.RcodeSuccess, 1, 1, 0)
			r.mode(0, fdNXDomain)
			r.expect(r.ask("failover-not-listed"), dns.RcodeNameError, 1, 0, 0)
			r.mode(0, fdNoData)
			r.expect(r.ask("failover-nodata"), dns.RcodeSuccess, 1, 0, 0)
			r.mode(0, fdAnswer)
			r.ask("sf-everywhere")
			r.ask("ref-everywhere")
			// A timeout is an attempt, not a failover.
			r.mode(0, fdSilent)
			r.mode(1, fdServfail)
			r.mode(2, fdAnswer)
			r.expect(r.askWithin("failover-after-timeout", 250*time.Millisecond, 1500*time.Millisecond), dns.RcodeSuccess, 1, 1, 1)
		}},
		{name: "no_failover", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
}`}}, run: func(r *fdRun) {
			r.mode(0, fdServfail)
			r.expect(r.ask("plain-servfail"), dns.RcodeServerFailure, 1, 0)
			r.expect(r.again("plain-servfail"), dns.RcodeServerFailure, 2, 0)
			r.mode(0, fdRefused)
			r.expect(r.ask("plain-refused"), dns.RcodeRefused, 1, 0)
			r.mode(0, fdAnswer)
			r.ask("plain-answer")
			r.again("plain-answer")
			r.mode(0, fdSilent)
			r.expect(r.askWithin("plain-timeout", 1800*time.Millisecond, 3*time.Second), dns.RcodeSuccess, 1, 1)
		}},
		{name: "next", ups: plain(5), blocks: []fdBlock{{".", `forward . {U0} {
  next NXDOMAIN SERVFAIL
  next_on_nodata
}
forward . {U1} {
  next REFUSED
}
forward . {U2}`}, {"example.org", `forward . {U3} {
  next NXDOMAIN
}
forward internal.example.org {U4}`}}, run: func(r *fdRun) {
			r.expect(r.ask("chain-first"), dns.RcodeSuccess, 1, 0, 0, 0, 0)
			r.mode(0, fdNXDomain)
			r.expect(r.ask("chain-nxdomain"), dns.RcodeSuccess, 1, 1, 0, 0, 0)
			r.mode(0, fdNoData)
			r.expect(r.ask("chain-nodata"), dns.RcodeSuccess, 1, 1, 0, 0, 0)
			r.mode(0, fdServfail)
			r.mode(1, fdRefused)
			r.expect(r.ask("chain-third"), dns.RcodeSuccess, 1, 1, 1, 0, 0)
			r.mode(2, fdServfail)
			r.expect(r.ask("chain-last"), dns.RcodeServerFailure, 1, 1, 1, 0, 0)
			r.mode(0, fdRefused)
			r.expect(r.ask("chain-not-listed"), dns.RcodeRefused, 1, 0, 0, 0, 0)
			r.mode(0, fdAnswer)
			r.mode(1, fdNXDomain)
			r.expect(r.ask("nx-first-listed"), dns.RcodeNameError, 1, 1, 0, 0, 0)
			r.mode(1, fdAnswer)
			r.mode(2, fdAnswer)
			r.expect(r.ask("a.example.org."), dns.RcodeSuccess, 0, 0, 0, 1, 0)
			r.mode(3, fdNXDomain)
			r.expect(r.ask("b.example.org."), dns.RcodeServerFailure, 0, 0, 0, 1, 0)
			r.expect(r.ask("c.internal.example.org."), dns.RcodeSuccess, 0, 0, 0, 1, 1)
			r.mode(4, fdNoData)
			r.expect(r.ask("d.internal.example.org."), dns.RcodeSuccess, 0, 0, 0, 1, 1)
			r.mode(3, fdAnswer)
			r.expect(r.ask("e.internal.example.org."), dns.RcodeSuccess, 0, 0, 0, 1, 0)
			r.ask("a.other.test.")
		}},
		{name: "except", ups: plain(3), blocks: []fdBlock{{".", `forward . {U0} {
  except skip.test deep.keep.test
}
forward . {U1}`}, {"example.org", `forward . {U2} {
  except a.example.org
}`}}, run: func(r *fdRun) {
			r.ask("kept")
			r.expect(r.ask("x.skip.test."), dns.RcodeSuccess, 0, 1, 0)
			r.expect(r.ask("skip.test."), dns.RcodeSuccess, 0, 1, 0)
			r.ask("keep.test.")
			r.expect(r.ask("x.keep.test."), dns.RcodeSuccess, 1, 0, 0)
			r.expect(r.ask("x.deep.keep.test."), dns.RcodeSuccess, 0, 1, 0)
			r.ask("deep.keep.test.")
			r.ask("b.example.org.")
			r.expect(r.ask("example.org."), dns.RcodeSuccess, 0, 0, 1)
			r.expect(r.ask("a.example.org."), dns.RcodeServerFailure, 0, 0, 0)
			r.expect(r.ask("x.a.example.org."), dns.RcodeServerFailure, 0, 0, 0)
		}},
		{name: "own_policy_and_transport", ups: plain(3), blocks: []fdBlock{{".", `forward . {U0} {
  policy sequential
  force_tcp
}`}, {"corp.example", `forward . {U1} {U2}`}}, run: func(r *fdRun) {
			r.ask("root-over-tcp")
			// Either may answer: the same address from both.
			r.setIP(2, "192.0.2.2")
			for i := range 16 {
				r.ask("n" + strconv.Itoa(i) + ".corp.example.").total = true
			}
			// The zone block's forward has CoreDNS's defaults: random
			// (both servers asked), and UDP for a UDP client.
			r.same("queries over UDP, over TCP, and whether each upstream was asked", func(s *fdSide) string {
				var out []string
				for i, u := range s.ups {
					n := u.srv.Count()
					out = append(out, fmt.Sprintf("U%d: udp %v tcp %d", i, n-u.srv.TCPCount() > 0, u.srv.TCPCount()))
				}
				return strings.Join(out, "; ")
			})
		}},
		{name: "failfast", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  failfast_all_unhealthy_upstreams
  health_check 100ms
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.ask("ff-up")
			r.mode(0, fdSilent)
			r.mode(1, fdSilent)
			r.expect(r.askWithin("ff-both-silent", 1100*time.Millisecond, 2*time.Second), dns.RcodeServerFailure, 2, 2)
			// max_fails 2: down once the third probe has failed, which
			// the fourth says.
			r.waitProbes(0, 4)
			r.waitProbes(1, 4)
			r.expect(r.askWithin("ff-all-down", 0, 100*time.Millisecond), dns.RcodeServerFailure, 0, 0)
			r.askWithin("ff-all-down-again", 0, 100*time.Millisecond)
			r.mode(0, fdAnswer)
			r.waitNextProbe(0)
			r.expect(r.ask("ff-first-back"), dns.RcodeSuccess, 1, 0)
		}},
		{name: "failfast_closed", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  failfast_all_unhealthy_upstreams
  health_check 100ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdClosed)
			r.mode(1, fdClosed)
			r.askWithin("closed-first", 0, 500*time.Millisecond)
			// Probes of a closed port fail at once: down after three,
			// 0.2 s; nothing to count on a closed port, so a second.
			r.sleep(time.Second)
			r.askWithin("closed-down", 0, 100*time.Millisecond)
			// Open again: the probes, which go on, reach them.
			r.mode(0, fdAnswer)
			r.mode(1, fdAnswer)
			r.waitProbes(0, 1)
			r.waitProbes(1, 1)
			r.sleep(200 * time.Millisecond)
			// Either may answer (random): the same address from both.
			r.setIP(1, "192.0.2.1")
			r.ask("closed-back").total = true
		}},
		{name: "no_failfast_all_down", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  health_check 100ms
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			r.mode(1, fdSilent)
			r.askWithin("nf-both-silent", 1100*time.Millisecond, 2*time.Second)
			r.waitProbes(0, 4)
			r.waitProbes(1, 4)
			// Every server down: one is asked anyway, at random, once.
			a := r.askWithin("nf-all-down", 250*time.Millisecond, time.Second)
			a.total = true
			if sum(a.c.counts) != 1 {
				r.t.Errorf("%s: CoreDNS asked %v; the script expects one server asked once", a, a.c.counts)
			}
		}},
		{name: "read_timeout", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			r.askWithin("rt-one-silent", 250*time.Millisecond, 800*time.Millisecond)
			r.mode(1, fdSilent)
			r.expect(r.askWithin("rt-both-silent", 1100*time.Millisecond, 2*time.Second), dns.RcodeServerFailure, 2, 2)
		}},
		{name: "max_fails_health_check", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  max_fails 1
  health_check 200ms
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			r.expect(r.ask("hc-first-failure"), dns.RcodeSuccess, 1, 1)
			r.waitProbes(0, 1)
			r.expect(r.ask("hc-not-yet-down"), dns.RcodeSuccess, 1, 1)
			// max_fails 1: down once the second probe has failed.
			r.waitProbes(0, 3)
			r.expect(r.ask("hc-down"), dns.RcodeSuccess, 0, 1)
			r.ask("hc-still-down")
			r.mode(0, fdAnswer)
			r.waitNextProbe(0)
			r.expect(r.ask("hc-back-up"), dns.RcodeSuccess, 1, 0)
			fdProbeFigure(r, 0, "max_fails 1, health_check 200ms")
		}},
		{name: "max_fails_0", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  max_fails 0
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			for i := range 3 {
				r.expect(r.ask("mf0-"+strconv.Itoa(i)), dns.RcodeSuccess, 1, 1)
				r.sleep(time.Second)
			}
		}},
		{name: "health_check_options", ups: plain(2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  health_check 100ms no_rec domain probe.example.
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			r.ask("hco-failure")
			r.waitProbes(0, 2)
			r.mode(0, fdAnswer)
			r.waitNextProbe(0)
			r.ask("hco-back")
		}},
		{name: "expire", ups: plain(1), blocks: []fdBlock{{".", `forward . {U0} {
  force_tcp
  expire 1s
}`}}, run: func(r *fdRun) {
			conns := func(s *fdSide) string { return strconv.Itoa(s.ups[0].srv.TCPConns()) }
			r.ask("exp-first")
			r.ask("exp-reused")
			if n := r.same("TCP connections before expiry", conns); n != "1" {
				r.t.Errorf("CoreDNS opened %s TCP connections for two questions in a row; the script expects 1", n)
			}
			r.sleep(1600 * time.Millisecond)
			r.ask("exp-after")
			if n := r.same("TCP connections after expiry", conns); n != "2" {
				r.t.Errorf("CoreDNS has opened %s TCP connections after the first expired; the script expects 2", n)
			}
		}},
		{name: "host_name", ups: []fdUpSpec{{pair: true}, {}}, blocks: []fdBlock{{".", `forward . ` + fdHostName + `:{HP} {
  resolver {R}
  policy sequential
  failover SERVFAIL
}`}}, run: func(r *fdRun) {
			r.expect(r.ask("hn-first"), dns.RcodeSuccess, 1, 0)
			r.mode(0, fdServfail)
			r.expect(r.ask("hn-failover"), dns.RcodeSuccess, 1, 1)
			r.mode(0, fdAnswer)
			r.mode(1, fdServfail)
			r.ask("hn-second-unused")
		}},
		{name: "doh", ups: []fdUpSpec{{doh: true}, {doh: true}}, blocks: []fdBlock{{".", `forward . {U0} {U1} {
  tls {CA}
  tls_servername doh.fd.test
  policy sequential
  failover SERVFAIL
}`}}, run: func(r *fdRun) {
			r.expect(r.ask("doh-first"), dns.RcodeSuccess, 1, 0)
			r.askType("doh-first", dns.TypeAAAA)
			r.mode(0, fdServfail)
			r.expect(r.ask("doh-failover"), dns.RcodeSuccess, 1, 1)
			r.mode(0, fdNXDomain)
			r.ask("doh-nxdomain")
			r.mode(0, fdSilent)
			r.expect(r.askWithin("doh-timeout", 1800*time.Millisecond, 3*time.Second), dns.RcodeSuccess, 1, 1)
			r.same("DoH methods", dohMethods)
		}},
		{name: "doh_get", ups: []fdUpSpec{{doh: true}}, blocks: []fdBlock{{".", `forward . {U0} {
  tls {CA}
  tls_servername doh.fd.test
  doh_method GET
}`}}, run: func(r *fdRun) {
			r.ask("get-first")
			r.mode(0, fdServfail)
			r.ask("get-servfail")
			r.same("DoH methods", dohMethods)
		}},
	}
}

// dohMethods lists the HTTP methods of the queries each DoH upstream got
// (the probes of a DoH server are POSTs on both).
func dohMethods(s *fdSide) string {
	var out []string
	for i, u := range s.ups {
		ms := map[string]bool{}
		for _, q := range u.doh.Requests() {
			if q.Type != dns.TypeNS {
				ms[q.Method] = true
			}
		}
		var l []string
		for m := range ms {
			l = append(l, m)
		}
		slices.Sort(l)
		out = append(out, fmt.Sprintf("U%d: %s", i, strings.Join(l, ",")))
	}
	return strings.Join(out, "; ")
}

// fdProbeFigure logs when upstream i's probes arrived on each side,
// from the first question it was asked: how fast a server is marked
// down (the probe after the one that marks it) and up again.
func fdProbeFigure(r *fdRun, i int, what string) {
	var parts []string
	for _, s := range []*fdSide{r.c, r.n} {
		u := s.ups[i]
		u.mu.Lock()
		var first time.Time
		var at []string
		for _, a := range u.log {
			if first.IsZero() && a.qtype == dns.TypeA {
				first = a.at
			}
			if a.qtype == dns.TypeNS && !first.IsZero() {
				at = append(at, strconv.FormatInt(a.at.Sub(first).Milliseconds(), 10))
			}
		}
		u.mu.Unlock()
		parts = append(parts, fmt.Sprintf("%s probes at %s ms", s.name, strings.Join(at, ", ")))
	}
	r.t.Logf("FIGURE health (%s), from the first failed exchange: %s", what, strings.Join(parts, "; "))
}

// TestForwardDifferential runs the forward configurations.
func TestForwardDifferential(t *testing.T) {
	runFD(t, newFDEnv(t), fwdConfigs(), fwdAllowed)
}

// TestForwardTiming measures what the forward options cost in time, on
// both servers alike: with every upstream marked down and
// failfast_all_unhealthy_upstreams, how soon the SERVFAIL comes (CoreDNS's
// at once; the bound: within 100 ms), and what failover adds (one
// exchange per server passed over, and its time).
func TestForwardTiming(t *testing.T) {
	const n = 200
	e := newFDEnv(t)
	t.Run("failfast", func(t *testing.T) {
		cfg := fdConfig{name: "failfast_timing", ups: make([]fdUpSpec, 2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  failfast_all_unhealthy_upstreams
  health_check 100ms
  read_timeout 300ms
}`}}}
		c, nd := e.startSides(t, cfg)
		r := &fdRun{t: t, cfg: cfg, c: c, n: nd, names: map[string]bool{}, render: fdRender, quiet: true, oneAtATime: true}
		r.mode(0, fdSilent)
		r.mode(1, fdSilent)
		r.ask("timing-mark-down")
		r.waitProbes(0, 4)
		r.waitProbes(1, 4)
		first := len(r.asks)
		for i := range n {
			r.ask("timing-down-" + strconv.Itoa(i))
		}
		var cd, ndd []time.Duration
		for _, a := range r.asks[first:] {
			cd, ndd = append(cd, a.c.elapsed), append(ndd, a.n.elapsed)
			if sum(a.c.counts)+sum(a.n.counts) != 0 {
				t.Errorf("%s: an upstream was asked (CoreDNS %v, nodedns %v): failfast sends nothing", a, a.c.counts, a.n.counts)
			}
		}
		c.stop()
		nd.stop()
		fdCompare(t, r, nil, map[int]bool{})
		for _, s := range []struct {
			name string
			ds   []time.Duration
		}{{"CoreDNS", cd}, {"nodedns", ndd}} {
			if p := percentile(s.ds, 99); p >= 100*time.Millisecond {
				t.Errorf("%s: p99 %s with every upstream down and failfast, want under 100 ms", s.name, p)
			}
		}
		t.Logf("FIGURE failfast, every upstream marked down, %d queries each: CoreDNS p50 %s p99 %s; nodedns p50 %s p99 %s", n,
			us(percentile(cd, 50)), us(percentile(cd, 99)), us(percentile(ndd, 50)), us(percentile(ndd, 99)))
	})
	t.Run("failover", func(t *testing.T) {
		cfg := fdConfig{name: "failover_timing", ups: make([]fdUpSpec, 2), blocks: []fdBlock{{".", `forward . {U0} {U1} {
  policy sequential
  failover SERVFAIL
}`}}}
		c, nd := e.startSides(t, cfg)
		r := &fdRun{t: t, cfg: cfg, c: c, n: nd, names: map[string]bool{}, render: fdRender, quiet: true, oneAtATime: true}
		for i := range n {
			r.ask("timing-direct-" + strconv.Itoa(i))
		}
		r.mode(0, fdServfail)
		for i := range n {
			r.ask("timing-failover-" + strconv.Itoa(i))
		}
		c.stop()
		nd.stop()
		fdCompare(t, r, nil, map[int]bool{})
		type fig struct{ direct, failover []time.Duration }
		var cf, nf fig
		extra := map[string][2]int{}
		for _, a := range r.asks {
			failover := strings.HasPrefix(a.name, "timing-failover-")
			for _, s := range []struct {
				name string
				f    *fig
				res  fdResult
			}{{"CoreDNS", &cf, a.c}, {"nodedns", &nf, a.n}} {
				x := extra[s.name]
				if failover {
					s.f.failover = append(s.f.failover, s.res.elapsed)
					x[1] += sum(s.res.counts)
				} else {
					s.f.direct = append(s.f.direct, s.res.elapsed)
					x[0] += sum(s.res.counts)
				}
				extra[s.name] = x
			}
		}
		for name, x := range extra {
			if x[0] != n || x[1] != 2*n {
				t.Errorf("%s: %d exchanges for %d direct questions, %d for %d failed over once; want one each and one more with failover", name, x[0], n, x[1], n)
			}
		}
		t.Logf("FIGURE failover, %d questions each, SERVFAIL then an answer: exchanges per question CoreDNS %.2f direct, %.2f failed over; nodedns %.2f, %.2f; "+
			"p50/p99 direct CoreDNS %s/%s nodedns %s/%s; failed over CoreDNS %s/%s nodedns %s/%s", n,
			float64(extra["CoreDNS"][0])/n, float64(extra["CoreDNS"][1])/n, float64(extra["nodedns"][0])/n, float64(extra["nodedns"][1])/n,
			us(percentile(cf.direct, 50)), us(percentile(cf.direct, 99)), us(percentile(nf.direct, 50)), us(percentile(nf.direct, 99)),
			us(percentile(cf.failover, 50)), us(percentile(cf.failover, 99)), us(percentile(nf.failover, 50)), us(percentile(nf.failover, 99)))
	})
}

// us renders d in milliseconds with microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

// TestOperatorCorefileDifferential: a Corefile of the kind operators run
// (the cluster zone from the test API server, a cache with options, a
// forward with failover and failfast, a zone block with a chain), carried
// by `nodedns migrate` whole and run side by side with CoreDNS on the
// same API server.
func TestOperatorCorefileDifferential(t *testing.T) {
	cp := controlPlane(t)
	e := newFDEnv(t)
	e.kubeconfig = cp.Kubeconfig
	ensureKubeDNS(t, cp.Client)
	f := zoCreate(t, cp.Client)
	svc := "." + f.a + ".svc.cluster.local."
	rev := func(ip string) string {
		r, err := dns.ReverseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cfg := fdConfig{name: "operator", ups: make([]fdUpSpec, 4), blocks: []fdBlock{{".", `errors
kubernetes cluster.local in-addr.arpa ip6.arpa {
  kubeconfig {KC}
  pods insecure
  fallthrough in-addr.arpa ip6.arpa
  ttl 30
}
cache 30 {
  disable success cluster.local
  disable denial cluster.local
  servfail 2s
}
forward . {U0} {U1} {
  policy sequential
  failover SERVFAIL REFUSED
  failfast_all_unhealthy_upstreams
  health_check 200ms
  read_timeout 500ms
}`}, {"corp.example", `errors
cache 30
forward . {U2} {
  next NXDOMAIN
}
forward . {U3}`}}, run: func(r *fdRun) {
		for _, q := range []struct {
			name  string
			qtype uint16
		}{{"web" + svc, dns.TypeA}, {"web" + svc, dns.TypeAAAA}, {"web" + svc, dns.TypeSRV}, {"_http._tcp.web" + svc, dns.TypeSRV},
			{"missing" + svc, dns.TypeA}, {"hl" + svc, dns.TypeA}, {"web-0.hl" + svc, dns.TypeA}, {rev(f.webA), dns.TypePTR},
			{rev("10.251.2.9"), dns.TypePTR}, {rev("192.0.2.200"), dns.TypePTR}} {
			r.askType(q.name, q.qtype)
		}
		r.ask("op-answer")
		r.again("op-answer")
		r.mode(0, fdServfail)
		r.ask("op-failover")
		r.mode(1, fdRefused)
		r.ask("op-last-reply")
		r.mode(0, fdSilent)
		r.mode(1, fdSilent)
		r.askWithin("op-silent", 1800*time.Millisecond, 3*time.Second)
		r.waitProbes(0, 4)
		r.waitProbes(1, 4)
		r.askWithin("op-all-down", 0, 100*time.Millisecond)
		r.askType("web"+svc+"", dns.TypeTXT)
		r.mode(0, fdAnswer)
		r.waitNextProbe(0)
		r.ask("op-back")
		r.ask("a.corp.example.")
		r.mode(2, fdNXDomain)
		r.ask("b.corp.example.")
		r.again("b.corp.example.")
	}}
	runFD(t, e, []fdConfig{cfg}, nil)
}
