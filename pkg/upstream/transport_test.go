package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

func TestParseServer(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		name     string // Spec.Name when given by name
		sni      string
	}{
		{in: "192.0.2.1", want: "192.0.2.1:53"},
		{in: "192.0.2.1:5353", want: "192.0.2.1:5353"},
		{in: " dns://192.0.2.1 ", want: "192.0.2.1:53"},
		{in: "[fd00::53]:5353", want: "[fd00::53]:5353"},
		{in: "fd00::53", want: "[fd00::53]:53"},
		{in: "[fd00::53]", want: "[fd00::53]:53"},
		{in: "tcp://192.0.2.1", want: "tcp://192.0.2.1:53"},
		{in: "TLS://192.0.2.1", want: "tls://192.0.2.1:853"},
		{in: "tls://192.0.2.1:8853", want: "tls://192.0.2.1:8853"},
		{in: "tls://192.0.2.1#dns.example.", want: "tls://192.0.2.1:853#dns.example", sni: "dns.example"},
		{in: "tls://[2001:db8::1]:853#One.Example", want: "tls://[2001:db8::1]:853#one.example", sni: "one.example"},
		{in: "dns.kube-system.svc.cluster.local", want: "dns.kube-system.svc.cluster.local:53", name: "dns.kube-system.svc.cluster.local."},
		{in: "DNS.ns.svc.cluster.local.:5353", want: "dns.ns.svc.cluster.local:5353", name: "dns.ns.svc.cluster.local."},
		{in: "tls://dot.ns.svc.cluster.local", want: "tls://dot.ns.svc.cluster.local:853", name: "dot.ns.svc.cluster.local.", sni: "dot.ns.svc.cluster.local"},
		{in: "tls://dot.ns.svc.cluster.local#dot.example", want: "tls://dot.ns.svc.cluster.local:853#dot.example", name: "dot.ns.svc.cluster.local.", sni: "dot.example"},
		{in: "https://192.0.2.1", want: "https://192.0.2.1:443"},
		{in: "HTTPS://192.0.2.1:8443#doh.example", want: "https://192.0.2.1:8443#doh.example", sni: "doh.example"},
		{in: "https://dns.google", want: "https://dns.google:443", name: "dns.google.", sni: "dns.google"},
		{in: "dns.example.net:5353", want: "dns.example.net:5353", name: "dns.example.net."},
	} {
		sp, err := upstream.ParseServer(tc.in)
		if err != nil {
			t.Errorf("ParseServer(%q): %v", tc.in, err)
			continue
		}
		if sp.String() != tc.want || sp.Name != tc.name || sp.ServerName != tc.sni {
			t.Errorf("ParseServer(%q) = %q name %q sni %q; want %q name %q sni %q", tc.in, sp.String(), sp.Name, sp.ServerName, tc.want, tc.name, tc.sni)
		}
	}
	for _, in := range []string{"", "192.0.2.1:0", "192.0.2.1:99999", "https://192.0.2.1/dns-query", "https://dns.google/q", "grpc://192.0.2.1",
		"192.0.2.1#name", "tcp://192.0.2.1#name", "tls://192.0.2.1#", "tls://192.0.2.1#bad name", "/etc/resolv.conf",
		"name:port", "fe80::1%eth0", "[fe80::1%eth0]:53", ".", "a..b", "tls://"} {
		if sp, err := upstream.ParseServer(in); err == nil {
			t.Errorf("ParseServer(%q) = %q, want an error", in, sp)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseServer(%q): error %q does not name the value", in, err)
		}
	}
}

// tlsUpstream starts a DoT server for the test zone with a certificate of
// a fresh CA for dns.test and 127.0.0.1; it returns the server and the
// CA's file.
func tlsUpstream(t *testing.T, h dns.HandlerFunc) (*dnstest.TLSServer, *dnstest.CA, string) {
	t.Helper()
	ca := dnstest.NewCA(t)
	srv := dnstest.StartTLS(t, h, ca.Issue(t, []string{"dns.test"}, netip.MustParseAddr("127.0.0.1")))
	return srv, ca, ca.File(t)
}

