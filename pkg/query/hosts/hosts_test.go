package hosts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func mustNew(t *testing.T, cfg Config) *Hosts {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// answer renders a lookup as "rcode aa rr|rr" or "next".
func answer(h *Hosts, name string, qtype uint16) string {
	res, ok := h.Lookup(name, qtype)
	m := res.Msg
	if !ok {
		return "next"
	}
	var rrs []string
	for _, rr := range m.Answer {
		rrs = append(rrs, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	aa := ""
	if m.Authoritative {
		aa = " aa"
	}
	return dns.RcodeToString[m.Rcode] + aa + " " + strings.Join(rrs, "|")
}

// TestSemantics pins the answers CoreDNS 1.15's hosts plugin gives.
func TestSemantics(t *testing.T) {
	base := []string{
		"192.0.2.10 web.example.org www.example.org # comment",
		"2001:db8::10 web.example.org",
		"192.0.2.11 v4only.example.org",
		"fe80::1%eth0 ll.example.org",
		"192.0.2.20 *.apps.example.org",
		"192.0.2.21 exact.apps.example.org",
		"192.0.2.10 Alias.Example.Org",
		"192.0.2.99 other.test",
	}
	cases := []struct {
		name string
		cfg  Config
		q    string
		t    uint16
		want string
	}{
		{"A", Config{}, "web.example.org.", dns.TypeA, "NOERROR aa web.example.org. 3600 IN A 192.0.2.10"},
		{"AAAA", Config{}, "web.example.org.", dns.TypeAAAA, "NOERROR aa web.example.org. 3600 IN AAAA 2001:db8::10"},
		{"only A asked AAAA is NODATA", Config{}, "v4only.example.org.", dns.TypeAAAA, "NOERROR aa "},
		{"other type of a known name is NODATA", Config{}, "web.example.org.", dns.TypeMX, "NOERROR aa "},
		{"unknown name without fallthrough is SERVFAIL", Config{}, "nope.example.org.", dns.TypeA, "SERVFAIL "},
		{"unknown name with fallthrough goes on", Config{Fallthrough: []string{}}, "nope.example.org.", dns.TypeA, "next"},
		{"fallthrough limited to a zone", Config{Fallthrough: []string{"example.net"}}, "nope.example.org.", dns.TypeA, "SERVFAIL "},
		{"fallthrough zone covers", Config{Fallthrough: []string{"Example.ORG."}}, "nope.example.org.", dns.TypeA, "next"},
		{"outside the zones goes on", Config{Zones: []string{"example.org"}}, "nope.example.net.", dns.TypeA, "next"},
		{"names outside the zones are not kept", Config{Zones: []string{"example.org"}}, "other.test.", dns.TypeA, "next"},
		{"zone apex", Config{Zones: []string{"web.example.org"}}, "web.example.org.", dns.TypeA, "NOERROR aa web.example.org. 3600 IN A 192.0.2.10"},
		{"names match case-insensitively", Config{}, "alias.example.org.", dns.TypeA, "NOERROR aa alias.example.org. 3600 IN A 192.0.2.10"},
		{"ipv6 zone dropped", Config{}, "ll.example.org.", dns.TypeAAAA, "NOERROR aa ll.example.org. 3600 IN AAAA fe80::1"},
		{"wildcard one label", Config{}, "foo.apps.example.org.", dns.TypeA, "NOERROR aa foo.apps.example.org. 3600 IN A 192.0.2.20"},
		{"wildcard exact wins", Config{}, "exact.apps.example.org.", dns.TypeA, "NOERROR aa exact.apps.example.org. 3600 IN A 192.0.2.21"},
		{"wildcard not the apex", Config{}, "apps.example.org.", dns.TypeA, "SERVFAIL "},
		{"wildcard not two labels", Config{}, "a.b.apps.example.org.", dns.TypeA, "SERVFAIL "},
		{"wildcard NODATA", Config{}, "foo.apps.example.org.", dns.TypeAAAA, "NOERROR aa "},
		{"PTR v4, names in order", Config{}, "10.2.0.192.in-addr.arpa.", dns.TypePTR,
			"NOERROR aa 10.2.0.192.in-addr.arpa. 3600 IN PTR web.example.org.|10.2.0.192.in-addr.arpa. 3600 IN PTR www.example.org.|10.2.0.192.in-addr.arpa. 3600 IN PTR alias.example.org."},
		{"PTR v6", Config{}, "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", dns.TypePTR,
			"NOERROR aa 0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa. 3600 IN PTR web.example.org."},
		{"PTR outside the zones still answered", Config{Zones: []string{"example.org"}}, "10.2.0.192.in-addr.arpa.", dns.TypePTR,
			"NOERROR aa 10.2.0.192.in-addr.arpa. 3600 IN PTR web.example.org.|10.2.0.192.in-addr.arpa. 3600 IN PTR www.example.org.|10.2.0.192.in-addr.arpa. 3600 IN PTR alias.example.org."},
		{"PTR unknown address goes on without fallthrough", Config{}, "1.2.0.192.in-addr.arpa.", dns.TypePTR, "next"},
		{"PTR partial name goes on", Config{}, "2.0.192.in-addr.arpa.", dns.TypePTR, "next"},
		{"PTR v4-mapped v6 name asks for the v4 address", Config{}, "a.0.2.0.0.0.0.c.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", dns.TypePTR,
			"NOERROR aa a.0.2.0.0.0.0.c.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. 3600 IN PTR web.example.org.|a.0.2.0.0.0.0.c.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. 3600 IN PTR www.example.org.|a.0.2.0.0.0.0.c.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. 3600 IN PTR alias.example.org."},
		{"no PTR for wildcards", Config{}, "20.2.0.192.in-addr.arpa.", dns.TypePTR, "next"},
		{"no-reverse", Config{NoReverse: true}, "10.2.0.192.in-addr.arpa.", dns.TypePTR, "next"},
		{"ttl", Config{TTL: 60 * time.Second}, "v4only.example.org.", dns.TypeA, "NOERROR aa v4only.example.org. 60 IN A 192.0.2.11"},
		{"fallthrough-unsupported", Config{Fallthrough: []string{}, FallthroughUnsupported: true}, "web.example.org.", dns.TypeTXT, "next"},
		{"fallthrough-unsupported keeps NODATA of A/AAAA", Config{Fallthrough: []string{}, FallthroughUnsupported: true}, "v4only.example.org.", dns.TypeAAAA, "NOERROR aa "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Entries = base
			h := mustNew(t, cfg)
			if got := answer(h, c.q, c.t); got != c.want {
				t.Errorf("%s %s:\n got %q\nwant %q", c.q, dns.TypeToString[c.t], got, c.want)
			}
		})
	}
}

// TestDisabled: no entries and no file answers nothing at all (not even
// SERVFAIL for unknown names).
func TestDisabled(t *testing.T) {
	h := mustNew(t, Config{Zones: []string{"example.org"}})
	if got := answer(h, "x.example.org.", dns.TypeA); got != "next" {
		t.Fatalf("disabled hosts answered %q", got)
	}
}

// TestBadInput: every bad value is an error naming it.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "hosts")
	if err := os.WriteFile(bad, []byte("# ok\n192.0.2.1 good.example\n\n192.0.2.300 bad.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Entries: []string{"192.0.2.1 a.example", "1.2.3 b.example"}}, `hosts entry 2 ("1.2.3 b.example"): "1.2.3" is not an IP address`},
		{Config{Entries: []string{"192.0.2.1"}}, `no host name after the address 192.0.2.1`},
		{Config{Entries: []string{"192.0.2.1 a..b"}}, `host name "a..b" is not a domain name`},
		{Config{Entries: []string{"192.0.2.1 a.*.b"}}, `'*' may only be the whole leftmost label`},
		// A lone trailing backslash would escape the final dot (found by
		// FuzzParseLine; the input is in testdata/fuzz/FuzzParseLine).
		{Config{Entries: []string{"0.0.0.0 00\\"}}, `host name "00\\" is not a domain name`},
		{Config{Entries: []string{"0.0.0.0 \\"}}, `host name "\\" is not a domain name`},
		{Config{Entries: []string{"0.0.0.0 000000000\\"}}, `is not a domain name`},
		{Config{Entries: []string{"192.0.2.1 a"}, Zones: []string{"a\\"}}, `hosts zone "a\\" is not a domain name`},
		{Config{Entries: []string{"192.0.2.1 " + strings.Repeat("a", 64) + ".example"}}, `is not a domain name`},
		{Config{File: bad}, "hosts file " + bad + ` line 4: "192.0.2.300" is not an IP address`},
		{Config{File: dir}, "is a directory"},
		{Config{Entries: []string{"192.0.2.1 a"}, TTL: 500 * time.Millisecond}, "hosts ttl 500ms: want whole seconds from 1s to 65535s"},
		{Config{Entries: []string{"192.0.2.1 a"}, TTL: 70000 * time.Second}, "hosts ttl"},
		{Config{Entries: []string{"192.0.2.1 a"}, Zones: []string{"a..b"}}, `hosts zone "a..b" is not a domain name`},
		{Config{Entries: []string{"192.0.2.1 a"}, Fallthrough: []string{"x..y"}}, `hosts fallthrough zone "x..y"`},
		{Config{Entries: []string{"192.0.2.1 a"}, FallthroughUnsupported: true}, "fallthrough-unsupported needs fallthrough"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestFileReread: the file is re-read when it changes (also when replaced
// by rename, as a ConfigMap update does); a broken version keeps the
// previous records; a removed file leaves the configured entries; entries
// and file records merge, the file's first.
func TestFileReread(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hosts")
	write := func(body string) {
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("192.0.2.1 one.example\n")
	h := mustNew(t, Config{File: path, Entries: []string{"192.0.2.9 one.example", "192.0.2.8 conf.example"}, Reload: 10 * time.Millisecond,
		Fallthrough: []string{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if got := answer(h, "one.example.", dns.TypeA); got != "NOERROR aa one.example. 3600 IN A 192.0.2.1|one.example. 3600 IN A 192.0.2.9" {
		t.Fatalf("merged: %q", got)
	}
	dnstest.WaitFor(t, 5*time.Second, "the changed file to be read", func() bool { write("192.0.2.2 two.example\n"); return answer(h, "two.example.", dns.TypeA) != "next" })
	if got := answer(h, "one.example.", dns.TypeA); got != "NOERROR aa one.example. 3600 IN A 192.0.2.9" {
		t.Fatalf("after the change, one.example: %q", got)
	}
	// A broken file keeps the previous records.
	write("192.0.2.2 two.example\nbroken line\n")
	dnstest.WaitFor(t, 5*time.Second, "the broken file to be rejected", func() bool { return h.Stats().Rejected == 1 })
	if got := answer(h, "two.example.", dns.TypeA); got == "next" {
		t.Fatal("a broken file dropped the records")
	}
	// Removed: the configured entries stay.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	dnstest.WaitFor(t, 5*time.Second, "the removed file's records to go", func() bool { return answer(h, "two.example.", dns.TypeA) == "next" })
	if got := answer(h, "conf.example.", dns.TypeA); got == "next" {
		t.Fatal("configured entries gone with the file")
	}
	// Back again.
	write("192.0.2.3 three.example\n")
	dnstest.WaitFor(t, 5*time.Second, "the file written again to be read", func() bool { return answer(h, "three.example.", dns.TypeA) != "next" })
	if h.Stats().Entries != 3 {
		t.Errorf("stats: %+v", h.Stats())
	}
}

// TestMissingFileAtStart: a warning, not an error; read once it appears.
func TestMissingFileAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later")
	h := mustNew(t, Config{File: path, Reload: 10 * time.Millisecond, Fallthrough: []string{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	if got := answer(h, "late.example.", dns.TypeA); got != "next" {
		t.Fatalf("before the file: %q", got)
	}
	if err := os.WriteFile(path, []byte("192.0.2.4 late.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dnstest.WaitFor(t, 5*time.Second, "the file to be read once it appears", func() bool { return answer(h, "late.example.", dns.TypeA) != "next" })
}

// TestUpdate: a live configuration change replaces the records; a bad one
// changes nothing.
func TestUpdate(t *testing.T) {
	h := mustNew(t, Config{Entries: []string{"192.0.2.1 a.example"}})
	if err := h.Update(Config{Entries: []string{"bad"}}); err == nil {
		t.Fatal("bad update accepted")
	}
	if answer(h, "a.example.", dns.TypeA) == "next" {
		t.Fatal("a rejected update changed the records")
	}
	if err := h.Update(Config{Entries: []string{"192.0.2.2 b.example"}, Fallthrough: []string{}}); err != nil {
		t.Fatal(err)
	}
	if answer(h, "a.example.", dns.TypeA) != "next" || answer(h, "b.example.", dns.TypeA) == "next" {
		t.Fatal("update not applied")
	}
	if err := h.Update(Config{}); err != nil || answer(h, "b.example.", dns.TypeA) != "next" {
		t.Fatal("disabling did not clear")
	}
}

// TestLookupAllocs: a miss (the path of every other query) and a repeated
// hit allocate nothing.
func TestLookupAllocs(t *testing.T) {
	h := mustNew(t, Config{Entries: []string{"192.0.2.1 a.example", "192.0.2.5 *.w.example"}, Fallthrough: []string{}})
	for _, c := range []struct {
		name string
		t    uint16
	}{{"a.example.", dns.TypeA}, {"nope.example.", dns.TypeA}, {"x.nope.w2.example.", dns.TypeAAAA},
		{"1.2.0.192.in-addr.arpa.", dns.TypePTR}, {"1.0.0.127.in-addr.arpa.", dns.TypePTR}} {
		h.Lookup(c.name, c.t)
		if n := testing.AllocsPerRun(100, func() { h.Lookup(c.name, c.t) }); n != 0 {
			t.Errorf("%s %d: %.1f allocations", c.name, c.t, n)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"192.0.2.1 a.example b", "::1 localhost # x", "fe80::1%lo *.w.example", "", "#", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, ok, err := parseLine(line)
		if err != nil || !ok {
			return
		}
		tb := newTable(&settings{zones: []string{"."}, ttl: 60}, []entry{e})
		for _, n := range e.names {
			if _, ok := dns.IsDomainName(n); !ok {
				t.Fatalf("accepted name %q", n)
			}
			if m, ok := tb.lookup(strings.TrimPrefix(n, "*."), dns.TypeA); ok && m.Rcode == dns.RcodeSuccess {
				if _, err := m.Pack(); err != nil {
					t.Fatalf("answer for %q does not pack: %v", n, err)
				}
			}
		}
	})
}

// TestPrepare: nothing changes until the returned apply runs.
func TestPrepare(t *testing.T) {
	h := mustNew(t, Config{Entries: []string{"192.0.2.1 a.example"}, Fallthrough: []string{}})
	apply, err := h.Prepare(Config{Entries: []string{"192.0.2.2 b.example"}, Fallthrough: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if answer(h, "a.example.", dns.TypeA) == "next" || answer(h, "b.example.", dns.TypeA) != "next" {
		t.Fatal("Prepare changed the records")
	}
	apply()
	if answer(h, "a.example.", dns.TypeA) != "next" || answer(h, "b.example.", dns.TypeA) == "next" {
		t.Fatal("apply did not change the records")
	}
}
