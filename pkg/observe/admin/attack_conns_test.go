package admin

// The admin endpoint, which the DaemonSet serves on the node's IP
// (--admin=[$(HOST_IP)]:9253: reachable by anything that reaches the node,
// every pod included), accepted any number of connections: net/http serves
// each on a goroutine with its buffers, and a connection that sent part of
// a request line was kept until ReadHeaderTimeout (5 s), then reopened.
// 9,000 such connections took the agent from 42 to 205 MiB under its 256
// MiB limit. The header limit was net/http's default, 1 MiB per
// connection.
//
// Now (limit.go): connections bounded in total and per source address, a
// header limit sized for probes and scrapes, shorter read times; /health,
// /ready and /metrics still answered meanwhile for other sources, and the
// unix socket the probes use untouched by the TCP bounds.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// startAdmin serves the endpoint on 127.0.0.1:0 and a unix socket; it
// returns the server, the TCP address and a client of the socket.
func startAdmin(t *testing.T) (*Server, string, *http.Client) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	s, err := New(Config{Addr: "127.0.0.1:0", Socket: sock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "nodedns_up 1\n") })}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		<-done
	})
	unix := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	return s, s.Addr().String(), unix
}

// hold opens n connections from src to addr and returns those the endpoint
// kept open. partial: each sends part of a request line (a slow client,
// cut after readHeaderTimeout), and seen, when given, says how many
// connections the endpoint has accepted (kept or closed); else each
// completes a request and keeps its connection idle (cut after
// idleTimeout).
func hold(t *testing.T, addr, src string, n int, partial bool, seen func() int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	var held []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if partial {
			_, _ = c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
		} else {
			_, _ = c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		held = append(held, c)
	}
	if partial && seen != nil {
		// What is open says what the endpoint kept only once it has
		// accepted every connection (a fixed pause was too short on a
		// loaded machine: connections still in the accept queue looked
		// kept).
		deadline := time.Now().Add(10 * time.Second)
		for seen() < len(held) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return stillOpen(held)
}

// stillOpen returns the connections the server has not closed.
func stillOpen(conns []net.Conn) []net.Conn {
	var open []net.Conn
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "timeout") {
			open = append(open, c)
		}
	}
	return open
}

// clientFrom is an HTTP client whose connections come from src.
func clientFrom(src string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}}
}

func getOK(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

func TestAttackAdminConnectionsUnbounded(t *testing.T) {
	s, addr, _ := startAdmin(t)
	const conns = 2000
	runtime.GC()
	g0 := runtime.NumGoroutine()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	open := len(hold(t, addr, "127.0.0.2", conns, true, func() int {
		st := s.ConnStats()
		return st.Open + int(st.Refused) + int(st.Evicted)
	}))
	// The endpoint's own count decides: a connection it closed can still
	// look open to the client for a moment on a loaded machine. Read
	// before the other source below adds its own.
	kept := s.ConnStats().Open
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	goroutines := runtime.NumGoroutine() - g0

	// Another source still gets the probes and scrapes.
	c := clientFrom("127.0.0.3")
	for _, path := range []string{"/metrics", "/health", "/ready"} {
		if err := getOK(c, "http://"+addr+path); err != nil {
			t.Errorf("%s from another source while one holds %d connections: %v", path, open, err)
		}
	}
	if kept > maxConnsPerSource {
		t.Errorf("one source holds %d of %d admin connections open with a partial request each (%d look open to it; %d goroutines, heap +%.1f MiB): "+
			"want at most %d", kept, conns, open, goroutines, float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/(1<<20), maxConnsPerSource)
	}
	if st := s.ConnStats(); st.Refused == 0 {
		t.Errorf("stats %+v: want the refused counted", st)
	}
}

// Many sources, each at its share, fill the total: a scrape from yet
// another address still gets in (the oldest connection of a source holding
// the most makes room), the total holds, and a source holding one
// connection (Prometheus keeping its connection alive) is never the one
// evicted. The unix socket answers the probes throughout.
func TestAdminTotalBoundLeavesRoomForScrapes(t *testing.T) {
	s, addr, unix := startAdmin(t)
	prom := clientFrom("127.0.0.200")
	if err := getOK(prom, "http://"+addr+"/metrics"); err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	for i := range 10 { // 10 sources x 8 connections: more than the total
		flood = append(flood, hold(t, addr, fmt.Sprintf("127.0.1.%d", i+1), maxConnsPerSource, false, nil)...)
	}
	if st, n := s.ConnStats(), len(stillOpen(flood)); st.Open > maxConns || n > maxConns {
		t.Errorf("%d connections open (%d held by the flood): want at most %d", st.Open, n, maxConns)
	}
	for i := range 5 {
		if err := getOK(clientFrom(fmt.Sprintf("127.0.2.%d", i+1)), "http://"+addr+"/metrics"); err != nil {
			t.Errorf("a scrape from a new source while the total is held: %v", err)
		}
	}
	// Prometheus's kept-alive connection was not evicted: the next scrape
	// reuses it.
	reused := false
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(),
		&httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}), "GET", "http://"+addr+"/metrics", nil)
	if resp, err := prom.Do(req); err != nil {
		t.Errorf("the scrape of a source holding one connection: %v", err)
	} else {
		resp.Body.Close()
		if !reused {
			t.Errorf("the kept-alive connection of a source holding one was evicted")
		}
	}
	if st := s.ConnStats(); st.Evicted == 0 {
		t.Errorf("stats %+v: want the evictions counted", st)
	}
	for _, path := range []string{"/health", "/ready"} {
		if err := getOK(unix, "http://agent"+path); err != nil {
			t.Errorf("%s over the unix socket while the TCP side is full: %v", path, err)
		}
	}
}

func TestAttackAdminHeaderLimit(t *testing.T) {
	_, addr, _ := startAdmin(t)
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	b.WriteString("GET /health HTTP/1.1\r\nHost: x\r\n")
	for i := 0; i < 512; i++ {
		fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", i, strings.Repeat("a", 1000))
	}
	b.WriteString("\r\n")
	// The server may stop reading once over the limit: a failed write is
	// fine, the reply is what counts.
	_, _ = io.WriteString(c, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with %d KiB of headers got %s; want 431: the admin endpoint needs a few KiB of headers, "+
			"net/http's default lets every connection hold 1 MiB", b.Len()>>10, resp.Status)
	}
}

// A client that sends part of a request and stops is cut after the header
// read time, not held.
func TestAdminSlowHeaderCut(t *testing.T) {
	_, addr, _ := startAdmin(t)
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET /metrics HTTP/1.1\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(readHeaderTimeout + 3*time.Second))
	t0 := time.Now()
	_, _ = io.Copy(io.Discard, c) // until the server closes it
	if d := time.Since(t0); d > readHeaderTimeout+2*time.Second {
		t.Errorf("a partial request held its connection %v; want it cut after %v", d.Round(time.Millisecond), readHeaderTimeout)
	}
}
