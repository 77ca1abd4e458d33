// Package peers finds the other processes that serve the agent's DNS
// addresses, and tells other nodedns agents from foreign DNS servers.
//
// SO_REUSEPORT lets any process bind 169.254.20.10:53 beside the agent,
// and the kernel then hands each of them a share of the pods' queries: a
// NodeLocal DNSCache left running, a second resolver, anything. During a
// rolling update that is what the old nodedns agent legitimately does
// (docs/architecture.md), so sharing alone says nothing; who shares does.
//
// Check reads the network namespace's sockets (/proc/thread-self/net) for
// UDP sockets and listening TCP sockets bound exactly to one of the
// addresses whose inode is not one of this process's descriptors
// (/proc/self/fd). Sockets on the wildcard address are not counted: the
// kernel prefers the exact address, so they receive none of this traffic.
// When there are such sockets it asks the addresses an identifying
// question from many source ports, so that the kernel's SO_REUSEPORT hash
// spreads the probes over every socket of the group: an ANY query, which
// nodedns answers on its reader, without upstream, with its RFC 8482
// HINFO (TTL 3600; CoreDNS's `any` plugin uses 8482). Any other reply
// (a forwarded answer, SERVFAIL, REFUSED, ...) comes from a foreign
// server. The owning process is named where /proc shows it (the same PID
// namespace); a container's own PID namespace usually hides it, which is
// why the probe, not the process, decides.
//
// Limits: a foreign socket that never answers is reported as unidentified,
// not foreign (a probe lost under load must not turn the agent not-ready);
// with S sockets in a group and N probes, a given socket goes unprobed
// with probability (1-1/S)^N (N grows with S: under 1e-4 up to 16 sockets).
package peers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Kind says what a server found on our addresses is.
type Kind string

const (
	// Agent: another nodedns agent (a rolling update's old or new pod).
	Agent Kind = "nodedns"
	// Foreign: another DNS server answers there.
	Foreign Kind = "foreign"
	// Unidentified: sockets of another process are bound there, but no
	// probe got an answer that was not nodedns's.
	Unidentified Kind = "unidentified"
)

// Server is what holds sockets on one of our addresses besides us.
type Server struct {
	Addr  netip.AddrPort `json:"addr"`
	Proto string         `json:"proto"`
	// Sockets is how many sockets of other processes are bound there.
	Sockets int  `json:"sockets"`
	Kind    Kind `json:"kind"`
	// Programs names their processes ("coredns[1234]") where /proc shows
	// them.
	Programs []string `json:"programs,omitempty"`
	// Evidence is what the probes saw.
	Evidence string `json:"evidence,omitempty"`
}

func (s Server) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s: %d socket(s) of another process", s.Addr, s.Proto, s.Sockets)
	if len(s.Programs) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(s.Programs, ", "))
	}
	fmt.Fprintf(&b, ", %s", s.Kind)
	if s.Evidence != "" {
		fmt.Fprintf(&b, ": %s", s.Evidence)
	}
	return b.String()
}

// Report is the outcome of one Check.
type Report struct {
	Servers []Server  `json:"servers,omitempty"`
	Checked time.Time `json:"checked"`
}

// Foreign returns the servers of kind Foreign.
func (r Report) Foreign() []Server {
	var out []Server
	for _, s := range r.Servers {
		if s.Kind == Foreign {
			out = append(out, s)
		}
	}
	return out
}

// Count returns how many servers are of kind k.
func (r Report) Count(k Kind) int {
	n := 0
	for _, s := range r.Servers {
		if s.Kind == k {
			n++
		}
	}
	return n
}

// Config says what to check. Zero values take the defaults named.
type Config struct {
	// Addrs are our DNS addresses (ip:port); unspecified ones are skipped.
	Addrs []netip.AddrPort
	// ProbeTimeout bounds each probe; default 1s.
	ProbeTimeout time.Duration
	// Probe asks one address one question over proto ("udp", "tcp") from
	// a fresh source port and says whether the reply is nodedns's; nil:
	// the DNS probe described in the package comment. An error means no
	// reply (inconclusive).
	Probe func(ctx context.Context, addr netip.AddrPort, proto string) (nodedns bool, reply string, err error)
	// Proc is the proc file system; default /proc. ProcNet and SelfFD
	// default to its thread-self/net and self/fd.
	Proc, ProcNet, SelfFD string
}

func (c *Config) defaults() {
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = time.Second
	}
	if c.Proc == "" {
		c.Proc = "/proc"
	}
	if c.ProcNet == "" {
		c.ProcNet = filepath.Join(c.Proc, "thread-self/net")
	}
	if c.SelfFD == "" {
		c.SelfFD = filepath.Join(c.Proc, "self/fd")
	}
	if c.Probe == nil {
		c.Probe = func(ctx context.Context, addr netip.AddrPort, proto string) (bool, string, error) {
			return ProbeDNS(ctx, addr, proto, c.ProbeTimeout)
		}
	}
}

