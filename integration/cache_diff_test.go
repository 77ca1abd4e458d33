//go:build integration

package integration

// Differential test of CoreDNS 1.15's cache options: each configuration
// is a Corefile whose cache sits in front of a forward to one scripted
// upstream (fwdiff_harness_test.go), run by CoreDNS and, through `nodedns
// migrate`, by nodedns. Time is real: the upstream's records live 1 to 4
// seconds and the script sleeps between questions. Compared: the reply's
// rcode and records with their TTLs, which may differ by one second (the
// two servers count whole seconds from entries stored a few milliseconds
// apart, one rounding where the other truncates), and how many times the
// upstream was asked for each question (a cache hit asks nothing, a
// prefetch or a refresh asks in the background).

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// cacheAllowed are the differences nodedns makes on purpose.
var cacheAllowed []fdAllow

// fdRenderTTL renders a reply as sorted lines, each record's TTL apart
// at the end (" ttl=N"), for fdTTLClose.
func fdRenderTTL(m *dns.Msg) string {
	if m == nil {
		return zoNoReply
	}
	head := dns.RcodeToString[m.Rcode]
	if m.Authoritative {
		head += " aa"
	}
	var lines []string
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			rr = dns.Copy(rr)
			ttl := rr.Header().Ttl
			rr.Header().Ttl = 0
			lines = append(lines, s.p+" "+strings.ToLower(strings.ReplaceAll(rr.String(), "\t", " "))+" ttl="+strconv.FormatUint(uint64(ttl), 10))
		}
	}
	slices.Sort(lines)
	return strings.Join(append([]string{head}, lines...), "\n")
}

// fdTTLClose compares two fdRenderTTL renderings: the same lines but for
// TTLs, which may differ by one.
func fdTTLClose(c, n string) bool {
	cl, nl := strings.Split(c, "\n"), strings.Split(n, "\n")
	if len(cl) != len(nl) {
		return false
	}
	for i := range cl {
		cr, ct, _ := strings.Cut(cl[i], " ttl=")
		nr, nt, _ := strings.Cut(nl[i], " ttl=")
		if cr != nr {
			return false
		}
		a, _ := strconv.Atoi(ct)
		b, _ := strconv.Atoi(nt)
		if a-b > 1 || b-a > 1 {
			return false
		}
	}
	return true
}

