package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// answerWith answers every A query with ip.
func answerWith(ip string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", r.Question[0].Name, ip))
		m.Answer = []dns.RR{rr}
		_ = w.WriteMsg(m)
	}
}

// writeConfigMap lays out dir like a ConfigMap volume holding config.yaml
// (dnstest.MountConfigMap).
func writeConfigMap(t *testing.T, dir, content string) {
	t.Helper()
	dnstest.MountConfigMap(t, dir, map[string]string{"config.yaml": content})
}

// testAgent is an agent run in-process on a loopback port, configured by
// a file laid out like a ConfigMap volume.
type testAgent struct {
	t      *testing.T
	a      *Agent
	addr   string
	dir    string
	base   string // the file's lines every version keeps
	logs   *dnstest.SyncBuffer
	cancel context.CancelFunc
	done   chan error
	exited bool
}

// startTestAgent starts an agent whose file is base settings (listen,
// no admin, no loop check) plus content; extra are command-line flags.
func startTestAgent(t *testing.T, content string, extra ...string) *testAgent {
	t.Helper()
	return startTestAgentPoll(t, 50*time.Millisecond, content, extra...)
}

// startTestAgentPoll is startTestAgent with the file read every poll.
func startTestAgentPoll(t *testing.T, poll time.Duration, content string, extra ...string) *testAgent {
	t.Helper()
	ta := &testAgent{t: t, addr: fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), dir: t.TempDir(), logs: &dnstest.SyncBuffer{}}
	ta.base = fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\n", ta.addr)
	writeConfigMap(t, ta.dir, ta.base+content)
	args := append([]string{"--config", filepath.Join(ta.dir, "config.yaml")}, extra...)
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log, level, _ := testLogger("debug", "text", ta.logs)
	if ta.a, err = Build(cfg, Options{Log: log, Args: args, Level: level, reloadPoll: poll}); err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	ctx, ta.cancel = context.WithCancel(context.Background())
	ta.done = make(chan error, 1)
	go func() { ta.done <- ta.a.Run(ctx) }()
	t.Cleanup(func() {
		if _, err := ta.stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return ta
}

// write replaces the file's content (after the base lines).
func (ta *testAgent) write(content string) { writeConfigMap(ta.t, ta.dir, ta.base+content) }

// stop cancels the agent (as SIGTERM does) and returns how long it took
// to exit.
func (ta *testAgent) stop() (time.Duration, error) {
	if ta.exited {
		return 0, nil
	}
	ta.exited = true
	t0 := time.Now()
	ta.cancel()
	err := <-ta.done
	return time.Since(t0), err
}

// waitLog waits until the log holds substr.
func (ta *testAgent) waitLog(substr string) string {
	ta.t.Helper()
	dnstest.Eventually(ta.t, 5*time.Second, fmt.Sprintf("the log to show %q", substr), func() error {
		if logs := ta.logs.String(); !strings.Contains(logs, substr) {
			return fmt.Errorf("log:\n%s", logs)
		}
		return nil
	})
	for _, l := range strings.Split(ta.logs.String(), "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

// metric returns the value of one exposed series (name with labels as
// the exposition writes them), or -1.
func (ta *testAgent) metric(series string) float64 {
	ta.t.Helper()
	rec := httptest.NewRecorder()
	ta.a.rec.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				ta.t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

// waitMetric waits until an exposed series (as metric names it) has
// value want.
func (ta *testAgent) waitMetric(series string, want float64) {
	ta.t.Helper()
	dnstest.Eventually(ta.t, 5*time.Second, fmt.Sprintf("%s to be %v", series, want), func() error {
		if got := ta.metric(series); got != want {
			return fmt.Errorf("%s = %v, want %v", series, got, want)
		}
		return nil
	})
}

// ask queries the agent for name/A and returns the address answered.
func (ta *testAgent) ask(name string) (string, error) {
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := c.Exchange(m, ta.addr)
	if err != nil {
		return "", err
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return "", fmt.Errorf("%s: rcode %s, %d answers", name, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	return r.Answer[0].(*dns.A).A.String(), nil
}

// waitAnswer waits until a fresh name is answered with ip.
func (ta *testAgent) waitAnswer(ip string) {
	ta.t.Helper()
	i := 0
	dnstest.Eventually(ta.t, 5*time.Second, "the agent to answer "+ip, func() error {
		got, err := ta.ask(fmt.Sprintf("w%d-%d.example.", time.Now().UnixNano(), i))
		i++
		if err == nil && got == ip {
			return nil
		}
		return fmt.Errorf("agent not answering %s: %q %v", ip, got, err)
	})
}

func TestLiveReload(t *testing.T) {
	up1 := dnstest.Start(t, answerWith("192.0.2.1"))
	up2 := dnstest.Start(t, answerWith("192.0.2.2"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up1.Addr+"]\ncache-size: 100\n")
	a, ask := ta.a, ta.ask
	ta.waitAnswer("192.0.2.1")

	// Queries keep flowing during every reload; none may fail.
	var failed, sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sent.Add(1)
			if _, err := ask(fmt.Sprintf("n%d.example.", i%50)); err != nil {
				failed.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// A bad file is rejected and the old configuration stays.
	ta.write("lameduck: 0s\nupstream: [" + up2.Addr + "]\ncache-size: zero\n")
	ta.waitMetric(`nodedns_config_reloads_total{result="failure"}`, 1)
	if ip, err := ask("second.example."); err != nil || ip != "192.0.2.1" {
		t.Fatalf("after a bad file: %q %v, want the old upstream's 192.0.2.1", ip, err)
	}

	// A good file switches upstreams.
	ta.write("lameduck: 0s\nupstream: [" + up2.Addr + "]\ncache-size: 50\nlog-level: warn\n")
	i := 0
	dnstest.Eventually(t, 5*time.Second, "the upstream to switch", func() error {
		ip, err := ask(fmt.Sprintf("third%d.example.", i))
		i++
		if err == nil && ip == "192.0.2.2" {
			return nil
		}
		return fmt.Errorf("upstream not switched: %q %v", ip, err)
	})
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d queries failed across reloads", failed.Load(), sent.Load())
	}
	if got := a.cache.Stats().Capacity; got != 50 {
		t.Fatalf("cache capacity after reload = %d, want 50", got)
	}
	if a.level.Level() != slog.LevelWarn {
		t.Fatalf("log level not reloaded")
	}
}

// TestReloadValidatesBeforeApplying: a file whose upstream change is fine
// but whose cache settings are not changes nothing. The new upstream used
// to go live before the cache rejected its bounds.
func TestReloadValidatesBeforeApplying(t *testing.T) {
	up1 := dnstest.Start(t, answerWith("192.0.2.1"))
	up2 := dnstest.Start(t, answerWith("192.0.2.2"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up1.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	if v := ta.metric(`nodedns_config_reloads_total{result="failure"}`); v != 0 {
		t.Fatalf("failures at start: %v", v)
	}
	ta.write("lameduck: 0s\nupstream: [" + up2.Addr + "]\nmin-ttl: 2h\nmax-ttl: 1h\nlog-level: error\n")
	line := ta.waitLog("config reload rejected")
	if !strings.Contains(line, "min-ttl") {
		t.Errorf("rejection does not name the setting: %s", line)
	}
	for i := range 5 {
		if ip, err := ta.ask(fmt.Sprintf("after-bad-%d.example.", i)); err != nil || ip != "192.0.2.1" {
			t.Fatalf("after a rejected reload: %q %v, want the old upstream's 192.0.2.1", ip, err)
		}
	}
	if ta.a.level.Level() != slog.LevelDebug {
		t.Errorf("log level changed by a rejected reload")
	}
	if v := ta.metric(`nodedns_config_reloads_total{result="failure"}`); v != 1 {
		t.Errorf("failure count %v, want 1", v)
	}
	if v := ta.metric(`nodedns_config_last_reload_successful`); v != 0 {
		t.Errorf("last_reload_successful %v, want 0", v)
	}
	// Fixed: applied, counted.
	ta.write("lameduck: 0s\nupstream: [" + up2.Addr + "]\nmin-ttl: 1m\nmax-ttl: 1h\n")
	ta.waitAnswer("192.0.2.2")
	if v := ta.metric(`nodedns_config_reloads_total{result="success"}`); v != 1 {
		t.Errorf("success count %v, want 1", v)
	}
	if v := ta.metric(`nodedns_config_last_reload_successful`); v != 1 {
		t.Errorf("last_reload_successful %v, want 1", v)
	}
}

// TestReloadLameduck: lameduck is read at shutdown, so a reload applies it
// (it used to be ignored silently: neither applied nor warned about).
func TestReloadLameduck(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	ta.write("lameduck: 800ms\nupstream: [" + up.Addr + "]\n")
	line := ta.waitLog("configuration reloaded")
	if !strings.Contains(line, "applied=lameduck") {
		t.Errorf("reload log does not name lameduck as applied: %s", line)
	}
	if strings.Contains(ta.logs.String(), "need a restart") {
		t.Errorf("lameduck reported as restart-only:\n%s", ta.logs.String())
	}
	took, err := ta.stop()
	if err != nil {
		t.Fatal(err)
	}
	if took < 800*time.Millisecond {
		t.Errorf("stopped after %v; the reloaded lameduck is 800ms", took)
	}
	if !strings.Contains(ta.logs.String(), "for=800ms") {
		t.Errorf("lameduck log:\n%s", ta.logs.String())
	}
}

// TestReloadRestartOnly: changes to settings read only at start are one
// warning naming every such key; the live ones in the same file apply;
// the running values stay (the next reload warns again).
func TestReloadRestartOnly(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	ta.write("lameduck: 0s\nupstream: [" + up.Addr + "]\nudp-sockets: 2\nudp-readers: poller\ngomaxprocs: 3\nmax-inflight: 10\ncluster-sync-wait: 1s\nlog-queries: 0.5\nteardown: false\n")
	line := ta.waitLog("need a restart")
	if !strings.Contains(line, `keys=max-inflight,udp-readers,udp-sockets,gomaxprocs,cluster-sync-wait`) {
		t.Errorf("warning: %s", line)
	}
	if n := strings.Count(ta.logs.String(), "need a restart"); n != 1 {
		t.Errorf("%d restart warnings, want one line", n)
	}
	line = ta.waitLog("configuration reloaded")
	if !strings.Contains(line, "applied=teardown,log-queries") {
		t.Errorf("applied: %s", line)
	}
	run := ta.a.running()
	if run.UDPSockets != 0 || run.MaxInflight != 2000 || run.ClusterSyncWait != config.Duration(5*time.Second) || run.Teardown || run.LogQueries != 0.5 {
		t.Errorf("running config after reload: %+v", run)
	}
	if v := ta.metric("nodedns_config_restart_pending_keys"); v != 5 {
		t.Errorf("restart_pending_keys %v, want 5", v)
	}
}

// TestReloadFlagOverride: a file change to a key the command line sets
// has no effect, and the log says so.
func TestReloadFlagOverride(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "upstream: ["+up.Addr+"]\nlameduck: 1s\n", "--lameduck", "0s")
	ta.waitAnswer("192.0.2.1")
	ta.write("upstream: [" + up.Addr + "]\nlameduck: 3s\n")
	line := ta.waitLog("overridden by command-line flags")
	if !strings.Contains(line, "keys=lameduck") {
		t.Errorf("override warning: %s", line)
	}
	if d := ta.a.running().Lameduck; d != 0 {
		t.Errorf("lameduck %v, want the flag's 0s", d)
	}
}

// TestReloadUnknownKey: an unknown key (a newer version's, during a
// rollback) is a warning naming it; the rest applies.
func TestReloadUnknownKey(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	ta.write("lameduck: 0s\nupstream: [" + up.Addr + "]\nfrobnicate-upstreams: true\ncache-size: 77\n")
	line := ta.waitLog("unknown key")
	if !strings.Contains(line, `frobnicate-upstreams`) {
		t.Errorf("warning: %s", line)
	}
	ta.waitLog("configuration reloaded")
	if got := ta.a.cache.Stats().Capacity; got != 77 {
		t.Errorf("cache size %d after reload, want 77", got)
	}
}

// TestReloadCacheMaxBytes: cache-max-bytes (a table entry since the merge
// of the cache's byte bound) is applied by a reload, in place; a value
// below the floor is rejected naming the key, and the bound stays.
func TestReloadCacheMaxBytes(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up.Addr+"]\ncache-max-bytes: 1Mi\n")
	ta.waitAnswer("192.0.2.1")
	if got := ta.a.cache.Stats().MaxBytes; got != 1<<20 {
		t.Fatalf("max bytes at start %d, want 1Mi", got)
	}
	ta.write("lameduck: 0s\nupstream: [" + up.Addr + "]\ncache-max-bytes: 3MiB\n")
	if line := ta.waitLog("configuration reloaded"); !strings.Contains(line, "applied=cache-max-bytes") {
		t.Errorf("reload: %s", line)
	}
	if got := ta.a.cache.Stats().MaxBytes; got != 3<<20 {
		t.Errorf("max bytes after reload %d, want 3Mi", got)
	}
	ta.write("lameduck: 0s\nupstream: [" + up.Addr + "]\ncache-max-bytes: 1Ki\n")
	if line := ta.waitLog("config reload rejected"); !strings.Contains(line, "cache-max-bytes 1Ki") {
		t.Errorf("rejection: %s", line)
	}
	if got := ta.a.cache.Stats().MaxBytes; got != 3<<20 {
		t.Errorf("max bytes after a rejected reload %d, want 3Mi", got)
	}
	if _, err := ta.ask("after.example."); err != nil {
		t.Error(err)
	}
}

// TestReloadUnreadableRecovers: a config file that turns unreadable (a
// ConfigMap volume mid-update, a deleted file) is a failed reload; when
// it is back with the same content, the figures say so again. They used
// to stay at "failed" until the content changed, firing the reload alert
// for a configuration that was fine.
func TestReloadUnreadableRecovers(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	content := "lameduck: 0s\nupstream: [" + up.Addr + "]\n"
	ta := startTestAgent(t, content)
	ta.waitAnswer("192.0.2.1")
	if err := os.Remove(filepath.Join(ta.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	ta.waitLog("config file unreadable")
	if v := ta.metric("nodedns_config_last_reload_successful"); v != 0 {
		t.Errorf("last_reload_successful %v while unreadable, want 0", v)
	}
	ta.write(content)
	dnstest.Eventually(t, 5*time.Second, "last_reload_successful 1 with the file back", func() error {
		if v := ta.metric("nodedns_config_last_reload_successful"); v != 1 {
			return fmt.Errorf("last_reload_successful %v; log:\n%s", v, ta.logs.String())
		}
		return nil
	})
	if v := ta.metric(`nodedns_config_reloads_total{result="failure"}`); v != 1 {
		t.Errorf("failures %v, want 1", v)
	}
	if _, err := ta.ask("after.example."); err != nil {
		t.Error(err)
	}
}

// TestReloadOnSIGHUP: SIGHUP reloads the file at once (here the poll is
// an hour away), and reloads it even when unchanged; without a file it is
// logged and ignored. SIGHUP used to end the agent (Go's default), taking
// the node's DNS down for an operator used to dnsmasq or unbound.
func TestReloadOnSIGHUP(t *testing.T) {
	up1 := dnstest.Start(t, answerWith("192.0.2.1"))
	up2 := dnstest.Start(t, answerWith("192.0.2.2"))
	ta := startTestAgentPoll(t, time.Hour, "lameduck: 0s\nupstream: ["+up1.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	ta.write("lameduck: 0s\nupstream: [" + up2.Addr + "]\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ta.waitLog("SIGHUP: reloading")
	ta.waitAnswer("192.0.2.2")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	dnstest.Eventually(t, 5*time.Second, "an unchanged file reloaded on SIGHUP", func() error {
		if v := ta.metric(`nodedns_config_reloads_total{result="success"}`); v != 2 {
			return fmt.Errorf("successes %v, want 2", v)
		}
		return nil
	})

	// Without --config: logged, and the agent keeps answering.
	var logs dnstest.SyncBuffer
	cfg, err := config.Load([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), "--admin", "", "--loop-check=false", "--lameduck", "0s", "--upstream", up1.Addr}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log, _, _ := testLogger("info", "text", &logs)
	a, err := Build(cfg, Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	other := &testAgent{t: t, a: a, addr: cfg.Listen[0], logs: &logs}
	other.waitAnswer("192.0.2.1")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	other.waitLog("no --config file to reload")
	other.waitAnswer("192.0.2.1")
}

// TestEveryApplyClassApplied: every apply class the settings table names
// has its applier, in applierOrder.
func TestEveryApplyClassApplied(t *testing.T) {
	for _, s := range config.Settings() {
		for _, class := range s.Applies() {
			if applierOf(class) == nil {
				t.Errorf("%s: apply class %q has no applier in applierOrder", s.Key(), class)
			}
		}
	}
}

// testLogger is a text logger at level to w, with the LevelVar a reload
// of log-level changes (main's newLogger, which the agent is handed).
func testLogger(level, _ string, w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	lv := new(slog.LevelVar)
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), lv, nil
}
