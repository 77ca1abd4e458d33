package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestPprofFlag: the real agent with --pprof answers /debug/pprof on its
// admin socket and not on its TCP admin address; --pprof without a socket
// is refused at start.
func TestPprofFlag(t *testing.T) {
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "serve", "--listen=127.0.0.1:0", "--upstream=127.0.0.1:9", "--pprof").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--pprof needs --admin-socket") {
		t.Errorf("--pprof without --admin-socket: err %v, output %q", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := l.Addr().String()
	l.Close()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	var stderr dnstest.SyncBuffer
	cmd := exec.Command(bin, "serve", "--listen=127.0.0.1:0", "--upstream=127.0.0.1:9", "--loop-check=false", "--lameduck=0s",
		"--admin="+admin, "--admin-socket="+sock, "--pprof")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	unix := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	tcp := &http.Client{Timeout: 5 * time.Second}
	status := func(c *http.Client, url string) (int, string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := status(unix, "http://agent/debug/pprof/goroutine?debug=1")
		if err == nil {
			if code != 200 || !strings.Contains(body, "goroutine profile:") {
				t.Fatalf("socket /debug/pprof/goroutine = %d %.100q", code, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admin socket after 20s (%v); stderr:\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap"} {
		if code, _, err := status(tcp, "http://"+admin+path); err != nil || code != http.StatusNotFound {
			t.Errorf("TCP admin %s: %d, %v; want 404", path, code, err)
		}
	}
	if code, _, err := status(tcp, "http://"+admin+"/health"); err != nil || code != 200 {
		t.Errorf("TCP admin /health: %d, %v", code, err)
	}

	// `nodedns pprof` fetches through the socket, to stdout.
	prof, err := exec.Command(bin, "pprof", "--socket", sock, "goroutine?debug=1").Output()
	if err != nil || !strings.Contains(string(prof), "goroutine profile:") {
		t.Errorf("nodedns pprof goroutine: %v, %.100q", err, prof)
	}
	heap, err := exec.Command(bin, "pprof", "--socket", sock, "heap").Output()
	if err != nil || len(heap) < 2 || heap[0] != 0x1f || heap[1] != 0x8b {
		t.Errorf("nodedns pprof heap: %v, %d bytes, want a gzipped profile", err, len(heap))
	}
}
