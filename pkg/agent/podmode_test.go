package agent

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// In pod mode nothing on the host is the agent's: no interceptor is built
// (so no link, rules, fallback or teardown, at start, on exit, or after a
// supervised stop: TeardownAfterStop asks the same interceptConfig), even
// with the redirect's frontends in local-ip.
func TestPodModeTouchesNothingOnTheHost(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	args := []string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--local-ip=169.254.20.10,169.254.128.10",
		"--listen", fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), "--upstream", up.Addr, "--admin=", "--loop-check=false"}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := interceptConfig(cfg, slog.Default()); ok {
		t.Fatal("pod mode: interceptConfig is on")
	}
	if on, _ := fallbackOn(cfg, true); on {
		t.Fatal("pod mode: the DNS fallback is on")
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	if a.ic != nil {
		t.Fatal("pod mode: the agent built an interceptor")
	}
	// The host-mode twin of the same addresses does build one: the test
	// above is not vacuous.
	host, err := config.Load(append([]string{"--network-mode=host"}, args[1:]...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := interceptConfig(host, slog.Default()); !ok {
		t.Fatal("host mode with local-ip: no interception")
	}
}

// A node whose resolv.conf names the redirected address (a kubelet's
// --cluster-dns copied there, or a node that used NodeLocal DNSCache) does
// not make the agent its own upstream in pod mode: that server is dropped,
// the others kept.
func TestPodModeDropsRedirectedResolvConfServers(t *testing.T) {
	rc := writeTemp(t, "nameserver 169.254.20.10\nnameserver 169.254.128.10\nnameserver 169.254.211.2\n")
	cfg, err := config.Load([]string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--local-ip=169.254.128.10", "--resolv-conf", rc}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, err := upstreams(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "169.254.211.2:53" {
		t.Fatalf("upstreams %v, want [169.254.211.2:53]", got)
	}
	// Nothing else: a clear error naming the file.
	rc2 := writeTemp(t, "nameserver 169.254.20.10\n")
	cfg.ResolvConf = rc2
	if _, err := upstreams(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), rc2) {
		t.Fatalf("err %v, want one naming %s", err, rc2)
	}
}

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// On SIGTERM the pod-mode agent turns not ready first (so that the
// redirect stops choosing it) and keeps answering DNS through its
// lameduck, then exits cleanly without touching the host. The admin
// endpoint is on a TCP address, as the chart puts it on the pod's IP for
// kubelet's httpGet probes.
func TestPodModeLameduckNotReadyStillAnswering(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	args := fmt.Sprintf("--network-mode=pod --pod-ips=169.254.64.7 --local-ip=169.254.20.10 --listen=%s --upstream=%s --admin=%s --loop-check=false --lameduck=2s --log-level=info",
		addr, up.Addr, adminAddr)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+args)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	var log dnstest.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
		}
		exited <- cmd.Wait()
	}()
	hc := &http.Client{Timeout: time.Second}
	status := func(path string) int {
		resp, err := hc.Get("http://" + adminAddr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	answers := func() error {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeA)
		c := &dns.Client{Timeout: time.Second}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			return fmt.Errorf("rcode %s, %d answers", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		return nil
	}
	dnstest.Eventually(t, 10*time.Second, "ready on the admin address", func() error {
		if c := status("/ready"); c != http.StatusOK {
			return fmt.Errorf("/ready %d; log:\n%s", c, log.String())
		}
		return nil
	})
	if err := answers(); err != nil {
		t.Fatalf("before SIGTERM: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	dnstest.Eventually(t, 2*time.Second, "not ready after SIGTERM", func() error {
		if c := status("/ready"); c != http.StatusServiceUnavailable {
			return fmt.Errorf("/ready %d", c)
		}
		return nil
	})
	// Not ready, still answering, and still alive for the liveness probe.
	if err := answers(); err != nil {
		t.Fatalf("in the lameduck: %v\n%s", err, log.String())
	}
	if c := status("/health"); c != http.StatusOK {
		t.Errorf("/health in the lameduck: %d", c)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, log.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after SIGTERM with --lameduck=2s\n%s", log.String())
	}
	out := log.String()
	for _, want := range []string{"network_mode=pod", "lameduck: not ready, still answering", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"interception", "tearing down"} {
		if strings.Contains(out, never) {
			t.Errorf("pod mode logged %q:\n%s", never, out)
		}
	}
}
