package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// buildAgent builds the real nodedns binary once for the tests that run it.
var buildAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "nodedns-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nodedns")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// forbiddingAPIServer is an API server that refuses every request with 403
// Forbidden, as a real one does for a service account without RBAC:
// client-go's reflectors then report list failures through klog.
func forbiddingAPIServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden: %s is not allowed for user \"test\""}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// jsonLines checks that every line of out is one JSON object with the
// fields slog's JSON handler writes, and returns them.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("stderr line %d is not JSON (%v): %s", n, err, line)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Errorf("stderr line %d has no %q: %s", n, k, line)
			}
		}
		recs = append(recs, m)
	}
	return recs
}

// TestJSONLogsOneFormat runs the real binary with --log-format json against
// an API server that refuses it, so client-go logs through klog, and
// checks that every line on stderr is JSON: the agent's own, the standard
// library's and client-go's.
func TestJSONLogsOneFormat(t *testing.T) {
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	kc := forbiddingAPIServer(t)
	var stderr dnstest.SyncBuffer
	cmd := exec.Command(bin, "serve", "--log-format=json", "--listen=127.0.0.1:0", "--upstream=127.0.0.1:9",
		"--admin=", "--kubeconfig="+kc, "--node-name=node-a", "--cluster-sync-wait=0s", "--lameduck=0s", "--loop-check=false")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	// Wait for client-go to have said something (a failed list).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), `"component":"client-go"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no client-go line within 30s; stderr:\n%s", stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("agent exited early (%v); stderr:\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not exit within 20s of SIGTERM")
	}
	recs := jsonLines(t, stderr.String())
	var clientGo, agent, stopped int
	for _, m := range recs {
		switch {
		case m["component"] == "client-go":
			clientGo++
			if !strings.Contains(fmt.Sprint(m), "forbidden") {
				t.Logf("client-go line: %v", m)
			}
		case m["msg"] == "stopped":
			stopped++
		default:
			agent++
		}
	}
	if clientGo == 0 || agent == 0 || stopped != 1 {
		t.Errorf("%d client-go lines, %d agent lines, %d 'stopped'; want some of each and one 'stopped':\n%s", clientGo, agent, stopped, stderr.String())
	}
}

// TestJSONLogsFatalError: the error that ends the agent after start is
// written by the JSON handler too, not as a second, plain line.
func TestJSONLogsFatalError(t *testing.T) {
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	// A port held without SO_REUSEPORT: the agent cannot bind it.
	held, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", "--log-format=json", "--listen="+held.LocalAddr().String(), "--upstream=127.0.0.1:9",
		"--admin=", "--loop-check=false")
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, stderr.String())
	}
	recs := jsonLines(t, stderr.String())
	if len(recs) == 0 || recs[len(recs)-1]["level"] != "ERROR" || !strings.Contains(fmt.Sprint(recs[len(recs)-1]["err"]), "address already in use") {
		t.Errorf("last line is not the JSON error naming the bind failure:\n%s", stderr.String())
	}

	// A configuration refused before any logger exists stays one plain
	// line naming the value.
	out, err := exec.Command(bin, "serve", "--log-format=yaml", "--listen=127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--log-format "yaml": want one of [text json]`) {
		t.Errorf("--log-format=yaml: err %v, output %q", err, out)
	}
}

// TestQueryLogByClass runs the real agent with --log-format json and
// --log-queries-class denial,error against a test upstream: an answer is
// not logged; NXDOMAIN, NODATA and a REFUSED query are, each as one JSON
// record with the documented fields (docs/logging.md).
func TestQueryLogByClass(t *testing.T) {
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	up := dnstest.Start(t, dnstest.Zone(60))
	// Free for UDP and TCP both: the agent binds both.
	listen := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	var stderr dnstest.SyncBuffer
	cmd := exec.Command(bin, "serve", "--log-format=json", "--log-queries-class=denial,error", "--listen="+listen,
		"--upstream="+up.Addr, "--admin=", "--loop-check=false", "--lameduck=0s")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	c := &dns.Client{Timeout: time.Second}
	ask := func(name string, qtype uint16, class uint16) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Question[0].Qclass = class
		r, _, err := c.Exchange(m, listen)
		return r, err
	}
	dnstest.Eventually(t, 20*time.Second, "the agent to answer", func() error {
		if r, err := ask("ok.example.test.", dns.TypeA, dns.ClassINET); err == nil && len(r.Answer) == 1 {
			return nil
		}
		return fmt.Errorf("agent not answering; stderr:\n%s", stderr.String())
	})
	for _, q := range []struct {
		name         string
		qtype, class uint16
		rcode        int
	}{
		{"nx1.example.test.", dns.TypeA, dns.ClassINET, dns.RcodeNameError},
		{"www.example.test.", dns.TypeSRV, dns.ClassINET, dns.RcodeSuccess},
		{"www.example.test.", dns.TypeA, dns.ClassCHAOS, dns.RcodeRefused},
		{"again.example.test.", dns.TypeA, dns.ClassINET, dns.RcodeSuccess},
	} {
		if r, err := ask(q.name, q.qtype, q.class); err != nil || r.Rcode != q.rcode {
			t.Fatalf("%s: %v %v", q.name, r, err)
		}
	}
	want := map[string]string{"nx1.example.test.": "denial NXDOMAIN", "www.example.test./SRV": "denial NOERROR", "www.example.test./A": "error REFUSED"}
	got := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		got = map[string]string{}
		for _, m := range jsonLines(t, stderr.String()) {
			if m["component"] != "query" {
				continue
			}
			for _, k := range []string{"client", "name", "type", "rcode", "class", "answers", "truncated", "source", "proto", "duration"} {
				if _, ok := m[k]; !ok {
					t.Errorf("query record lacks %q: %v", k, m)
				}
			}
			key := m["name"].(string)
			if key == "www.example.test." {
				key += "/" + m["type"].(string)
			}
			got[key] = fmt.Sprint(m["class"], " ", m["rcode"])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("query log %v, want %v; stderr:\n%s", got, want, stderr.String())
	}
}
