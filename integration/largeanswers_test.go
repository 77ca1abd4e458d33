//go:build integration

package integration

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Memory stays bounded whatever the answers weigh: a pod asking random
// names under a zone whose server answers
// ~60 KB each (over TCP, after a TC reply over UDP) must not push the agent
// past its memory bound. The agent's cache is bounded by bytes
// (--cache-max-bytes) and keeps no reply over its entry limit, and the
// work in flight is bounded per client; the test floods such names, the
// client retrying each over TCP as stub resolvers do, and asserts the
// agent's peak RSS. It does the same with ~12 KB answers, under the entry
// limit, which the cache keeps until its byte bound evicts them.

// bigTXTLen is the bytes of text in each TXT record of a big answer.
const bigTXTLen = 230

// bigUpstream answers every A/TXT query under flood.test. with a big TXT
// answer (records of bigTXTLen bytes): over UDP a TC reply (header and
// question), over TCP the whole of it. The answer is packed once; each reply patches the ID and
// the question (the owners are pointers to it).
type bigUpstream struct {
	udp      net.PacketConn
	tcp      net.Listener
	template []byte
	records  int // TXT records in the answer
	qlen     int // length of the question name in the template
	udpN     atomic.Int64
	tcpN     atomic.Int64
}

func startBigUpstream(t *testing.T, nameLen, records int) *bigUpstream {
	t.Helper()
	name := strings.Repeat("x", nameLen-len(".flood.test.")) + ".flood.test."
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	m.Response, m.Authoritative = true, true
	for i := 0; i < records; i++ {
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 3600},
			Txt: []string{fmt.Sprintf("%04d%s", i, strings.Repeat("z", bigTXTLen-4))}})
	}
	m.Compress = true
	tpl, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	u := &bigUpstream{template: tpl, records: records, qlen: len(name) + 1}
	// UDP and TCP on one port: a free UDP port may be taken for TCP.
	for try := 0; ; try++ {
		if u.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if u.tcp, err = net.Listen("tcp", u.udp.LocalAddr().String()); err == nil {
			break
		}
		u.udp.Close()
		if try == 20 {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { u.udp.Close(); u.tcp.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, addr, err := u.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if r := u.reply(buf[:n], true); r != nil {
				u.udpN.Add(1)
				_, _ = u.udp.WriteTo(r, addr)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := u.tcp.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for {
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					r := u.reply(q, false)
					if r == nil {
						return
					}
					u.tcpN.Add(1)
					if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return u
}

// reply is the answer to the query q: the template with q's ID, RD and
// question; truncated to header and question (TC) when tc.
func (u *bigUpstream) reply(q []byte, tc bool) []byte {
	qEnd := 12 + u.qlen + 4
	if len(q) < qEnd || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	var r []byte
	if tc {
		r = append([]byte(nil), u.template[:qEnd]...)
		binary.BigEndian.PutUint16(r[6:], 0) // no answers
		r[2] |= 0x02                         // TC
		r = append(r, optRecord(q)...)
	} else {
		r = append(append([]byte(nil), u.template...), optRecord(q)...)
	}
	copy(r[0:2], q[0:2])
	r[2] |= q[2] & 0x01 // RD
	copy(r[12:qEnd], q[12:qEnd])
	if len(optRecord(q)) > 0 {
		binary.BigEndian.PutUint16(r[10:], 1)
	}
	return r
}

// optRecord is an OPT (4096 bytes, no flags) when q has one.
func optRecord(q []byte) []byte {
	if binary.BigEndian.Uint16(q[10:]) == 0 {
		return nil
	}
	return []byte{0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0}
}

// floodName is a random name of a fixed length under flood.test.
func floodName() string { return fmt.Sprintf("r%016x.flood.test.", rand.Uint64()) }

func TestLargeAnswerFloodRSS(t *testing.T) {
	// ~60 KB: over the entry limit, answered and never kept.
	t.Run("60KB answers", func(t *testing.T) { floodRSS(t, 250, false) })
	// ~12 KB: kept, 10,000 of them (~120 MB) under a 16 MiB bound.
	t.Run("12KB answers", func(t *testing.T) { floodRSS(t, 50, true) })
}

// floodRSS floods the agent with 10,000 random names whose answers have
// records TXT records; kept says whether the cache should keep them (fill
// up to its byte bound) or find them all too large.
func floodRSS(t *testing.T, records int, kept bool) {
	const (
		names   = 10000
		workers = 96
		// The agent's bound on cached bytes; the default (32Mi) is
		// checked the same way, this keeps the arithmetic plain.
		cacheMax = 16 << 20
	)
	nameLen := len(floodName())
	up := startBigUpstream(t, nameLen, records)
	dnsPort, adminPort := agentPorts(t)
	addr := "127.0.0.1:" + strconv.Itoa(dnsPort)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	logPath := filepath.Join(t.TempDir(), "nodedns.log")
	p, err := startCPProc("nodedns", logPath, nodednsBin, "serve", "--listen", addr, "--upstream", up.udp.LocalAddr().String(),
		"--admin", admin, "--loop-check=false", "--lameduck", "0s", "--cache-max-bytes", strconv.Itoa(cacheMax))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nodedns log (last 40 lines):\n%s", tailFile(logPath, 40))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("agent not ready: %v\n%s", err, tailFile(logPath, 40))
	}
	pid := p.cmd.Process.Pid
	baseRSS, _ := vmMem(t, pid)

	// Sample RSS while the flood runs (VmHWM has the peak too).
	stop := make(chan struct{})
	var peak atomic.Int64
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if rss, _ := vmMem(t, pid); rss > peak.Load() {
				peak.Store(rss)
			}
		}
	}()

	start := time.Now()
	var next, tcpOK, udpTC, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uc := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			for next.Add(1) <= names {
				name := floodName()
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeTXT)
				m.SetEdns0(1232, false)
				r, _, err := uc.Exchange(m, addr)
				if err != nil || !r.Truncated {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("UDP %s: %v %v", name, err, r))
					continue
				}
				udpTC.Add(1)
				// As a stub resolver does after TC: the same over TCP.
				n, err := rawTCPAnswerCount(addr, m)
				if err != nil || n != records {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("TCP %s: %d answers, %v", name, n, err))
					continue
				}
				tcpOK.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	sampler.Wait()
	rss, hwm := vmMem(t, pid)
	peakRSS := max(peak.Load(), rss)

	var st struct {
		Cache struct {
			Entries  int   `json:"entries"`
			Bytes    int64 `json:"bytes"`
			MaxBytes int64 `json:"max_bytes"`
			TooLarge int64 `json:"too_large"`
		} `json:"cache"`
	}
	resp, err := hc.Get("http://" + admin + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	report := fmt.Sprintf("%d names (~%d KB answers) in %v by %d workers: %d TC over UDP, %d full answers over TCP, %d failed; upstream saw %d UDP and %d TCP queries\n"+
		"agent RSS: %.1f MiB at start, peak %.1f MiB sampled, VmHWM %.1f MiB, %.1f MiB at the end; cache %d entries, %d bytes (max %d), %d replies too large to keep",
		names, len(up.template)/1000, elapsed.Round(time.Millisecond), workers, udpTC.Load(), tcpOK.Load(), failed.Load(), up.udpN.Load(), up.tcpN.Load(),
		kbMiB(baseRSS), kbMiB(peakRSS), kbMiB(hwm), kbMiB(rss), st.Cache.Entries, st.Cache.Bytes, st.Cache.MaxBytes, st.Cache.TooLarge)
	t.Log(report)
	if e := firstErr.Load(); e != nil {
		t.Logf("first failure: %v", e)
	}
	if out := os.Getenv("NODEDNS_FLOOD_REPORT"); out != "" {
		_ = os.WriteFile(out, []byte(report+"\n"), 0o644)
	}
	if f := failed.Load(); f > names/100 {
		t.Errorf("%d of %d lookups failed (first: %v)", f, names, firstErr.Load())
	}
	if st.Cache.Bytes > cacheMax || st.Cache.MaxBytes != cacheMax {
		t.Errorf("cache holds %d bytes, bound %d (reported max %d)", st.Cache.Bytes, cacheMax, st.Cache.MaxBytes)
	}
	if kept && (st.Cache.TooLarge != 0 || st.Cache.Bytes < cacheMax*3/4) {
		t.Errorf("answers under the entry limit: %d too large, %d bytes kept; want none too large and the cache filled to its bound", st.Cache.TooLarge, st.Cache.Bytes)
	}
	// A lookup that failed (an exchange that timed out on a loaded
	// machine) leaves a short-lived SERVFAIL entry (servfail-ttl, as
	// CoreDNS): those are the only entries allowed, each far under 1 KiB.
	if !kept && (int64(st.Cache.Entries) > failed.Load() || int64(st.Cache.Bytes) > int64(st.Cache.Entries)<<10 || st.Cache.TooLarge < names) {
		t.Errorf("answers over the entry limit: %d kept (%d bytes; %d lookups failed, each may leave a SERVFAIL entry), %d too large; want no answer kept",
			st.Cache.Entries, st.Cache.Bytes, failed.Load(), st.Cache.TooLarge)
	}
	// The bound: what the agent held at start, the cache's byte budget,
	// and room for the exchanges in flight and the Go heap's headroom.
	// Without a byte bound the cache alone would keep 10,000 x 60 KB.
	bound := baseRSS + cacheMax>>10 + 96<<10 // kB
	if hwm > bound {
		t.Errorf("agent peak RSS %.1f MiB, bound %.1f MiB (start %.1f + cache %d MiB + 96 MiB)", kbMiB(hwm), kbMiB(bound), kbMiB(baseRSS), cacheMax>>20)
	}
}

// rawTCPAnswerCount sends m over a new TCP connection to addr and returns
// the reply's answer count, checking its ID and length without unpacking
// 60 KB.
func rawTCPAnswerCount(addr string, m *dns.Msg) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	q, err := m.Pack()
	if err != nil {
		return 0, err
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		return 0, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return 0, err
	}
	r := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, r); err != nil {
		return 0, err
	}
	if len(r) < 12 || binary.BigEndian.Uint16(r) != m.Id {
		return 0, fmt.Errorf("reply of %d bytes does not match", len(r))
	}
	if r[2]&0x02 != 0 {
		return 0, fmt.Errorf("TC set over TCP")
	}
	return int(binary.BigEndian.Uint16(r[6:])), nil
}

// vmMem reads VmRSS and VmHWM (kB) of pid.
func vmMem(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("reading agent memory: %v", err)
		return 0, 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

func kbMiB(kb int64) float64 { return float64(kb) / 1024 }
