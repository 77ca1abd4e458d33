package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
)

// fakeInterceptor records what the agent asks of the interception.
type fakeInterceptor struct {
	linkErr, rulesErr          error
	links, rules, tears, syncs atomic.Int32
	mu                         sync.Mutex
	fallbacks                  []intercept.Fallback
	status                     intercept.Status
}

func (f *fakeInterceptor) EnsureLink() error        { f.links.Add(1); return f.linkErr }
func (f *fakeInterceptor) EnsureRules() error       { f.rules.Add(1); return f.rulesErr }
func (f *fakeInterceptor) Run(ctx context.Context)  { f.syncs.Add(1); <-ctx.Done() }
func (f *fakeInterceptor) Teardown() error          { f.tears.Add(1); return nil }
func (f *fakeInterceptor) RulesPresent() bool       { return f.rules.Load() > 0 && f.tears.Load() == 0 }
func (f *fakeInterceptor) Status() intercept.Status { return f.status }
func (f *fakeInterceptor) SetFallback(fb intercept.Fallback) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fallbacks = append(f.fallbacks, fb)
	return nil
}

// lastFallback is the last SetFallback argument, and how many there were.
func (f *fakeInterceptor) lastFallback() (intercept.Fallback, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fallbacks) == 0 {
		return intercept.Fallback{}, 0
	}
	return f.fallbacks[len(f.fallbacks)-1], len(f.fallbacks)
}

// buildWithFakeInterception builds an agent on addr with a fake
// interceptor standing for --local-ip of an address nobody serves here
// (not 169.254.20.10: a local cluster's agent may serve that one on this
// host, and ShouldTeardown would rightly leave the interception to it)
// address here, so ShouldTeardown says yes).
func buildWithFakeInterception(t *testing.T, fake *fakeInterceptor, extra ...string) *Agent {
	t.Helper()
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	args := append([]string{"--upstream", up.Addr, "--loop-check=false", "--lameduck", "0s"}, extra...)
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	a.ic = fake
	a.icfg = intercept.Config{LocalIPs: []netip.Addr{unservedLinkLocal(t)}, Interface: "nodelocaldns", SetupInterface: true, SetupIptables: true}
	return a
}

// unservedLinkLocal returns a link-local address no socket of this network
// namespace serves port 53 on.
func unservedLinkLocal(t *testing.T) netip.Addr {
	t.Helper()
	for i := range 200 {
		ip := netip.AddrFrom4([4]byte{169, 254, 251, byte(1 + (os.Getpid()+i)%250)})
		if ok, _ := intercept.ShouldTeardown(intercept.Config{LocalIPs: []netip.Addr{ip}, SetupInterface: true}); ok {
			return ip
		}
	}
	t.Fatal("every probed 169.254.251.x address is served on port 53")
	return netip.Addr{}
}

// TestFailedStartRemovesInterception: a start that fails once the link
// (or the rules) may be in place removes them: a listener that cannot bind,
// rules that cannot be installed, an admin endpoint that cannot bind. Even
// with --teardown=false: no agent is left to hand them to.
func TestFailedStartRemovesInterception(t *testing.T) {
	t.Run("listen fails", func(t *testing.T) {
		// A socket without SO_REUSEPORT holds the port.
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		fake := &fakeInterceptor{}
		a := buildWithFakeInterception(t, fake, "--listen", pc.LocalAddr().String(), "--admin", "", "--teardown=false")
		err = a.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "binding UDP") {
			t.Fatalf("run = %v, want the bind error", err)
		}
		if fake.links.Load() != 1 || fake.rules.Load() != 0 || fake.tears.Load() != 1 {
			t.Errorf("link %d, rules %d, teardowns %d; want 1, 0, 1", fake.links.Load(), fake.rules.Load(), fake.tears.Load())
		}
	})
	t.Run("listen fails, the fallback answers", func(t *testing.T) {
		// With the DNS fallback's targets known, the interception stays
		// (its rules put in place): the fallback answers the pods.
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		fake := &fakeInterceptor{status: intercept.Status{Fallback: intercept.FallbackOn, FallbackTargets4: []string{"169.254.211.2:53"}}}
		a := buildWithFakeInterception(t, fake, "--listen", pc.LocalAddr().String(), "--admin", "")
		if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "binding UDP") {
			t.Fatalf("run = %v, want the bind error", err)
		}
		if fake.rules.Load() != 1 || fake.tears.Load() != 0 {
			t.Errorf("rules %d, teardowns %d; want 1, 0", fake.rules.Load(), fake.tears.Load())
		}
	})
	t.Run("rules fail", func(t *testing.T) {
		fake := &fakeInterceptor{rulesErr: errors.New("iptables: Resource temporarily unavailable")}
		addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
		a := buildWithFakeInterception(t, fake, "--listen", addr, "--admin", "")
		if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "iptables") {
			t.Fatalf("run = %v, want the rules error", err)
		}
		if fake.tears.Load() != 1 || fake.syncs.Load() != 0 {
			t.Errorf("teardowns %d, sync loops %d; want 1, 0", fake.tears.Load(), fake.syncs.Load())
		}
		// The listeners are closed: the port is free again.
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Errorf("listener left open after the failed start: %v", err)
		} else {
			pc.Close()
		}
	})
	t.Run("admin fails", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0") // no SO_REUSEPORT
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fake := &fakeInterceptor{}
		a := buildWithFakeInterception(t, fake, "--listen", fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), "--admin", l.Addr().String())
		if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "admin") {
			t.Fatalf("run = %v, want the admin error", err)
		}
		if fake.tears.Load() != 1 {
			t.Errorf("teardowns %d, want 1", fake.tears.Load())
		}
	})
	t.Run("a good start does not", func(t *testing.T) {
		fake := &fakeInterceptor{}
		a := buildWithFakeInterception(t, fake, "--listen", fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), "--admin", "", "--teardown=false")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		dnstest.WaitFor(t, 5*time.Second, "the agent to reach its sync loop", func() bool { return fake.syncs.Load() != 0 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if fake.tears.Load() != 0 {
			t.Errorf("teardown with --teardown=false after a good start")
		}
	})
}

