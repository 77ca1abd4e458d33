package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func freePort(t *testing.T) int {
	t.Helper()
	// A port free for both UDP and TCP: the agent binds both.
	for range 50 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		pc.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

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

// writeConfigMap lays out dir like a ConfigMap volume: config.yaml ->
// ..data/config.yaml, ..data -> a timestamped directory, swapped atomically.
func writeConfigMap(t *testing.T, dir, content string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.yaml")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink("..data/config.yaml", link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLiveReload(t *testing.T) {
	reloadPoll = 50 * time.Millisecond
	up1 := dnstest.Start(t, answerWith("192.0.2.1"))
	up2 := dnstest.Start(t, answerWith("192.0.2.2"))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	base := fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\n", addr)
	writeConfigMap(t, dir, base+"upstream: ["+up1.Addr+"]\ncache-size: 100\n")

	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := loadConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := build(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a.args, a.level = args, new(slog.LevelVar)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	c := &dns.Client{Timeout: time.Second}
	ask := func(name string) (string, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return "", err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			return "", fmt.Errorf("%s: rcode %s, %d answers", name, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		return r.Answer[0].(*dns.A).A.String(), nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ip, err := ask("first.example."); err == nil && ip == "192.0.2.1" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("agent not answering through up1: %v %v", ip, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

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
	writeConfigMap(t, dir, base+"upstream: ["+up2.Addr+"]\ncache-size: zero\n")
	time.Sleep(300 * time.Millisecond)
	if ip, err := ask("second.example."); err != nil || ip != "192.0.2.1" {
		t.Fatalf("after a bad file: %q %v, want the old upstream's 192.0.2.1", ip, err)
	}

	// A good file switches upstreams.
	writeConfigMap(t, dir, base+"upstream: ["+up2.Addr+"]\ncache-size: 50\nlog-level: debug\n")
	deadline = time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		ip, err := ask(fmt.Sprintf("third%d.example.", i))
		if err == nil && ip == "192.0.2.2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream not switched: %q %v", ip, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d queries failed across reloads", failed.Load(), sent.Load())
	}
	if got := a.cache.Stats().Capacity; got != 50 {
		t.Fatalf("cache capacity after reload = %d, want 50", got)
	}
	if a.level.Level() != slog.LevelDebug {
		t.Fatalf("log level not reloaded")
	}
}
