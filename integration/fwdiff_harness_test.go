//go:build integration

package integration

// The harness of the forward and cache differential tests
// (forward_diff_test.go, cache_diff_test.go): one Corefile, run as it is
// by CoreDNS 1.15 and, through `nodedns migrate`, by the nodedns binary.
// Each side has its own scripted upstreams (the same scripts, the same
// modes switched at the same moments), so that health, caches and counts
// never mix; every question is asked of both at once, and the two are
// compared on the reply (rcode and records), on how many exchanges each
// upstream saw for it, and where a configuration says so on how long the
// reply took. A difference fails the test unless an entry of the
// configuration set's allow-list names it with its reason; an entry never
// used fails the test too.

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// fdZone is where the questions of the tests live unless they name a zone.
const fdZone = "fd.test."

// fdMode is what a scripted upstream does with a query.
type fdMode int32

const (
	// fdAnswer answers A with the upstream's own address (so the reply
	// says who answered) and other types NODATA, except that a name whose
	// first label starts with nx, nodata, sf or ref gets NXDOMAIN,
	// NODATA, SERVFAIL or REFUSED.
	fdAnswer fdMode = iota
	fdServfail
	fdRefused
	fdNoData
	fdNXDomain
	fdSilent // never answers, probes neither
	fdClosed // its sockets closed: ICMP port unreachable, TCP RST
)

var fdModeNames = map[fdMode]string{fdAnswer: "answer", fdServfail: "SERVFAIL", fdRefused: "REFUSED", fdNoData: "NODATA",
	fdNXDomain: "NXDOMAIN", fdSilent: "silent", fdClosed: "closed"}

// fdAsked is one query an upstream got.
type fdAsked struct {
	name  string // lower-case
	qtype uint16
	rd    bool
	at    time.Time
}

// fdUp is one scripted upstream: plain DNS (UDP and TCP on one port) or
// DNS over HTTPS.
type fdUp struct {
	t    *testing.T
	ttl  uint32 // of every record it gives (SOA MINIMUM too)
	srv  *dnstest.Server
	doh  *dnstest.DoHServer
	mode atomic.Int32
	ip   atomic.Pointer[string] // the A record it answers
	// unanswered: a question other than a health probe came while it
	// was silent (the servers then start probing it).
	unanswered atomic.Bool

	mu  sync.Mutex
	log []fdAsked
}

// addr is the upstream as a Corefile names it.
func (u *fdUp) addr() string {
	if u.doh != nil {
		return "https://" + u.doh.Addr
	}
	return u.srv.Addr
}

// setMode switches the upstream's behaviour; closed stops its sockets,
// any other mode after closed opens them again on the same port.
func (u *fdUp) setMode(m fdMode) {
	old := fdMode(u.mode.Swap(int32(m)))
	switch {
	case m == fdClosed && old != fdClosed:
		if u.srv == nil {
			u.t.Fatal("closed: plain DNS upstreams only")
		}
		u.srv.Stop()
	case m != fdClosed && old == fdClosed:
		u.srv.Restart(u.t)
	}
}

func (u *fdUp) handle(w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) != 1 {
		return
	}
	q := r.Question[0]
	u.mu.Lock()
	u.log = append(u.log, fdAsked{name: strings.ToLower(q.Name), qtype: q.Qtype, rd: r.RecursionDesired, at: time.Now()})
	u.mu.Unlock()
	m := u.reply(r)
	if m == nil && !isProbe(strings.ToLower(q.Name), q.Qtype) {
		u.unanswered.Store(true)
	}
	if m != nil {
		_ = w.WriteMsg(m)
	}
}

