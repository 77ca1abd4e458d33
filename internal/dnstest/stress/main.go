// Command stress drives a running nodedns to measure how it holds up under
// hostile load (scripts/bounds.sh runs it): whether its memory stays
// bounded while every name misses, and whether well-behaved clients keep
// their latency while another client floods:
//
//   - sweep: N distinct random names (every one a cache miss resolved
//     upstream), sampling the agent's RSS (/proc), cache size (/stats) and
//     goroutines (/metrics) every -sample queries;
//   - flood: the latency of well-behaved clients (cached names, and a share
//     of misses) alone, then while one client floods random names
//     open-loop from its own address.
//
// It prints Markdown tables. Every phase is bounded in queries and time;
// traffic goes only to the -server address (loopback).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

var (
	server   = flag.String("server", "127.0.0.2:5353", "agent address (ip:port)")
	admin    = flag.String("admin", "127.0.0.1:9298", "agent admin address")
	pid      = flag.Int("pid", 0, "agent process ID (for RSS)")
	mode     = flag.String("mode", "sweep", "sweep or flood")
	total    = flag.Int("n", 1000000, "sweep: distinct names")
	sample   = flag.Int("sample", 50000, "sweep: queries between samples")
	workers  = flag.Int("workers", 64, "sweep: concurrent clients")
	secs     = flag.Int("secs", 10, "flood: seconds per phase")
	normals  = flag.Int("clients", 3, "flood: well-behaved clients")
	rate     = flag.Int("rate", 300, "flood: queries/s per well-behaved client")
	missPct  = flag.Int("miss-pct", 10, "flood: share of the well-behaved clients' queries that are misses")
	floodQPS = flag.Int("flood-qps", 0, "flood: the flooder's rate (0: as fast as it can send)")
	timeout  = flag.Duration("timeout", 2*time.Second, "patience for one answer")
)

func main() {
	flag.Parse()
	var err error
	switch *mode {
	case "sweep":
		err = sweep()
	case "flood":
		err = flood()
	default:
		err = fmt.Errorf("-mode %q: want sweep or flood", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		os.Exit(1)
	}
}

// ask sends one query on c (connected UDP) and waits for its answer.
func ask(c net.Conn, name string, buf []byte) (rcode int, err error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	wire, err := m.Pack()
	if err != nil {
		return -1, err
	}
	if _, err := c.Write(wire); err != nil {
		return -1, err
	}
	_ = c.SetReadDeadline(time.Now().Add(*timeout))
	for {
		n, err := c.Read(buf)
		if err != nil {
			return -1, err
		}
		r := new(dns.Msg)
		if r.Unpack(buf[:n]) != nil || r.Id != m.Id {
			continue
		}
		return r.Rcode, nil
	}
}

type agentFigures struct {
	rssKB, goroutines, cacheEntries, cacheCapacity int64
}

func figures() agentFigures {
	var f agentFigures
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				f.rssKB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	defer hc.CloseIdleConnections()
	if resp, err := hc.Get("http://" + *admin + "/stats"); err == nil {
		var doc struct {
			Cache *struct {
				Entries  int64 `json:"entries"`
				Capacity int64 `json:"capacity"`
			} `json:"cache"`
		}
		if json.NewDecoder(resp.Body).Decode(&doc) == nil && doc.Cache != nil {
			f.cacheEntries, f.cacheCapacity = doc.Cache.Entries, doc.Cache.Capacity
		}
		resp.Body.Close()
	}
	if resp, err := hc.Get("http://" + *admin + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				f.goroutines = int64(x)
			}
		}
		resp.Body.Close()
	}
	return f
}

// sweep sends -n distinct names and samples the agent as it goes.
func sweep() error {
	var next, done, lost, servfail atomic.Int64
	start := time.Now()
	f0 := figures()
	fmt.Printf("| queries | elapsed | q/s (since last) | RSS MiB | cache entries / capacity | goroutines | lost | SERVFAIL |\n")
	fmt.Printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| 0 | 0s | - | %.1f | %d / %d | %d | 0 | 0 |\n", float64(f0.rssKB)/1024, f0.cacheEntries, f0.cacheCapacity, f0.goroutines)
	run := rand.Uint64()
	var wg sync.WaitGroup
	errc := make(chan error, *workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("udp", *server)
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				i := next.Add(1)
				if i > int64(*total) {
					return
				}
				name := fmt.Sprintf("s%x-%x.example.test.", run&0xffffff, uint64(i)*0x9E3779B97F4A7C15)
				rc, err := ask(c, name, buf)
				switch {
				case err != nil:
					lost.Add(1)
				case rc == dns.RcodeServerFailure:
					servfail.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		last, lastT := int64(0), start
		mark := int64(*sample)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			d := done.Load()
			if d < mark {
				continue
			}
			now := time.Now()
			f := figures()
			fmt.Printf("| %d | %v | %.0f | %.1f | %d / %d | %d | %d | %d |\n", d, now.Sub(start).Round(time.Second),
				float64(d-last)/now.Sub(lastT).Seconds(), float64(f.rssKB)/1024, f.cacheEntries, f.cacheCapacity, f.goroutines,
				lost.Load(), servfail.Load())
			last, lastT = d, now
			for mark <= d {
				mark += int64(*sample)
			}
		}
	}()
	wg.Wait()
	close(stop)
	sampler.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	f := figures()
	fmt.Printf("\nsweep: %d distinct names in %v; lost %d, SERVFAIL %d; final RSS %.1f MiB, cache %d / %d, goroutines %d\n",
		done.Load(), time.Since(start).Round(time.Second), lost.Load(), servfail.Load(), float64(f.rssKB)/1024,
		f.cacheEntries, f.cacheCapacity, f.goroutines)
	return nil
}