func cacheConfigs() []fdConfig {
	one := []fdUpSpec{{}}
	fwd := "\nforward . {U0} {\n  read_timeout 300ms\n}"
	return []fdConfig{
		{name: "defaults", ups: one, ttl: 3, blocks: []fdBlock{{".", "cache 30" + fwd}}, run: func(r *fdRun) {
			r.ask("def-a")
			r.ask("nx-def")
			r.askType("nodata-def", dns.TypeA)
			r.askType("def-a", dns.TypeAAAA)
			r.sleep(1500 * time.Millisecond)
			r.expectTTL(r.again("def-a"), 3)
			r.again("nx-def")
			r.sleep(2 * time.Second)
			r.again("def-a")
			r.sleep(2 * time.Second)
			r.again("def-a")
			r.again("nx-def")
		}},
		{name: "keepttl", ups: one, ttl: 3, blocks: []fdBlock{{".", "cache 30 {\n  keepttl\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("keep-a")
			r.ask("nx-keep")
			r.sleep(2 * time.Second)
			r.expectTTL(r.again("keep-a"), 5)
			r.again("nx-keep")
			r.sleep(time.Second)
			r.again("keep-a")
		}},
		{name: "servfail_ttl", ups: one, ttl: 3, blocks: []fdBlock{{".", "cache 30 {\n  servfail 2s\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("sf-cached")
			r.expect(r.again("sf-cached"), dns.RcodeServerFailure, 1)
			// Every upstream failing (no reply) is remembered as a
			// SERVFAIL too.
			r.mode(0, fdSilent)
			r.ask("all-failed")
			r.expect(r.again("all-failed"), dns.RcodeServerFailure, 2)
			r.mode(0, fdAnswer)
			r.expect(r.again("all-failed"), dns.RcodeServerFailure, 2)
			r.sleep(2500 * time.Millisecond)
			r.expect(r.again("sf-cached"), dns.RcodeServerFailure, 2)
			r.expect(r.again("all-failed"), dns.RcodeSuccess, 3)
		}},
		{name: "servfail_failfast", ups: one, ttl: 3, blocks: []fdBlock{{".", `cache 30 {
  servfail 2s
}
forward . {U0} {
  failfast_all_unhealthy_upstreams
  health_check 100ms
  read_timeout 300ms
}`}}, run: func(r *fdRun) {
			r.mode(0, fdSilent)
			r.ask("ff-mark-down")
			r.waitProbes(0, 4)
			// Every server down: failfast's SERVFAIL is remembered too.
			r.ask("ff-remembered")
			r.mode(0, fdAnswer)
			r.waitNextProbe(0)
			r.expect(r.again("ff-remembered"), dns.RcodeServerFailure, 0)
			r.ask("ff-fresh")
			r.sleep(2 * time.Second)
			r.again("ff-remembered")
		}},
		{name: "servfail_0", ups: one, ttl: 3, blocks: []fdBlock{{".", "cache 30 {\n  servfail 0s\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("sf-uncached")
			r.expect(r.again("sf-uncached"), dns.RcodeServerFailure, 2)
			r.mode(0, fdSilent)
			r.ask("all-failed-0")
			r.mode(0, fdAnswer)
			r.again("all-failed-0")
		}},
		{name: "denial_min_ttl", ups: one, ttl: 1, blocks: []fdBlock{{".", "cache 30 {\n  denial 1000 30 3\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("nx-min")
			r.ask("nodata-min")
			r.ask("min-a")
			r.sleep(1500 * time.Millisecond)
			r.expect(r.again("nx-min"), dns.RcodeNameError, 1)
			r.again("nodata-min")
			r.again("min-a")
			r.sleep(2 * time.Second)
			r.expect(r.again("nx-min"), dns.RcodeNameError, 2)
			r.again("nodata-min")
		}},
		{name: "disable", ups: one, ttl: 3, blocks: []fdBlock{{".", "cache 30 {\n  disable success nocache.test\n  disable denial nodeny.test\n}" + fwd}}, run: func(r *fdRun) {
			for _, l := range []string{"a.nocache.test.", "nx.nocache.test.", "a.nodeny.test.", "nx.nodeny.test.", "nodata.nodeny.test.", "a.fd.test.", "nx.fd.test."} {
				r.ask(l)
				want := 1
				if l == "a.nocache.test." || strings.HasSuffix(l, ".nodeny.test.") && l != "a.nodeny.test." {
					want = 2
				}
				if a := r.again(l); a.c.counts[0] != want {
					r.t.Errorf("%s: CoreDNS asked %d times; the script expects %d", a, a.c.counts[0], want)
				}
			}
		}},
		{name: "serve_stale_immediate", ups: one, ttl: 3, blocks: []fdBlock{{".",
			"cache 30 {\n  success 1000 2 1\n  denial 1000 2 1\n  serve_stale 20s immediate\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("stale-a")
			r.ask("stale-b")
			r.sleep(2500 * time.Millisecond)
			r.mode(0, fdServfail)
			r.expect(r.againBG("stale-a"), dns.RcodeSuccess, 2)
			r.againBG("stale-a")
			r.mode(0, fdAnswer)
			r.setIP(0, "192.0.2.99")
			r.againBG("stale-a")
			r.again("stale-a")
			// Without serve_stale_policy a denial replaces the stale
			// answer.
			r.mode(0, fdNXDomain)
			r.againBG("stale-b")
			r.again("stale-b")
		}},
		{name: "serve_stale_verify", ups: one, ttl: 3, blocks: []fdBlock{{".",
			"cache 30 {\n  success 1000 2 1\n  serve_stale 20s verify\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("verify-a")
			r.sleep(2500 * time.Millisecond)
			r.mode(0, fdServfail)
			r.expect(r.again("verify-a"), dns.RcodeSuccess, 2)
			r.mode(0, fdSilent)
			r.again("verify-a")
			r.mode(0, fdAnswer)
			r.setIP(0, "192.0.2.99")
			r.again("verify-a")
			r.again("verify-a")
		}},
		{name: "serve_stale_policy", ups: one, ttl: 3, blocks: []fdBlock{{".",
			"cache 30 {\n  success 1000 2 1\n  denial 1000 2 1\n  serve_stale 20s immediate\n  serve_stale_policy prefer_positive\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("pp-a")
			r.ask("pp-b")
			r.sleep(2500 * time.Millisecond)
			r.mode(0, fdNXDomain)
			r.againBG("pp-a")
			r.againBG("pp-a")
			r.mode(0, fdNoData)
			r.againBG("pp-b")
			r.againBG("pp-b")
		}},
		{name: "prefetch", ups: one, ttl: 4, blocks: []fdBlock{{".", "cache 30 {\n  success 1000 4 1\n  prefetch 2 1m 50%\n}" + fwd}}, run: func(r *fdRun) {
			r.ask("pf-a")
			r.again("pf-a")
			r.ask("pf-b")
			r.sleep(2200 * time.Millisecond)
			// pf-a: hit twice and at half its TTL: refreshed in the
			// background; pf-b: hit once, not.
			r.expect(r.againBG("pf-a"), dns.RcodeSuccess, 2)
			r.expect(r.againBG("pf-b"), dns.RcodeSuccess, 1)
			r.again("pf-a")
			r.sleep(1400 * time.Millisecond)
			r.againBG("pf-a")
			r.againBG("pf-b")
		}},
	}
}

// TestCacheDifferential runs the cache configurations.
func TestCacheDifferential(t *testing.T) {
	e := newFDEnv(t)
	cfgs := cacheConfigs()
	for i := range cfgs {
		run := cfgs[i].run
		cfgs[i].run = func(r *fdRun) {
			r.render, r.compare = fdRenderTTL, fdTTLClose
			run(r)
		}
	}
	runFD(t, e, cfgs, cacheAllowed)
}
