package agent

// --lameduck had no upper bound (pkg/config bounds it now), and once the
// first SIGTERM had started it nothing ended it early: Serve's
// signal.NotifyContext kept catching SIGTERM and SIGINT, and shutdown slept
// the whole lameduck. With --lameduck=999999h, SIGTERM, SIGTERM, SIGINT
// were all ignored until SIGKILL (the kubelet sends it after the grace
// period, 30 s in deploy/daemonset.yaml, so the pod died without the drain
// and the teardown of the rules). Now a second signal ends the lameduck:
// the agent drains, tears down and exits at once, and says so.
//
// The agent runs in a child process (this test binary run again, TestMain
// calling serveChild), so that real signals reach it.

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

const serveChildEnv = "NODEDNS_TEST_SERVE_ARGS"

// serveChild is `nodedns serve` with args in this process, logging to
// stderr.
func serveChild(args []string) int {
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := Serve(cfg, Options{Log: log, Args: args}); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

func TestAttackLameduckIgnoresSignals(t *testing.T) {
	for _, second := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(second.String(), func(t *testing.T) { secondSignalEndsLameduck(t, second) })
	}
}

func secondSignalEndsLameduck(t *testing.T, second syscall.Signal) {
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	args := fmt.Sprintf("--listen=%s --upstream=127.0.0.1:9 --admin= --loop-check=false --lameduck=5m --log-level=info", addr)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+args)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	exited := make(chan error, 1)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Kill()
	}()
	waitLine := func(substr string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the agent exited before logging %q:\n%s", substr, all.String())
				}
				all.WriteString(l + "\n")
				if strings.Contains(l, substr) {
					return
				}
			case <-deadline:
				t.Fatalf("the agent never logged %q:\n%s", substr, all.String())
			}
		}
	}
	waitLine("serving DNS")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLine("lameduck")
	time.Sleep(200 * time.Millisecond)
	_ = cmd.Process.Signal(second)
	select {
	case err := <-exited:
		for l := range lines {
			all.WriteString(l + "\n")
		}
		if err != nil {
			t.Errorf("exited after the second signal: %v; want a clean exit (drain, teardown)\n%s", err, all.String())
		}
		for _, want := range []string{"lameduck cut short", "stopped"} {
			if !strings.Contains(all.String(), want) {
				t.Errorf("the log lacks %q:\n%s", want, all.String())
			}
		}
	case <-time.After(3 * time.Second):
		t.Errorf("--lameduck=5m: SIGTERM, then %v during the lameduck: still running 3 s later; "+
			"want a second signal to end the lameduck (drain, teardown, exit)", second)
	}
}