func TestDoT(t *testing.T) {
	srv, _, caFile := tlsUpstream(t, dnstest.Zone(60))
	addr := "tls://" + srv.Addr + "#dns.test"
	f := newForwarder(t, upstream.Config{Servers: []string{addr}, CAFile: caFile})
	for i := range 5 {
		r := forward(t, f, fmt.Sprintf("q%d.example.test.", i), dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || answerA(r) != "192.0.2.1" {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	s := server(t, f, "tls://"+srv.Addr+"#dns.test")
	if s.Transport() != "tls" {
		t.Errorf("transport %q, want tls", s.Transport())
	}
	// One after the other: one connection, one handshake.
	if srv.Count() != 5 || srv.Conns() != 1 || srv.Handshakes() != 1 {
		t.Errorf("server saw %d queries on %d connections with %d handshakes; want 5, 1, 1", srv.Count(), srv.Conns(), srv.Handshakes())
	}
	if open, opened := s.StreamConns(); open != 1 || opened != 1 {
		t.Errorf("stream connections: %d open, %d opened; want 1, 1", open, opened)
	}
	// A truncated-size answer comes whole over the stream.
	r := forward(t, f, "big.example.test.", dns.TypeTXT)
	if r.Truncated || len(r.Answer) != 12 {
		t.Errorf("big TXT over TLS: TC %v, %d records; want the whole 12", r.Truncated, len(r.Answer))
	}
}

// TestDoTVerification: the certificate must chain to the configured CA (or
// the system roots) and name the server name, or the IP address when no
// name is given.
func TestDoTVerification(t *testing.T) {
	srv, _, caFile := tlsUpstream(t, dnstest.Zone(60))
	other := dnstest.NewCA(t).File(t)
	for _, tc := range []struct {
		what, addr, ca string
		ok             bool
	}{
		{"right name", "tls://" + srv.Addr + "#dns.test", caFile, true},
		{"IP address SAN, no name", "tls://" + srv.Addr, caFile, true},
		{"wrong name", "tls://" + srv.Addr + "#other.test", caFile, false},
		{"another CA", "tls://" + srv.Addr + "#dns.test", other, false},
		{"system roots", "tls://" + srv.Addr + "#dns.test", "", false},
	} {
		// Generous timeouts: a refused certificate ends the exchange at
		// once, and a handshake on a loaded machine under -race (the
		// system roots loaded first) can take over a second.
		f := newForwarder(t, upstream.Config{Servers: []string{tc.addr}, CAFile: tc.ca, Budget: 20 * time.Second, TryTimeout: 10 * time.Second})
		r, err := f.Exchange(context.Background(), stage.Origin{}, query("a.example.test.", dns.TypeA))
		if tc.ok && (err != nil || answerA(r) != "192.0.2.1") {
			t.Errorf("%s: %v %v", tc.what, r, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "certificate")) {
			t.Errorf("%s: got %v, %v; want a certificate error", tc.what, r, err)
		}
	}
	// Only the certificate that names the address can be used without a
	// name.
	ca := dnstest.NewCA(t)
	named := dnstest.StartTLS(t, dnstest.Zone(60), ca.Issue(t, []string{"dns.test"}))
	f := newForwarder(t, upstream.Config{Servers: []string{"tls://" + named.Addr}, CAFile: ca.File(t), Budget: 20 * time.Second, TryTimeout: 10 * time.Second})
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("a.example.test.", dns.TypeA)); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("certificate without the IP address accepted for tls://IP: %v", err)
	}
}

func TestCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"", "no PEM certificate"},
		{"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "certificate 1"},
		// The bound: never read past 4 MiB.
		{strings.Repeat("#", 4<<20+1), "larger than 4194304 bytes"},
	} {
		p := dir + "/ca.pem"
		writeFile(t, p, tc.content)
		_, err := upstream.New(upstream.Config{Servers: []string{"tls://127.0.0.1"}, CAFile: p, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("CA %.40q: %v; want an error naming the file and %q", tc.content, err, tc.want)
		}
	}
	if _, err := upstream.New(upstream.Config{CAFile: dir + "/missing.pem", Logger: quiet}); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing CA file: %v", err)
	}
}