// reply is the upstream's answer to r in its current mode; nil: none.
func (u *fdUp) reply(r *dns.Msg) *dns.Msg {
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	label, parent, _ := strings.Cut(name, ".")
	if parent == "" {
		parent = "."
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(1232, o.Do())
	}
	soa := func() []dns.RR {
		p := strings.TrimPrefix(parent, ".")
		rr, err := dns.NewRR(fmt.Sprintf("%s %d IN SOA ns.%s hostmaster.%s 1 7200 1800 86400 %d", parent, u.ttl, p, p, u.ttl))
		if err != nil {
			u.t.Errorf("SOA of %s: %v", parent, err)
			return nil
		}
		return []dns.RR{rr}
	}
	mode := fdMode(u.mode.Load())
	switch {
	case mode == fdSilent || mode == fdClosed:
		return nil
	case mode == fdServfail:
		m.Rcode = dns.RcodeServerFailure
	case mode == fdRefused:
		m.Rcode = dns.RcodeRefused
	case q.Qtype == dns.TypeNS && name == ".":
		// The health probe (and a question for the root's NS): NOERROR,
		// no record, in every mode that answers.
	case mode == fdNXDomain || mode == fdAnswer && strings.HasPrefix(label, "nx"):
		m.Rcode = dns.RcodeNameError
		m.Ns = soa()
	case mode == fdNoData || mode == fdAnswer && strings.HasPrefix(label, "nodata"):
		m.Ns = soa()
	case strings.HasPrefix(label, "sf"):
		m.Rcode = dns.RcodeServerFailure
	case strings.HasPrefix(label, "ref"):
		m.Rcode = dns.RcodeRefused
	case q.Qtype == dns.TypeA:
		rr, err := dns.NewRR(fmt.Sprintf("%s %d IN A %s", q.Name, u.ttl, *u.ip.Load()))
		if err != nil {
			u.t.Errorf("A of %s: %v", q.Name, err)
			return nil
		}
		m.Answer = []dns.RR{rr}
	default:
		m.Ns = soa()
	}
	return m
}

// asked is how many queries for name (any case) of qtype arrived.
func (u *fdUp) asked(name string, qtype uint16) int {
	name = strings.ToLower(name)
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, a := range u.log {
		if a.name == name && a.qtype == qtype {
			n++
		}
	}
	return n
}

// isProbe: a health probe is an NS question outside the test zone
// (name lower-case).
func isProbe(name string, qtype uint16) bool {
	return qtype == dns.TypeNS && !strings.HasSuffix(name, fdZone)
}

// probes are the health probes that arrived: NS questions other than a
// test's own.
func (u *fdUp) probes() []fdAsked {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []fdAsked
	for _, a := range u.log {
		if isProbe(a.name, a.qtype) {
			out = append(out, a)
		}
	}
	return out
}

// fdUpSpec says how to start one upstream of a configuration.
type fdUpSpec struct {
	doh bool // DNS over HTTPS (with the run's test CA), else plain DNS
	// pair: this upstream and the next share one port, on 127.0.0.1 and
	// 127.0.0.2 (the addresses of a name, fdHostName).
	pair bool
}

// fdBlock is one server block: its zones and its plugin lines (bind,
// and ready in the first, are added). In the lines {U0}..{U9} stand for
// the upstreams' addresses, {HP} for the port of the first pair,
// {R} for the host-name resolver, {CA} for the test CA's file, {KC}
// for the test API server's kubeconfig.
type fdBlock struct {
	zone  string
	lines string
}

// fdConfig is one configuration of a differential test.
type fdConfig struct {
	name   string
	blocks []fdBlock
	ups    []fdUpSpec
	ttl    uint32 // of the upstreams' records; 0: 300
	run    func(r *fdRun)
}

// fdHostName resolves to both addresses of the first pair.
const fdHostName = "ns.upstreams.fd.test"

// fdSide is one of the two servers and its upstreams.
type fdSide struct {
	name string // CoreDNS or nodedns
	addr string
	ups  []*fdUp
	stop func()
}

