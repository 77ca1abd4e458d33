package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// askCached asks name twice through addr and checks that both answers are
// want and that the second came from the cache (up was not asked again).
func askCached(t *testing.T, addr, name, want string, up *dnstest.Server) {
	t.Helper()
	for i := range 2 {
		before := up.CountName(name, dns.TypeA)
		got, err := askA(addr, name)
		if err != nil || got != want {
			t.Fatalf("%s: %q %v, want %s", name, got, err, want)
		}
		if i == 1 && up.CountName(name, dns.TypeA) != before {
			t.Fatalf("%s: asked upstream again, not cached", name)
		}
	}
}

// waitCount waits until the log holds substr n times: a reload's or a
// kube-dns update's last line says it is applied whole.
func waitCount(t *testing.T, logs *dnstest.SyncBuffer, substr string, n int) {
	t.Helper()
	dnstest.Eventually(t, 10*time.Second, fmt.Sprintf("the log to show %q %d times", substr, n), func() error {
		if l := logs.String(); strings.Count(l, substr) < n {
			return fmt.Errorf("log:\n%s", l)
		}
		return nil
	})
}

// TestReloadUpstreamDropsCachedAnswers: a reload that changes the default
// upstreams or a stub domain's servers drops the answers cached from the
// old servers of those zones, and only those: the same name asked again
// is the new server's answer at once, not after its TTL (an operator who
// fixes a wrong upstream used to see nodes serve its data for an hour).
// A zone whose servers did not change keeps its entries.
func TestReloadUpstreamDropsCachedAnswers(t *testing.T) {
	old := dnstest.Start(t, answerWith("192.0.2.1"))
	fixed := dnstest.Start(t, answerWith("192.0.2.2"))
	keep := dnstest.Start(t, answerWith("192.0.2.9"))
	file := func(def, stub string) string {
		return fmt.Sprintf("lameduck: 0s\nupstream: [%s]\nstub-domains:\n  stub.example: [%s]\n  keep.example: [%s]\n", def, stub, keep.Addr)
	}
	ta := startTestAgent(t, file(old.Addr, old.Addr))
	ta.waitAnswer("192.0.2.1")
	askCached(t, ta.addr, "name.example.", "192.0.2.1", old)
	askCached(t, ta.addr, "a.stub.example.", "192.0.2.1", old)
	askCached(t, ta.addr, "a.keep.example.", "192.0.2.9", keep)

	// The default upstreams and the stub domain both change.
	ta.write(file(fixed.Addr, fixed.Addr))
	waitCount(t, ta.logs, "configuration reloaded", 1)
	askCached(t, ta.addr, "name.example.", "192.0.2.2", fixed)
	askCached(t, ta.addr, "a.stub.example.", "192.0.2.2", fixed)
	before := keep.CountName("a.keep.example.", dns.TypeA)
	if got, err := askA(ta.addr, "a.keep.example."); err != nil || got != "192.0.2.9" || keep.CountName("a.keep.example.", dns.TypeA) != before {
		t.Errorf("a zone whose servers did not change: %q %v, asked again: %v; want its cached answer", got, err,
			keep.CountName("a.keep.example.", dns.TypeA) != before)
	}

	// Only the stub domain changes: the default upstreams' answers stay.
	ta.write(file(fixed.Addr, old.Addr))
	waitCount(t, ta.logs, "configuration reloaded", 2)
	askCached(t, ta.addr, "a.stub.example.", "192.0.2.1", old)
	before = fixed.CountName("name.example.", dns.TypeA)
	if got, err := askA(ta.addr, "name.example."); err != nil || got != "192.0.2.2" || fixed.CountName("name.example.", dns.TypeA) != before {
		t.Errorf("default upstreams unchanged: %q %v, asked again: %v; want the cached answer", got, err,
			fixed.CountName("name.example.", dns.TypeA) != before)
	}

	// The stub domain removed: its names go to the default upstreams.
	ta.write(fmt.Sprintf("lameduck: 0s\nupstream: [%s]\nstub-domains:\n  keep.example: [%s]\n", fixed.Addr, keep.Addr))
	waitCount(t, ta.logs, "configuration reloaded", 3)
	askCached(t, ta.addr, "a.stub.example.", "192.0.2.2", fixed)
}