// TestDoTConcurrent: many queries at once share a bounded number of
// connections, every one answered correctly.
func TestDoTConcurrent(t *testing.T) {
	slow := func(w dns.ResponseWriter, r *dns.Msg) {
		time.Sleep(5 * time.Millisecond)
		dnstest.Zone(60)(w, r)
	}
	srv, _, caFile := tlsUpstream(t, slow)
	f := newForwarder(t, upstream.Config{Servers: []string{"tls://" + srv.Addr + "#dns.test"}, CAFile: caFile})
	// One query first: its connection brings the session ticket that the
	// connections opened later resume.
	forward(t, f, "first.example.test.", dns.TypeA)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d.example.test.", i)
			r, err := f.Exchange(context.Background(), stage.Origin{}, query(name, dns.TypeA))
			if err != nil || r.Question[0].Name != name || answerA(r) != "192.0.2.1" {
				bad.Add(1)
				t.Errorf("%s: %v %v", name, r, err)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		return
	}
	if c := srv.Conns(); c > 8 || c < 2 {
		t.Errorf("%d connections for 60 concurrent queries; want 2 to 8", c)
	}
	// Sessions are resumed across the pool's connections.
	if srv.Resumed() < srv.Handshakes()-1 {
		t.Errorf("%d handshakes, %d resumed; want all but the first", srv.Handshakes(), srv.Resumed())
	}
}

func TestForceTCPAndPreferUDP(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	stub := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{
		Servers:     []string{up.Addr},
		Options:     upstream.GroupOptions{ForceTCP: true},
		Stubs:       map[string][]string{"corp.test": {stub.Addr}},
		StubOptions: map[string]upstream.GroupOptions{},
	})
	for i := range 3 {
		forward(t, f, fmt.Sprintf("f%d.example.test.", i), dns.TypeA)
		forward(t, f, fmt.Sprintf("s%d.corp.test.", i), dns.TypeA)
	}
	if up.Count() != 3 || up.TCPCount() != 3 || up.TCPConns() != 1 {
		t.Errorf("force-tcp group: %d queries, %d over TCP on %d connections; want 3, 3, 1", up.Count(), up.TCPCount(), up.TCPConns())
	}
	if stub.Count() != 3 || stub.TCPCount() != 0 {
		t.Errorf("stub without options: %d queries, %d over TCP; want 3 over UDP", stub.Count(), stub.TCPCount())
	}

	// The forwarder forces TCP; one stub zone prefers UDP, another is
	// TCP by scheme.
	a, b, c := dnstest.Start(t, dnstest.Zone(60)), dnstest.Start(t, dnstest.Zone(60)), dnstest.Start(t, dnstest.Zone(60))
	f = newForwarder(t, upstream.Config{
		Servers:     []string{a.Addr},
		ForceTCP:    true,
		Stubs:       map[string][]string{"udp.test": {b.Addr}, "tcp.test": {"tcp://" + c.Addr}},
		StubOptions: map[string]upstream.GroupOptions{"udp.test": {PreferUDP: true}},
	})
	forward(t, f, "x.example.test.", dns.TypeA)
	forward(t, f, "x.udp.test.", dns.TypeA)
	forward(t, f, "x.tcp.test.", dns.TypeA)
	if a.TCPCount() != 1 || b.TCPCount() != 0 || b.Count() != 1 || c.TCPCount() != 1 {
		t.Errorf("TCP queries: forced %d/1, prefer-udp %d/0 (of %d), tcp:// %d/1", a.TCPCount(), b.TCPCount(), b.Count(), c.TCPCount())
	}
	if got := server(t, f, "tcp://"+c.Addr).Transport(); got != "tcp" {
		t.Errorf("tcp:// server transport %q", got)
	}
	// Truncated replies from a prefer-udp server are retried over TCP.
	r := forward(t, f, "big.udp.test.", dns.TypeTXT)
	if r.Truncated || len(r.Answer) != 12 || b.TCPCount() != 1 {
		t.Errorf("big answer via prefer-udp: TC %v, %d records, %d TCP queries", r.Truncated, len(r.Answer), b.TCPCount())
	}

	if _, err := upstream.New(upstream.Config{Servers: []string{a.Addr}, Options: upstream.GroupOptions{ForceTCP: true, PreferUDP: true}, Logger: quiet}); err == nil {
		t.Error("force-tcp with prefer-udp accepted")
	}
	if _, err := upstream.New(upstream.Config{Servers: []string{a.Addr}, StubOptions: map[string]upstream.GroupOptions{"nope.test": {ForceTCP: true}}, Logger: quiet}); err == nil {
		t.Error("options for a stub zone without servers accepted")
	}
}