// fdResult is what one side made of one question.
type fdResult struct {
	reply   *dns.Msg // nil: no reply
	err     error    // other than a timeout
	elapsed time.Duration
	counts  []int // exchanges per upstream for the question
}

// fdAsk is one question asked of both sides.
type fdAsk struct {
	name  string
	qtype uint16
	step  int
	// total compares the sum of the upstreams' counts (a random pick).
	total bool
	// within bounds how long both replies may take (0: unbounded).
	atLeast, within time.Duration
	c, n            fdResult
}

func (a *fdAsk) String() string {
	return fmt.Sprintf("step %d: %s %s", a.step, a.name, dns.TypeToString[a.qtype])
}

// fdRun is one configuration being run; its methods are the script.
type fdRun struct {
	t      *testing.T
	cfg    fdConfig
	c, n   *fdSide
	asks   []*fdAsk
	names  map[string]bool
	render func(m *dns.Msg) string // default fdRender
	// compare, when set, compares two rendered replies (default: equal).
	compare func(c, n string) bool
	quiet   bool // no log line per question
	// oneAtATime asks CoreDNS, then nodedns, instead of both at once:
	// timings without the other server's work on the same cores.
	oneAtATime bool
}

// mode sets upstream i of both sides to m.
func (r *fdRun) mode(i int, m fdMode) {
	if !r.quiet {
		r.t.Logf("U%d: %s", i, fdModeNames[m])
	}
	r.c.ups[i].setMode(m)
	r.n.ups[i].setMode(m)
}

// fqdn is label under fdZone, or label itself when it ends with a dot.
func fqdn(label string) string {
	if strings.HasSuffix(label, ".") {
		return label
	}
	return label + "." + fdZone
}

// ask asks name (fqdn) of type A of both sides at once; a name is asked
// once per configuration unless again is used.
func (r *fdRun) ask(label string) *fdAsk { return r.askType(label, dns.TypeA) }

func (r *fdRun) askType(label string, qtype uint16) *fdAsk {
	r.t.Helper()
	name := fqdn(label)
	k := name + "/" + dns.TypeToString[qtype]
	if r.names[k] {
		r.t.Fatalf("%s asked twice: use again", k)
	}
	r.names[k] = true
	return r.do(name, qtype)
}

// again asks a question asked before.
func (r *fdRun) again(label string) *fdAsk { return r.do(fqdn(label), dns.TypeA) }

// againBG asks a question asked before whose answer may start work in
// the background (a prefetch, a refresh of a stale answer): the
// exchanges are counted once the upstreams have been quiet a moment.
func (r *fdRun) againBG(label string) *fdAsk {
	a := r.do(fqdn(label), dns.TypeA)
	r.settle(a)
	return a
}

// settle counts a's exchanges again once neither side's upstreams have
// been asked anything new for 300 ms (at most 5 s).
func (r *fdRun) settle(a *fdAsk) {
	snap := func() string { return fmt.Sprint(r.c.counts(a.name, a.qtype), r.n.counts(a.name, a.qtype)) }
	last, since := snap(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Since(since) < 300*time.Millisecond && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if s := snap(); s != last {
			last, since = s, time.Now()
		}
	}
	a.c.counts, a.n.counts = r.c.counts(a.name, a.qtype), r.n.counts(a.name, a.qtype)
}

// askWithin asks and bounds how long both replies may take.
func (r *fdRun) askWithin(label string, atLeast, within time.Duration) *fdAsk {
	r.t.Helper()
	a := r.ask(label)
	a.atLeast, a.within = atLeast, within
	return a
}