// The foreign DNS server of TestForeignServerKeepsNotReady is this test
// binary run again: a separate process, as a NodeLocal DNSCache left
// running would be, sharing the port through SO_REUSEPORT and answering
// SERVFAIL.
const foreignHelperEnv = "NODEDNS_TEST_FOREIGN_DNS"

func TestMain(m *testing.M) {
	if addr := os.Getenv(foreignHelperEnv); addr != "" {
		os.Exit(serveForeign(addr))
	}
	if args := os.Getenv(serveChildEnv); args != "" {
		os.Exit(serveChild(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

func serveForeign(addr string) int {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	}), NotifyStartedFunc: func() { fmt.Println("serving") }}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }() // the test closes stdin, or dies
	if err := srv.ActivateAndServe(); err != nil {
		return 1
	}
	return 0
}

// startForeign runs the helper on addr until stop is called.
func startForeign(t *testing.T, addr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), foreignHelperEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "serving" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("foreign helper: %q", line)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestForeignServerKeepsNotReady: another DNS server sharing our address
// (SO_REUSEPORT) is detected at start, logged, shown in /stats and keeps
// /ready false; once it is gone the next check turns the agent ready.
func TestForeignServerKeepsNotReady(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	stopForeign := startForeign(t, addr)

	up := dnstest.Start(t, answerWith("192.0.2.1"))
	sock := filepath.Join(t.TempDir(), "admin.sock")
	logs := &dnstest.SyncBuffer{}
	args := []string{"--listen", addr, "--upstream", up.Addr, "--admin", "", "--admin-socket", sock, "--loop-check=false", "--lameduck", "0s"}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log, level, _ := testLogger("debug", "text", logs)
	a, err := Build(cfg, Options{Log: log, Args: args, Level: level, peersRecheck: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://nodedns" + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		dnstest.Eventually(t, 10*time.Second, what, func() error {
			if !cond() {
				return fmt.Errorf("log:\n%s", logs.String())
			}
			return nil
		})
	}
	waitFor("the admin socket", func() bool { code, _ := get("/health"); return code == 200 })
	code, body := get("/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "foreign DNS servers") || !strings.Contains(body, addr) || !strings.Contains(body, "SERVFAIL") {
		t.Errorf("/ready = %d %q; want 503 naming the foreign server", code, body)
	}
	if _, stats := get("/stats"); !strings.Contains(stats, `"foreign"`) || !strings.Contains(stats, addr) {
		t.Errorf("/stats lacks the foreign server:\n%s", stats)
	}
	if !strings.Contains(logs.String(), "another DNS server shares our address") {
		t.Errorf("not logged:\n%s", logs.String())
	}

	stopForeign()
	waitFor("ready once the foreign server is gone", func() bool { code, _ := get("/ready"); return code == 200 })
	if !strings.Contains(logs.String(), "no foreign DNS server shares our addresses any more") {
		t.Errorf("recovery not logged")
	}
}