// TestStubPolicy: a stub zone's own policy replaces the forwarder's.
func TestStubPolicy(t *testing.T) {
	a, b := dnstest.Start(t, dnstest.Zone(60)), dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{
		Servers:     []string{a.Addr},
		Policy:      upstream.RoundRobin,
		Stubs:       map[string][]string{"corp.test": {a.Addr, b.Addr}},
		StubOptions: map[string]upstream.GroupOptions{"corp.test": {Policy: upstream.Sequential}},
	})
	for i := range 10 {
		forward(t, f, fmt.Sprintf("p%d.corp.test.", i), dns.TypeA)
	}
	if a.Count() != 10 || b.Count() != 0 {
		t.Errorf("sequential stub: %d and %d queries; want 10 and 0", a.Count(), b.Count())
	}
	if _, err := upstream.New(upstream.Config{Servers: []string{a.Addr}, Stubs: map[string][]string{"x.test": {a.Addr}},
		StubOptions: map[string]upstream.GroupOptions{"x.test": {Policy: "fastest"}}, Logger: quiet}); err == nil {
		t.Error("unknown stub policy accepted")
	}
}

// fakeResolver maps names to addresses; a name missing is not known yet.
type fakeResolver struct {
	mu sync.Mutex
	m  map[string][]netip.Addr
}

func (r *fakeResolver) ResolveServer(name string) ([]netip.Addr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.m[name]
	return a, ok
}

func (r *fakeResolver) set(name string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[name] = addrs
}

// TestNamedServers: a stub zone's server given by a name follows the name
// as it resolves, keeping a server's state while its address stays.
func TestNamedServers(t *testing.T) {
	// A second server on another loopback address, same port.
	up1, up2 := dnstest.StartPair(t, dnstest.Zone(60), dnstest.Zone(60))
	port := netip.MustParseAddrPort(up1.Addr).Port()
	res := &fakeResolver{m: map[string][]netip.Addr{}}
	svc := "dns.corp.svc.cluster.local."
	f := newForwarder(t, upstream.Config{
		Servers:       []string{up1.Addr},
		Stubs:         map[string][]string{"corp.test": {fmt.Sprintf("dns.corp.svc.cluster.local:%d", port)}},
		Resolver:      res,
		ProbeInterval: 10 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)

	// Not known yet: the zone has no server.
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("a.corp.test.", dns.TypeA)); !errors.Is(err, upstream.ErrNoUpstream) {
		t.Fatalf("before the name resolves: %v, want ErrNoUpstream", err)
	}
	res.set(svc, netip.MustParseAddr("127.0.0.1"))
	dnstest.WaitFor(t, 10*time.Second, "the name to resolve", func() bool {
		r, err := f.Exchange(context.Background(), stage.Origin{}, query("b.corp.test.", dns.TypeA))
		return err == nil && r.Rcode == dns.RcodeSuccess
	})
	n1 := up1.Count()
	res.set(svc, netip.MustParseAddr("127.0.0.2"))
	dnstest.WaitFor(t, 10*time.Second, "the new address", func() bool {
		_, err := f.Exchange(context.Background(), stage.Origin{}, query(fmt.Sprintf("c%d.corp.test.", time.Now().UnixNano()), dns.TypeA))
		return err == nil && up2.Count() > 0
	})
	before := up1.Count()
	for i := range 5 {
		forward(t, f, fmt.Sprintf("d%d.corp.test.", i), dns.TypeA)
	}
	if up1.Count() != before || n1 == 0 {
		t.Errorf("old address still asked: %d -> %d", before, up1.Count())
	}
	// The default group's server is the same address as the old stub
	// server: it stays.
	forward(t, f, "e.example.test.", dns.TypeA)
	// Gone: no servers again.
	res.set(svc)
	dnstest.WaitFor(t, 10*time.Second, "the zone to lose its server", func() bool {
		_, err := f.Exchange(context.Background(), stage.Origin{}, query(fmt.Sprintf("g%d.corp.test.", time.Now().UnixNano()), dns.TypeA))
		return errors.Is(err, upstream.ErrNoUpstream)
	})

	if _, err := upstream.New(upstream.Config{Servers: []string{"dns.x.svc.cluster.local"}, ClusterZones: []string{"cluster.local"}, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "cluster index") {
		t.Errorf("a name of the cluster zone without the index: %v", err)
	}
	if _, err := upstream.New(upstream.Config{Servers: []string{"dns.example.net"}, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "no resolver") {
		t.Errorf("a name without a resolver: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