func (r *fdRun) do(name string, qtype uint16) *fdAsk {
	a := &fdAsk{name: name, qtype: qtype, step: len(r.asks) + 1}
	var wg sync.WaitGroup
	for _, s := range []struct {
		side *fdSide
		res  *fdResult
	}{{r.c, &a.c}, {r.n, &a.n}} {
		if r.oneAtATime {
			s.res.reply, s.res.elapsed, s.res.err = fdExchange(s.side.addr, name, qtype)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.res.reply, s.res.elapsed, s.res.err = fdExchange(s.side.addr, name, qtype)
		}()
	}
	wg.Wait()
	// Every exchange made for the question has arrived by now: the
	// servers ask their upstreams one after another and answer last.
	// Later ones (a refresh in the background) are in the totals
	// compared when the configuration ends.
	a.c.counts, a.n.counts = r.c.counts(name, qtype), r.n.counts(name, qtype)
	r.asks = append(r.asks, a)
	return a
}

func (s *fdSide) counts(name string, qtype uint16) []int {
	out := make([]int, len(s.ups))
	for i, u := range s.ups {
		out[i] = u.asked(name, qtype)
	}
	return out
}

// sleep lets real time pass (TTLs, expiry, probe intervals).
func (r *fdRun) sleep(d time.Duration) { time.Sleep(d) }