// TestReloadExchangeUnderWayNotCached: an exchange the old upstream still
// carries when the reload swaps the upstreams answers its client, but its
// reply is not kept: the next query asks the new upstream.
func TestReloadExchangeUnderWayNotCached(t *testing.T) {
	gate := dnstest.NewGate(t)
	old := dnstest.Start(t, gate.Wrap(answerWith("192.0.2.1")))
	fixed := dnstest.Start(t, answerWith("192.0.2.2"))
	ready := dnstest.Start(t, answerWith("192.0.2.9"))
	file := func(def string) string {
		return fmt.Sprintf("lameduck: 0s\nupstream: [%s]\nstub-domains:\n  ready.example: [%s]\n", def, ready.Addr)
	}
	ta := startTestAgent(t, file(old.Addr))
	eventuallyA(t, ta.addr, "192.0.2.9", func(i int) string { return fmt.Sprintf("r%d.ready.example.", i) })

	type result struct {
		ip  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("slow.example.", dns.TypeA)
		r, _, err := (&dns.Client{Timeout: 20 * time.Second}).Exchange(m, ta.addr)
		if err == nil && (r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0) {
			err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{ip: r.Answer[0].(*dns.A).A.String()}
	}()
	dnstest.WaitFor(t, 10*time.Second, "the query to reach the old upstream", func() bool { return gate.Waiting() != 0 })
	ta.write(file(fixed.Addr))
	waitCount(t, ta.logs, "configuration reloaded", 1)
	gate.Open()
	if res := <-done; res.err != nil || res.ip != "192.0.2.1" {
		t.Fatalf("the query under way: %q %v, want the old upstream's answer", res.ip, res.err)
	}
	askCached(t, ta.addr, "slow.example.", "192.0.2.2", fixed)
}

// TestKubeDNSChangeDropsCachedAnswers: the kube-dns ConfigMap's
// upstreamNameservers and stubDomains, changed by kubelet, drop what was
// cached from their old servers.
func TestKubeDNSChangeDropsCachedAnswers(t *testing.T) {
	old := dnstest.Start(t, answerWith("192.0.2.1"))
	fixed := dnstest.Start(t, answerWith("192.0.2.2"))
	dir := t.TempDir()
	mount := func(up, stub string) {
		dnstest.MountConfigMap(t, dir, map[string]string{
			"upstreamNameservers": fmt.Sprintf(`[%q]`, up),
			"stubDomains":         fmt.Sprintf(`{"cm.example": [%q]}`, stub),
		})
	}
	mount(old.Addr, old.Addr)
	logs := &dnstest.SyncBuffer{}
	_, addr := startAgentWith(t, "kube-dns-config: "+dir+"\n", logs)
	eventuallyA(t, addr, "192.0.2.1", func(i int) string { return fmt.Sprintf("u%d.example.", i) })
	askCached(t, addr, "name.example.", "192.0.2.1", old)
	askCached(t, addr, "a.cm.example.", "192.0.2.1", old)

	mount(fixed.Addr, old.Addr)
	waitCount(t, logs, "kube-dns config applied", 1)
	askCached(t, addr, "name.example.", "192.0.2.2", fixed)
	before := old.CountName("a.cm.example.", dns.TypeA)
	if got, err := askA(addr, "a.cm.example."); err != nil || got != "192.0.2.1" || old.CountName("a.cm.example.", dns.TypeA) != before {
		t.Errorf("a stub domain whose servers did not change: %q %v; want its cached answer", got, err)
	}

	mount(fixed.Addr, fixed.Addr)
	waitCount(t, logs, "kube-dns config applied", 2)
	askCached(t, addr, "a.cm.example.", "192.0.2.2", fixed)
}
