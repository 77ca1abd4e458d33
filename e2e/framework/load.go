package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodedns/nodedns/internal/tools/dnsload/report"
)

// DNSLoadResult is the JSON line of internal/tools/dnsload, with the
// output it was read from.
type DNSLoadResult struct {
	report.Result
	Raw string `json:"-"`
}

// DNSLoad describes a run of dnsload (internal/tools/dnsload, in the
// client image as /usr/local/bin/dnsload).
type DNSLoad struct {
	Server  string   // ip:port
	Names   []string // asked in turn
	Types   string   // -types (empty: dnsload's default, A and AAAA)
	QPS     int
	For     time.Duration
	Timeout time.Duration
	Sockets int // 0: dnsload's default
}

// GlibcResult is the JSON line of glibc-loop (getaddrinfo in a loop
// through the pod's resolv.conf, /usr/local/bin/glibc-loop in the client
// image).
type GlibcResult struct {
	Lookups    int     `json:"lookups"`
	OK         int     `json:"ok"`
	Failed     int     `json:"failed"`
	FailPct    float64 `json:"fail_pct"`
	LongestGap float64 `json:"longest_gap_ms"`
	GapAt      float64 `json:"gap_at_s"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Max        float64 `json:"max_ms"`
	Raw        string  `json:"-"`
}

func (r GlibcResult) String() string {
	return fmt.Sprintf("lookups %d, ok %d, failed %d (%.2f %%), longest gap %.0f ms at %.1f s, p50 %.1f ms, p99 %.1f ms, max %.0f ms",
		r.Lookups, r.OK, r.Failed, r.FailPct, r.LongestGap, r.GapAt, r.P50, r.P99, r.Max)
}

// GlibcLoop describes a run of glibc-loop: Threads threads look up Names
// in turn for For, PauseMS between two lookups.
type GlibcLoop struct {
	Threads int
	For     time.Duration
	PauseMS int
	Names   []string
}

// Running is a load started in a pod; Wait returns its result.
type Running[R any] struct {
	wg  sync.WaitGroup
	res R
	err error
}

// Wait waits for the load's end and returns its result; a failed run
// (the command, or its output not the JSON line) fails the test.
func (r *Running[R]) Wait(t testing.TB) R {
	t.Helper()
	r.wg.Wait()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.res
}

// lastJSON decodes the last line of out that starts with '{'.
func lastJSON(out string, v any) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "{") {
			return json.Unmarshal([]byte(lines[i]), v)
		}
	}
	return fmt.Errorf("no JSON line in %q", tail(out, 5))
}

// StartDNSLoad starts dnsload in a pod; the caller Waits for its result.
func (c *Cluster) StartDNSLoad(ns, pod string, l DNSLoad) *Running[DNSLoadResult] {
	args := []string{"dnsload", "-server", l.Server, "-names", strings.Join(l.Names, ","),
		"-qps", strconv.Itoa(l.QPS), "-for", l.For.String(), "-timeout", l.Timeout.String()}
	if l.Types != "" {
		args = append(args, "-types", l.Types)
	}
	if l.Sockets > 0 {
		args = append(args, "-sockets", strconv.Itoa(l.Sockets))
	}
	r := &Running[DNSLoadResult]{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		res, err := c.ExecErr(ns, pod, "", nil, l.For+l.Timeout+time.Minute, args...)
		if err != nil {
			r.err = fmt.Errorf("dnsload: %w", err)
			return
		}
		if err := lastJSON(res.Stdout, &r.res); err != nil {
			r.err = fmt.Errorf("dnsload in %s/%s: %w (stderr: %s)", ns, pod, err, tail(res.Stderr, 5))
		}
		r.res.Raw = strings.TrimSpace(res.Stdout)
	}()
	return r
}

// StartGlibcLoop starts glibc-loop in a pod; the caller Waits for its
// result.
func (c *Cluster) StartGlibcLoop(ns, pod string, l GlibcLoop) *Running[GlibcResult] {
	args := append([]string{"glibc-loop", strconv.Itoa(l.Threads), strconv.Itoa(int(l.For.Seconds())), strconv.Itoa(l.PauseMS)}, l.Names...)
	r := &Running[GlibcResult]{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		res, err := c.ExecErr(ns, pod, "", nil, l.For+2*time.Minute, args...)
		if err != nil {
			r.err = fmt.Errorf("glibc-loop: %w", err)
			return
		}
		if err := lastJSON(res.Stdout, &r.res); err != nil {
			r.err = fmt.Errorf("glibc-loop in %s/%s: %w (stderr: %s)", ns, pod, err, tail(res.Stderr, 5))
		}
		r.res.Raw = strings.TrimSpace(res.Stdout)
	}()
	return r
}

// PodWatch counts the pods of a selector from the API server's watch
// events: it lists first (each pod counted from then), then watches from
// that list's resourceVersion, so every pod that exists in between is
// seen, however briefly (sampling with a list every so often could miss
// one). A pod exists from its ADDED to its DELETED event, terminating
// included.
type PodWatch struct {
	mu       sync.Mutex
	live     map[string]bool
	max, now int
	events   []string
	err      error
	cancel   context.CancelFunc
	done     chan struct{}
}

// WatchPods starts a PodWatch of the pods of sel in ns; Stop ends it.
func (c *Cluster) WatchPods(t testing.TB, ns, sel string) *PodWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pods := c.Client.CoreV1().Pods(ns)
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cancel()
		t.Fatalf("listing pods %s in %s: %v", sel, ns, err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatalf("watching pods %s in %s: %v", sel, ns, err)
	}
	pw := &PodWatch{live: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	for _, p := range l.Items {
		pw.record(watch.Added, p.Name)
	}
	go func() {
		defer close(pw.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					pw.mu.Lock()
					if ctx.Err() == nil {
						pw.err = fmt.Errorf("the watch of pods %s in %s ended early (after %d events)", sel, ns, len(pw.events))
					}
					pw.mu.Unlock()
					return
				}
				if ev.Type == watch.Error {
					pw.mu.Lock()
					pw.err = fmt.Errorf("watch of pods %s in %s: error event %v", sel, ns, ev.Object)
					pw.mu.Unlock()
					return
				}
				if p, ok := ev.Object.(*corev1.Pod); ok {
					pw.record(ev.Type, p.Name)
				}
			}
		}
	}()
	t.Cleanup(pw.Stop)
	return pw
}

func (pw *PodWatch) record(typ watch.EventType, name string) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.events = append(pw.events, string(typ)+" "+name)
	switch typ {
	case watch.Added:
		if !pw.live[name] {
			pw.live[name] = true
			pw.now++
		}
	case watch.Deleted:
		if pw.live[name] {
			delete(pw.live, name)
			pw.now--
		}
	}
	pw.max = max(pw.max, pw.now)
}

// Counts returns the most pods that existed at once, how many exist now,
// the events seen, and the watch's failure if it ended early.
func (pw *PodWatch) Counts() (maxPods, now int, events []string, err error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.max, pw.now, append([]string(nil), pw.events...), pw.err
}

// Stop ends the watch (idempotent).
func (pw *PodWatch) Stop() {
	pw.cancel()
	<-pw.done
}

// DNSPerfResult is what dnsperf printed: queries sent and lost, SERVFAIL
// answers, the rate reached and its response-code line.
type DNSPerfResult struct {
	Sent, Lost, ServFail int
	QPS                  float64
	Codes                string
	Raw                  string
}

func (r DNSPerfResult) String() string {
	return fmt.Sprintf("sent %d, lost %d, SERVFAIL %d, %.0f queries/s; %s", r.Sent, r.Lost, r.ServFail, r.QPS, r.Codes)
}

// parseDNSPerf reads dnsperf's statistics.
func parseDNSPerf(out string) (DNSPerfResult, error) {
	r := DNSPerfResult{Raw: out}
	var haveSent, haveLost bool
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		field := func(prefix string) (string, bool) {
			if !strings.HasPrefix(l, prefix) {
				return "", false
			}
			f := strings.Fields(strings.TrimPrefix(l, prefix))
			if len(f) == 0 {
				return "", false
			}
			return f[0], true
		}
		if v, ok := field("Queries sent:"); ok {
			r.Sent, _ = strconv.Atoi(v)
			haveSent = true
		}
		if v, ok := field("Queries lost:"); ok {
			r.Lost, _ = strconv.Atoi(v)
			haveLost = true
		}
		if v, ok := field("Queries per second:"); ok {
			r.QPS, _ = strconv.ParseFloat(v, 64)
		}
		if strings.HasPrefix(l, "Response codes:") {
			r.Codes = l
			f := strings.Fields(l)
			for i := range f {
				if f[i] == "SERVFAIL" && i+1 < len(f) {
					r.ServFail, _ = strconv.Atoi(f[i+1])
				}
			}
		}
	}
	if !haveSent || !haveLost {
		return r, fmt.Errorf("dnsperf printed no statistics: %s", tail(out, 20))
	}
	return r, nil
}

// StartDNSPerf starts dnsperf in a pod: the queries of the file (in the
// pod) sent to server at qps for secs seconds from 4 clients, each
// waiting 3 s for its answer.
func (c *Cluster) StartDNSPerf(ns, pod, server, file string, secs, qps int) *Running[DNSPerfResult] {
	r := &Running[DNSPerfResult]{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		res, err := c.ExecErr(ns, pod, "", nil, time.Duration(secs)*time.Second+time.Minute,
			"dnsperf", "-s", server, "-d", file, "-l", strconv.Itoa(secs), "-Q", strconv.Itoa(qps), "-c", "4", "-t", "3")
		if err != nil {
			r.err = fmt.Errorf("dnsperf: %w", err)
			return
		}
		r.res, r.err = parseDNSPerf(res.Stdout + res.Stderr)
	}()
	return r
}