// waitProbes waits until upstream i of each side has seen at least n
// health probes.
func (r *fdRun) waitProbes(i, n int) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range []*fdSide{r.c, r.n} {
		for len(s.ups[i].probes()) < n {
			if time.Now().After(deadline) {
				r.t.Fatalf("%s: upstream %d saw %d health probes, want %d", s.name, i, len(s.ups[i].probes()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// waitNextProbe waits until upstream i of each side has seen one more
// health probe than now, and then for the server to have read its
// reply (a probe that is answered ends the probing and clears the
// server's failures).
func (r *fdRun) waitNextProbe(i int) {
	r.t.Helper()
	nc, nn := len(r.c.ups[i].probes()), len(r.n.ups[i].probes())
	deadline := time.Now().Add(20 * time.Second)
	for len(r.c.ups[i].probes()) <= nc || len(r.n.ups[i].probes()) <= nn {
		if time.Now().After(deadline) {
			r.t.Fatalf("upstream %d: no further health probe: CoreDNS's got %d then %d, nodedns's %d then %d", i,
				nc, len(r.c.ups[i].probes()), nn, len(r.n.ups[i].probes()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}

// setIP changes the A record upstream i of both sides answers.
func (r *fdRun) setIP(i int, ip string) {
	r.c.ups[i].ip.Store(&ip)
	r.n.ups[i].ip.Store(&ip)
}

// expect checks CoreDNS's reply to a (nodedns's is compared with it):
// its rcode and the exchanges each upstream saw. It says that the
// script exercises what its configuration is about, so that agreeing
// is not agreeing on nothing.
func (r *fdRun) expect(a *fdAsk, rcode int, counts ...int) {
	r.t.Helper()
	got := -1
	if a.c.reply != nil {
		got = a.c.reply.Rcode
	}
	if got != rcode || counts != nil && !slices.Equal(a.c.counts, counts) {
		r.t.Errorf("%s: CoreDNS answered %s with exchanges %v; the script expects %s with %v", a, dns.RcodeToString[got], a.c.counts,
			dns.RcodeToString[rcode], counts)
	}
}

// expectTTL checks the TTL of CoreDNS's first answer record to a, to
// within a second.
func (r *fdRun) expectTTL(a *fdAsk, ttl uint32) {
	r.t.Helper()
	if a.c.reply == nil || len(a.c.reply.Answer) == 0 {
		r.t.Errorf("%s: CoreDNS gave no answer record; the script expects TTL %d", a, ttl)
		return
	}
	if got := a.c.reply.Answer[0].Header().Ttl; got+1 < ttl || got > ttl+1 {
		r.t.Errorf("%s: CoreDNS's TTL %d; the script expects %d", a, got, ttl)
	}
}

// same compares what f says of each side now (connections, probes).
func (r *fdRun) same(what string, f func(s *fdSide) string) string {
	r.t.Helper()
	c, n := f(r.c), f(r.n)
	r.t.Logf("%s: CoreDNS %s; nodedns %s", what, c, n)
	if c != n {
		r.t.Errorf("%s differ: CoreDNS %s, nodedns %s", what, c, n)
	}
	return c
}

// fdExchange asks addr once over UDP with EDNS; a timeout (8 s, past
// both servers' 5 s budget) is no reply.
func fdExchange(addr, name string, qtype uint16) (*dns.Msg, time.Duration, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	cl := &dns.Client{Net: "udp", Timeout: 8 * time.Second, UDPSize: 1232}
	start := time.Now()
	resp, _, err := cl.Exchange(m, addr)
	el := time.Since(start)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, el, nil
		}
		return nil, el, err
	}
	return resp, el, nil
}

// fdRender renders a reply as zoNormalize does (rcode, AA, records as
// sorted lines, TTLs 0); no reply is "no reply".
func fdRender(m *dns.Msg) string {
	if m == nil {
		return zoNoReply
	}
	return zoNormalize(m)
}

// fdAllow is a difference nodedns makes on purpose, named with its reason.
type fdAllow struct {
	configs []string // nil: every configuration
	// match says whether a question's difference is this one; c and n
	// are the rendered replies and the counts of each side.
	match func(a *fdAsk, c, n string) bool
	why   string
}

// fdCoreDNSBlock renders one server block for CoreDNS and migrate.
func fdCorefile(cfg fdConfig, port, readyPort int, repl *strings.Replacer) string {
	var b strings.Builder
	for i, blk := range cfg.blocks {
		fmt.Fprintf(&b, "%s:%d {\n  bind 127.0.0.1\n", blk.zone, port)
		if i == 0 {
			fmt.Fprintf(&b, "  ready 127.0.0.1:%d\n", readyPort)
		}
		for _, l := range strings.Split(strings.TrimSpace(repl.Replace(blk.lines)), "\n") {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// fdEnv is what every configuration of a test shares.
type fdEnv struct {
	coredns string
	ca      *dnstest.CA
	caFile  string
	// kubeconfig is the test API server's ({KC}), for Corefiles with
	// the kubernetes plugin.
	kubeconfig string
}

func newFDEnv(t *testing.T) *fdEnv {
	ca := dnstest.NewCA(t)
	return &fdEnv{coredns: coreDNSBin(t), ca: ca, caFile: ca.File(t)}
}

// newUp makes upstream number i (its A record is 192.0.2.<i+1>).
func newUp(t *testing.T, i int, ttl uint32) *fdUp {
	u := &fdUp{t: t, ttl: ttl}
	ip := fmt.Sprintf("192.0.2.%d", i+1)
	u.ip.Store(&ip)
	return u
}

// startUps starts one side's upstreams for cfg, and the resolver of
// fdHostName when a pair is among them. It returns the replacer of the
// Corefile's placeholders.
func (e *fdEnv) startUps(t *testing.T, cfg fdConfig) ([]*fdUp, *strings.Replacer) {
	ttl := cfg.ttl
	if ttl == 0 {
		ttl = 300
	}
	var ups []*fdUp
	var pairs [][2]*fdUp
	for i := 0; i < len(cfg.ups); i++ {
		sp := cfg.ups[i]
		u := newUp(t, len(ups), ttl)
		switch {
		case sp.doh:
			u.doh = dnstest.StartDoH(t, u.handle, e.ca.Issue(t, []string{"doh.fd.test"}))
			ups = append(ups, u)
		case sp.pair:
			if i+1 >= len(cfg.ups) {
				t.Fatalf("%s: a pair wants two upstreams", cfg.name)
			}
			v := newUp(t, len(ups)+1, ttl)
			u.srv, v.srv = dnstest.StartPair(t, u.handle, v.handle)
			ups = append(ups, u, v)
			pairs = append(pairs, [2]*fdUp{u, v})
			i++
		default:
			// A port below the ephemeral range: a server that is
			// closed and opened again gets it back.
			u.srv = dnstest.StartStable(t, u.handle)
			ups = append(ups, u)
		}
	}
	var kv []string
	for i, u := range ups {
		kv = append(kv, fmt.Sprintf("{U%d}", i), u.addr())
	}
	kv = append(kv, "{CA}", e.caFile, "{KC}", e.kubeconfig)
	if len(pairs) > 0 {
		_, port, _ := net.SplitHostPort(pairs[0][0].srv.Addr)
		res := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			q := r.Question[0]
			if strings.EqualFold(q.Name, fdHostName+".") && q.Qtype == dns.TypeA {
				m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 60 IN A 127.0.0.1"), dnstest.MustRR(q.Name + " 60 IN A 127.0.0.2")}
			}
			_ = w.WriteMsg(m)
		})
		kv = append(kv, "{HP}", port, "{R}", res.Addr)
	}
	return ups, strings.NewReplacer(kv...)
}

// startCoreDNSCorefile runs CoreDNS on the Corefile corefile(dnsPort,
// readyPort) makes, once ready, and returns its address and process. A
// CoreDNS that lost its ports to another process is started again on
// others (three times at the most).
func startCoreDNSCorefile(t *testing.T, bin string, corefile func(dnsPort, readyPort int) string) (string, *cpProc) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		dnsPort, readyPort := agentPorts(t)
		p, err := startCoreDNSFile(t, bin, corefile(dnsPort, readyPort), readyPort)
		if err == nil {
			return "127.0.0.1:" + strconv.Itoa(dnsPort), p
		}
		if attempt >= 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

// startCoreDNSFile runs CoreDNS on corefile (which binds port and serves
// ready on readyPort) and waits for ready.
func startCoreDNSFile(t *testing.T, bin, corefile string, readyPort int) (*cpProc, error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "coredns.log")
	p, err := startCPProc("coredns", logPath, bin, "-conf", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("CoreDNS's Corefile:\n%s\nCoreDNS log (last 30 lines):\n%s", corefile, tailFile(logPath, 30))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://127.0.0.1:"+strconv.Itoa(readyPort)+"/ready", "", 60*time.Second, func([]byte) bool { return true }); err != nil {
		p.stop(10 * time.Second)
		return nil, fmt.Errorf("CoreDNS not ready: %w\n%s", err, tailFile(logPath, 30))
	}
	return p, nil
}

// migrateCorefile runs `nodedns migrate` on corefile; anything not
// carried (exit 3) fails the test: the point is that it is carried.
// It returns the configuration and what migrate printed on stderr.
func migrateCorefile(t *testing.T, corefile string) (map[string]any, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	return migrateCorefileArgs(t, path, "--cluster-domain", "cluster.local")
}

// migrateCorefileArgs runs `nodedns migrate --corefile path args...`, as
// migrateCorefile.
func migrateCorefileArgs(t *testing.T, path string, args ...string) (map[string]any, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(nodednsBin, append([]string{"migrate", "--corefile", path}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		corefile, _ := os.ReadFile(path)
		t.Fatalf("nodedns migrate: %v\n%s\nCorefile:\n%s\noutput:\n%s", err, stderr.String(), corefile, stdout.String())
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(stdout.Bytes(), &cfg); err != nil {
		t.Fatalf("nodedns migrate's output: %v\n%s", err, stdout.String())
	}
	return cfg, stdout.String()
}

// startMigrated runs the nodedns binary with the configuration migrate
// made, listening on loopback instead of intercepting (the test's only
// changes: listen, admin, no local-ip, no lame duck).
func startMigrated(t *testing.T, cfg map[string]any, migrated string) (addr string, p *cpProc) {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	addr = "127.0.0.1:" + strconv.Itoa(dnsPort)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	cfg["listen"] = []string{addr}
	cfg["admin"] = admin
	cfg["lameduck"] = "0s"
	delete(cfg, "local-ip")
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "nodedns.log")
	p, err = startCPProc("nodedns", logPath, nodednsBin, "serve", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("migrate's configuration:\n%s\nnodedns log (last 40 lines):\n%s", migrated, tailFile(logPath, 40))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("nodedns not ready: %v\n%s", err, tailFile(logPath, 40))
	}
	return addr, p
}

// startSides starts both servers of cfg with their upstreams.
func (e *fdEnv) startSides(t *testing.T, cfg fdConfig) (c, n *fdSide) {
	t.Helper()
	cups, crepl := e.startUps(t, cfg)
	nups, nrepl := e.startUps(t, cfg)
	c = &fdSide{name: "CoreDNS", ups: cups}
	var cp *cpProc
	c.addr, cp = startCoreDNSCorefile(t, e.coredns, func(port, ready int) string { return fdCorefile(cfg, port, ready, crepl) })
	c.stop = func() { cp.stop(10 * time.Second) }
	// The port in nodedns's Corefile does not matter: its listen is set.
	ncfg, migrated := migrateCorefile(t, fdCorefile(cfg, 53, 8181, nrepl))
	n = &fdSide{name: "nodedns", ups: nups}
	var p *cpProc
	n.addr, p = startMigrated(t, ncfg, migrated)
	n.stop = func() { p.stop(10 * time.Second) }
	return c, n
}

// runFD runs each configuration and compares; allowed lists the
// differences nodedns makes on purpose.
func runFD(t *testing.T, e *fdEnv, cfgs []fdConfig, allowed []fdAllow) {
	seen := map[int]bool{}
	var ran []string
	total := 0
	for _, cfg := range cfgs {
		t.Run(cfg.name, func(t *testing.T) {
			ran = append(ran, cfg.name)
			c, n := e.startSides(t, cfg)
			r := &fdRun{t: t, cfg: cfg, c: c, n: n, names: map[string]bool{}, render: fdRender}
			cfg.run(r)
			// A probe started by the last question may reach one side's
			// upstream a moment before the other's, and both may be yet
			// to come: up to 2 s for the probes' questions to agree and for each
			// upstream that left a question unanswered to have its first
			// probe on both sides (with max_fails 0 none comes: the 2 s
			// pass and both say none). Checking only for agreement let a
			// probe land between the wait and the comparison (warm run 2
			// of cb0c9e7, no_failover).
			for deadline := time.Now().Add(2 * time.Second); !probesSettled(c, n) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			r.same("health probes per upstream (question, RD)", probeKinds)
			// Totals once both have stopped: exchanges made after a
			// reply (refreshes in the background) are in them.
			c.stop()
			n.stop()
			total += len(r.asks)
			fdCompare(t, r, allowed, seen)
		})
	}
	if t.Failed() {
		return
	}
	for i, a := range allowed {
		applies := a.configs == nil || slices.ContainsFunc(a.configs, func(c string) bool { return slices.Contains(ran, c) })
		if applies && !seen[i] {
			t.Errorf("allow-list entry %d is never used: %s", i, a.why)
		}
	}
	t.Logf("FIGURE %s: %d questions in %d configurations", t.Name(), total, len(cfgs))
}

// fdCompare compares every question of a run.
func fdCompare(t *testing.T, r *fdRun, allowed []fdAllow, seen map[int]bool) {
	diffs, allowedN := 0, 0
	// Totals per question name at the end.
	type key struct {
		name  string
		qtype uint16
	}
	// The totals are compared at a question's last ask, whose own
	// difference (an allowed one) they then share.
	last := map[key]int{}
	for i, a := range r.asks {
		last[key{a.name, a.qtype}] = i
	}
	for i, a := range r.asks {
		for _, s := range []struct {
			side *fdSide
			res  fdResult
		}{{r.c, a.c}, {r.n, a.n}} {
			if s.res.err != nil {
				t.Errorf("%s: %s: %v", a, s.side.name, s.res.err)
			}
		}
		cr, nr := r.render(a.c.reply), r.render(a.n.reply)
		cc, nc := fmt.Sprint(a.c.counts), fmt.Sprint(a.n.counts)
		if a.total {
			cc, nc = strconv.Itoa(sum(a.c.counts)), strconv.Itoa(sum(a.n.counts))
		}
		same := cr == nr
		if r.compare != nil {
			same = r.compare(cr, nr)
		}
		var why []string
		if !same {
			why = append(why, fmt.Sprintf("replies differ:\n  CoreDNS: %s\n  nodedns: %s", indent(cr), indent(nr)))
		}
		if cc != nc {
			why = append(why, fmt.Sprintf("exchanges per upstream differ: CoreDNS %s, nodedns %s", cc, nc))
		}
		if a.within > 0 {
			for _, s := range []struct {
				name string
				d    time.Duration
			}{{"CoreDNS", a.c.elapsed}, {"nodedns", a.n.elapsed}} {
				if s.d < a.atLeast || s.d > a.within {
					why = append(why, fmt.Sprintf("%s answered in %s, want %s to %s", s.name, s.d.Round(time.Millisecond), a.atLeast, a.within))
				}
			}
		}
		if last[key{a.name, a.qtype}] == i && !a.total {
			ct, nt := fmt.Sprint(r.c.counts(a.name, a.qtype)), fmt.Sprint(r.n.counts(a.name, a.qtype))
			if ct != nt {
				why = append(why, fmt.Sprintf("exchanges per upstream by the end differ: CoreDNS %s, nodedns %s", ct, nt))
			}
		}
		if !r.quiet {
			t.Logf("%s: CoreDNS %s in %s, asked %s; nodedns %s in %s, asked %s", a, firstLine(cr), a.c.elapsed.Round(time.Millisecond), cc,
				firstLine(nr), a.n.elapsed.Round(time.Millisecond), nc)
		}
		if len(why) == 0 {
			continue
		}
		if i := slices.IndexFunc(allowed, func(x fdAllow) bool {
			return (x.configs == nil || slices.Contains(x.configs, r.cfg.name)) && x.match(a, cr, nr)
		}); i >= 0 {
			allowedN++
			if !seen[i] {
				t.Logf("allowed difference %d, e.g. %s: %s\n%s", i, a, allowed[i].why, strings.Join(why, "\n"))
			}
			seen[i] = true
			continue
		}
		diffs++
		t.Errorf("%s: %s", a, strings.Join(why, "\n"))
	}
	t.Logf("%s: %d questions, %d differences, %d allowed", r.cfg.name, len(r.asks), diffs, allowedN)
}

// probeKinds lists, per upstream, the distinct questions of the health
// probes it got (their number depends on how long a server stayed
// down, which the configurations compare by questions instead).
// probesSettled: both sides' probes agree, and every upstream that left
// a question unanswered has been probed on both.
func probesSettled(c, n *fdSide) bool {
	if probeKinds(c) != probeKinds(n) {
		return false
	}
	for _, s := range []*fdSide{c, n} {
		for _, u := range s.ups {
			if u.unanswered.Load() && len(u.probes()) == 0 {
				return false
			}
		}
	}
	return true
}

func probeKinds(s *fdSide) string {
	var out []string
	for i, u := range s.ups {
		kinds := map[string]bool{}
		for _, p := range u.probes() {
			kinds[fmt.Sprintf("%s rd=%v", p.name, p.rd)] = true
		}
		ks := slices.Sorted(maps.Keys(kinds))
		if len(ks) == 0 {
			ks = []string{"none"}
		}
		out = append(out, fmt.Sprintf("U%d: %s", i, strings.Join(ks, ", ")))
	}
	return strings.Join(out, "; ")
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n           ") }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// percentile is the p-th percentile (0..100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