// Check looks for other processes serving cfg.Addrs, as the package
// comment says. Call it on a thread in the agent's network namespace. The
// error is for a /proc that cannot be read.
func Check(ctx context.Context, cfg Config) (Report, error) {
	cfg.defaults()
	rep := Report{Checked: time.Now()}
	own, err := OwnInodes(cfg.SelfFD)
	if err != nil {
		return rep, err
	}
	socks, err := ReadSockets(cfg.ProcNet)
	if err != nil {
		return rep, err
	}
	want := map[netip.AddrPort]bool{}
	for _, a := range cfg.Addrs {
		if a.Addr().IsValid() && !a.Addr().IsUnspecified() {
			want[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] = true
		}
	}
	type key struct {
		addr  netip.AddrPort
		proto string
	}
	others := map[key][]uint64{}
	var keys []key
	for _, s := range socks {
		if !want[s.Local] || own[s.Inode] {
			continue
		}
		k := key{s.Local, s.Proto}
		if others[k] == nil {
			keys = append(keys, k)
		}
		others[k] = append(others[k], s.Inode)
	}
	if len(keys) == 0 {
		return rep, nil
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		return strings.Compare(a.proto, b.proto)
	})
	var all []uint64
	for _, k := range keys {
		all = append(all, others[k]...)
	}
	owners := socketOwners(cfg.Proc, all)
	for _, k := range keys {
		srv := Server{Addr: k.addr, Proto: k.proto, Sockets: len(others[k])}
		for _, ino := range others[k] {
			if o, ok := owners[ino]; ok && !slices.Contains(srv.Programs, o) {
				srv.Programs = append(srv.Programs, o)
			}
		}
		srv.Kind, srv.Evidence = probeGroup(ctx, cfg, k.addr, k.proto, len(others[k])+countOwn(socks, own, k.addr, k.proto))
		rep.Servers = append(rep.Servers, srv)
	}
	return rep, nil
}

func countOwn(socks []Socket, own map[uint64]bool, addr netip.AddrPort, proto string) int {
	n := 0
	for _, s := range socks {
		if s.Local == addr && s.Proto == proto && own[s.Inode] {
			n++
		}
	}
	return n
}

// probesFor is how many probes reach each of group sockets with
// probability above 1-1e-4 (for up to 16 sockets), bounded.
func probesFor(group int) int {
	return min(max(24, 10*group), 256)
}

// probeGroup asks addr from many source ports and classifies the group
// of sockets behind it.
func probeGroup(ctx context.Context, cfg Config, addr netip.AddrPort, proto string, group int) (Kind, string) {
	n := probesFor(group)
	if proto == "tcp" {
		n = min(n, 64) // each is a connection: fewer, still spread by the hash
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout+time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		ours     int
		lost     int
		firstBad string
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, 32) // probes in flight
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			isNodedns, reply, err := cfg.Probe(ctx, addr, proto)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				lost++
			case isNodedns:
				ours++
			case firstBad == "":
				firstBad = reply
			}
		}()
	}
	wg.Wait()
	switch {
	case firstBad != "":
		return Foreign, fmt.Sprintf("a probe was answered %s (nodedns answers HINFO RFC8482)", firstBad)
	case lost > 0:
		return Unidentified, fmt.Sprintf("%d of %d probes answered as nodedns does, %d unanswered", ours, n, lost)
	}
	return Agent, fmt.Sprintf("%d of %d probes answered as nodedns does", ours, n)
}

// probeName is under .invalid (RFC 6761): never a real name, should a
// foreign server forward it.
func probeName() string {
	return fmt.Sprintf("%08x.nodedns-probe.invalid.", rand.Uint32())
}

// ProbeDNS asks addr an ANY question over proto from a fresh socket and
// reports whether the reply is the one nodedns gives (RFC 8482: one HINFO
// "RFC8482", TTL 3600, NOERROR); reply describes it. An error means no
// usable reply.
func ProbeDNS(ctx context.Context, addr netip.AddrPort, proto string, timeout time.Duration) (bool, string, error) {
	q := new(dns.Msg)
	q.SetQuestion(probeName(), dns.TypeANY)
	c := &dns.Client{Net: proto, Timeout: timeout, Dialer: &net.Dialer{Timeout: timeout}}
	r, _, err := c.ExchangeContext(ctx, q, addr.String())
	if err != nil {
		return false, "", err
	}
	desc := dns.RcodeToString[r.Rcode]
	if len(r.Answer) > 0 {
		desc += " " + strings.ReplaceAll(r.Answer[0].String(), "\t", " ")
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return false, desc, nil
	}
	h, ok := r.Answer[0].(*dns.HINFO)
	return ok && h.Cpu == "RFC8482" && h.Hdr.Ttl == 3600, desc, nil
}

// maxFDScan bounds the descriptors socketOwners reads.
const maxFDScan = 200000

// socketOwners names the processes holding the given socket inodes, as
// "comm[pid]", where proc shows them (processes of other PID namespaces
// are not there). Best effort: unreadable entries are skipped.
func socketOwners(proc string, inodes []uint64) map[uint64]string {
	want := make(map[uint64]bool, len(inodes))
	for _, i := range inodes {
		want[i] = true
	}
	out := map[uint64]string{}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return out
	}
	self := strconv.Itoa(os.Getpid())
	scanned := 0
	for _, e := range ents {
		pid := e.Name()
		if pid == self || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		fdDir := filepath.Join(proc, pid, "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if scanned++; scanned > maxFDScan || len(out) == len(want) {
				return out
			}
			if ino, ok := socketInode(filepath.Join(fdDir, fd.Name())); ok && want[ino] {
				out[ino] = program(proc, pid)
			}
		}
	}
	return out
}

// program is "comm[pid]", or "pid pid" when comm cannot be read.
func program(proc, pid string) string {
	b, err := os.ReadFile(filepath.Join(proc, pid, "comm"))
	if err != nil {
		return "pid " + pid
	}
	return strings.TrimSpace(string(b)) + "[" + pid + "]"
}
