package dnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message (and
// returns: the helpers return right after it).
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, "the third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}

	// A cond that never holds: asked at once, again until the deadline and
	// once at it; the failure names what was waited for.
	r := &fatalRecorder{TB: t}
	start := time.Now()
	var last time.Time
	WaitFor(r, 100*time.Millisecond, "the impossible", func() bool { last = time.Now(); return false })
	if !strings.Contains(r.msg, "the impossible") || !strings.Contains(r.msg, "100ms") {
		t.Errorf("failure %q: want it to name what and the timeout", r.msg)
	}
	if last.Sub(start) < 100*time.Millisecond {
		t.Errorf("last asked %v after the start, want at the deadline (100ms)", last.Sub(start))
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "the second call", func() error {
		if n++; n < 2 {
			return errors.New("first")
		}
		return nil
	})
	r := &fatalRecorder{TB: t}
	n = 0
	Eventually(r, 120*time.Millisecond, "an answer", func() error { n++; return fmt.Errorf("attempt %d", n) })
	if want := fmt.Sprintf("an answer: attempt %d", n); !strings.Contains(r.msg, want) {
		t.Errorf("failure %q: want the last error, %q", r.msg, want)
	}
}

func TestMustRR(t *testing.T) {
	if rr := MustRRf("%s 60 IN A 192.0.2.%d", "a.example.", 7); rr.String() != "a.example.\t60\tIN\tA\t192.0.2.7" {
		t.Errorf("MustRRf: %q", rr)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustRR of a bad record did not panic")
		}
	}()
	MustRR("a.example. 60 IN A not-an-address")
}

func TestFreePort(t *testing.T) {
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("UDP %s: %v", addr, err)
	}
	defer pc.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("TCP %s: %v", addr, err)
	}
	l.Close()
	if ap := FreeAddrPort(t); !ap.Addr().IsLoopback() || ap.Port() == 0 {
		t.Errorf("FreeAddrPort: %v", ap)
	}
}

func TestMountConfigMap(t *testing.T) {
	dir := t.TempDir()
	read := func(k string) string {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	MountConfigMap(t, dir, map[string]string{"a": "1", "b": "2"})
	if read("a") != "1" || read("b") != "2" {
		t.Fatalf("a=%q b=%q", read("a"), read("b"))
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	MountConfigMap(t, dir, map[string]string{"a": "3"})
	if read("a") != "3" {
		t.Errorf("a=%q after the update", read("a"))
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b after it left the map: %v, want a dangling link", err)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "a")); link != filepath.Join("..data", "a") {
		t.Errorf("a links to %q, want through ..data", link)
	}
	if now, _ := os.Readlink(filepath.Join(dir, "..data")); now == first {
		t.Errorf("..data still %q", now)
	}
}

func TestRunUntilCleanup(t *testing.T) {
	stopped := make(chan struct{})
	t.Run("run", func(t *testing.T) {
		RunUntilCleanup(t, "run", func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return nil
		})
	})
	select {
	case <-stopped:
	default:
		t.Fatal("run had not returned when its test ended")
	}
}