// latencies of one phase of the well-behaved clients.
type phase struct {
	mu                             sync.Mutex
	hit, miss                      []time.Duration
	lost, servfail, sent, answered int
}

func (p *phase) add(d time.Duration, isMiss bool, rc int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent++
	switch {
	case err != nil:
		p.lost++
		return
	case rc == dns.RcodeServerFailure:
		p.servfail++
	}
	p.answered++
	if isMiss {
		p.miss = append(p.miss, d)
	} else {
		p.hit = append(p.hit, d)
	}
}

func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1000) }

// wellBehaved runs the normal clients for d, each from its own loopback
// address (127.0.1.N), and tallies them in p.
func wellBehaved(ctx context.Context, p *phase, tag string) {
	var wg sync.WaitGroup
	for i := 0; i < *normals; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			la := &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(10+i))}
			ra := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(*server))
			c, err := net.DialUDP("udp", la, ra)
			if err != nil {
				fmt.Fprintln(os.Stderr, "client:", err)
				return
			}
			defer c.Close()
			buf := make([]byte, 4096)
			period := time.Second / time.Duration(*rate)
			start := time.Now()
			for j := 0; ctx.Err() == nil; j++ {
				if d := time.Until(start.Add(time.Duration(j) * period)); d > 0 {
					time.Sleep(d)
				}
				isMiss := rand.IntN(100) < *missPct
				name := fmt.Sprintf("n%d.example.test.", rand.IntN(100))
				if isMiss {
					name = fmt.Sprintf("m-%s-%d-%d-%x.example.test.", tag, i, j, rand.Uint32())
				}
				t0 := time.Now()
				rc, err := ask(c, name, buf)
				p.add(time.Since(t0), isMiss, rc, err)
			}
		}()
	}
	wg.Wait()
}

// flooder sends random names from 127.0.2.1 as fast as it can (or at
// -flood-qps) without waiting for answers; a reader drains the replies.
func flooder(ctx context.Context, sent, got *atomic.Int64) {
	la := &net.UDPAddr{IP: net.IPv4(127, 0, 2, 1)}
	ra := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(*server))
	var wg sync.WaitGroup
	for s := 0; s < 4; s++ {
		c, err := net.DialUDP("udp", la, ra)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flooder:", err)
			return
		}
		_ = c.SetReadBuffer(4 << 20)
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for {
				_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, err := c.Read(buf); err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				got.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			defer c.Close()
			m := new(dns.Msg)
			var period time.Duration
			if *floodQPS > 0 {
				period = time.Second * 4 / time.Duration(*floodQPS)
			}
			start := time.Now()
			for j := 0; ctx.Err() == nil; j++ {
				if period > 0 {
					if d := time.Until(start.Add(time.Duration(j) * period)); d > 0 {
						time.Sleep(d)
					}
				}
				m.SetQuestion(fmt.Sprintf("f%d-%x.example.test.", s, rand.Uint64()), dns.TypeA)
				wire, _ := m.Pack()
				if _, err := c.Write(wire); err == nil {
					sent.Add(1)
				}
			}
			time.Sleep(600 * time.Millisecond) // let the reader drain
		}()
	}
	wg.Wait()
}

func flood() error {
	// Warm the well-behaved clients' cached names.
	c, err := net.Dial("udp", *server)
	if err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for i := 0; i < 100; i++ {
		if _, err := ask(c, fmt.Sprintf("n%d.example.test.", i), buf); err != nil {
			return fmt.Errorf("warming: %w", err)
		}
	}
	c.Close()
	d := time.Duration(*secs) * time.Second
	var alone, during phase
	ctx, cancel := context.WithTimeout(context.Background(), d)
	wellBehaved(ctx, &alone, "alone")
	cancel()

	ctx, cancel = context.WithTimeout(context.Background(), d)
	defer cancel()
	var fsent, fgot atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); flooder(ctx, &fsent, &fgot) }()
	time.Sleep(200 * time.Millisecond) // the flood is on
	wellBehaved(ctx, &during, "flood")
	wg.Wait()

	fmt.Printf("| well-behaved clients (%d x %d q/s, %d%% misses) | sent | lost | SERVFAIL | hit p50 | hit p99 | miss p50 | miss p99 |\n",
		*normals, *rate, *missPct)
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct {
		name string
		p    *phase
	}{{"alone", &alone}, {"during the flood", &during}} {
		p := row.p
		fmt.Printf("| %s | %d | %d | %d | %s | %s | %s | %s |\n", row.name, p.sent, p.lost, p.servfail,
			us(pct(p.hit, 0.5)), us(pct(p.hit, 0.99)), us(pct(p.miss, 0.5)), us(pct(p.miss, 0.99)))
	}
	fmt.Printf("\nflooder (one address, open loop, random names): %d sent in %v (%.0f q/s), %d answered\n",
		fsent.Load(), d, float64(fsent.Load())/d.Seconds(), fgot.Load())
	return nil
}
