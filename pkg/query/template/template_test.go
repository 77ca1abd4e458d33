package template

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

var client = netip.MustParseAddr("10.1.2.3")

func show(m *dns.Msg) string {
	var lines []string
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			lines = append(lines, s.p+" "+strings.ReplaceAll(rr.String(), "\t", " "))
		}
	}
	slices.Sort(lines)
	head := dns.RcodeToString[m.Rcode]
	if m.Authoritative {
		head += " aa"
	}
	return strings.Join(append([]string{head}, lines...), "; ")
}

func mustNew(t *testing.T, cfgs ...Config) *Set {
	t.Helper()
	s, err := New(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLookup: CoreDNS 1.15's template semantics (plugin/template, and the
// study's measurements exp8).
func TestLookup(t *testing.T) {
	s := mustNew(t,
		// IPv4-only clusters: AAAA emptied everywhere.
		Config{Class: "IN", Type: "AAAA", Rcode: "NOERROR"},
		Config{Class: "IN", Type: "A", Zones: []string{"apps.example.com"},
			Match:          []string{`^(?P<app>[a-z0-9-]+)\.apps\.example\.com\.$`},
			Answer:         []string{"{{ .Name }} 60 IN A 192.0.2.100", `{{ .Name }} 60 IN TXT "{{ .Group.app }} {{ index .Match 1 }} {{ .Zone }} {{ .Class }} {{ .Type }} {{ .Remote }}"`},
			Additional:     []string{"ns.{{ .Zone }} 60 IN A 192.0.2.53"},
			Authority:      []string{"{{ .Zone }} 60 IN NS ns.{{ .Zone }}"},
			FallthroughSet: true},
		Config{Class: "ANY", Type: "ANY", Zones: []string{"blocked.example"}, Rcode: "NXDOMAIN",
			Authority: []string{"blocked.example. 60 IN SOA ns.blocked.example. h.blocked.example. 1 60 60 60 60"},
			HasEDE:    true, EDECode: 15, EDEText: "Blocked by policy"},
		Config{Class: "IN", Type: "A", Zones: []string{"strict.example"}, Match: []string{"^www\\."}},
		Config{Class: "IN", Type: "A", Zones: []string{"cname.example"}, Answer: []string{"{{ .Name }} 60 IN CNAME www.example.net."}},
	)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string // "": not answered
		fixed bool
	}{
		{"www.example.com.", dns.TypeAAAA, "NOERROR aa", true},
		{"www.example.com.", dns.TypeA, "", false},
		{"web-1.apps.example.com.", dns.TypeA, "NOERROR aa; an web-1.apps.example.com. 60 IN A 192.0.2.100; an web-1.apps.example.com. 60 IN TXT \"web-1 web-1 apps.example.com. IN A 10.1.2.3\"; ex ns.apps.example.com. 60 IN A 192.0.2.53; ns apps.example.com. 60 IN NS ns.apps.example.com.", false},
		// Not matched, fallthrough: the next template (none), the next stage.
		{"deep.x.apps.example.com.", dns.TypeA, "", false},
		{"x.blocked.example.", dns.TypeMX, "NXDOMAIN aa; ns blocked.example. 60 IN SOA ns.blocked.example. h.blocked.example. 1 60 60 60 60", false},
		// A regex miss without fallthrough: SERVFAIL.
		{"ftp.strict.example.", dns.TypeA, "SERVFAIL", true},
		{"www.strict.example.", dns.TypeA, "NOERROR aa", true},
		{"strict.example.", dns.TypeMX, "", false},
	} {
		a, ok := s.Lookup(tc.name, tc.qtype, dns.ClassINET, client, 7)
		got := ""
		if ok {
			got = show(a.Msg)
		}
		if got != tc.want || ok && a.Fixed != tc.fixed {
			t.Errorf("%s %s:\n got %q (fixed %v)\nwant %q (fixed %v)", tc.name, dns.TypeToString[tc.qtype], got, a.Fixed, tc.want, tc.fixed)
		}
	}
	a, _ := s.Lookup("x.blocked.example.", dns.TypeA, dns.ClassINET, client, 7)
	if !a.HasEDE || a.EDECode != 15 || a.EDEText != "Blocked by policy" {
		t.Errorf("EDE %v %d %q", a.HasEDE, a.EDECode, a.EDEText)
	}
	a, _ = s.Lookup("w.cname.example.", dns.TypeA, dns.ClassINET, client, 7)
	if !slices.Equal(a.Targets, []string{"www.example.net."}) {
		t.Errorf("CNAME targets %v", a.Targets)
	}
	if n := testing.AllocsPerRun(100, func() { s.Lookup("www.example.com.", dns.TypeA, dns.ClassINET, client, 7) }); n != 0 {
		t.Errorf("%v allocations for a name no template answers", n)
	}
	// A fixed answer runs the template's regex: 0 allocations, but for the
	// matchers -race's sync.Pool drops (raceEnabled): then at most one per
	// call on average.
	maxFixed := 0.0
	if raceEnabled {
		maxFixed = 1
	}
	if n := testing.AllocsPerRun(100, func() { s.Lookup("www.example.com.", dns.TypeAAAA, dns.ClassINET, client, 7) }); n > maxFixed {
		t.Errorf("%v allocations for a fixed answer, want at most %v", n, maxFixed)
	}
	// Outside every zone: not even a regex is run.
	z := mustNew(t, Config{Class: "IN", Type: "A", Zones: []string{"example.org"}, Match: []string{"x"}})
	if n := testing.AllocsPerRun(100, func() { z.Lookup("www.example.com.", dns.TypeA, dns.ClassINET, client, 7) }); n != 0 {
		t.Errorf("%v allocations outside the zones", n)
	}
}

func TestRenderFailureIsServfail(t *testing.T) {
	s := mustNew(t, Config{Class: "IN", Type: "A", Answer: []string{"{{ .Name }} 60 IN A not-an-address"}})
	a, ok := s.Lookup("x.example.", dns.TypeA, dns.ClassINET, client, 7)
	if !ok || a.Msg.Rcode != dns.RcodeServerFailure {
		t.Fatalf("ok %v %v", ok, a.Msg)
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []Config{
		{Class: "XX", Type: "A"},
		{Class: "IN", Type: "NOPE"},
		{Class: "IN", Type: "A", Match: []string{"("}},
		{Class: "IN", Type: "A", Answer: []string{"{{ .Name "}},
		{Class: "IN", Type: "A", Rcode: "MAYBE"},
		{Class: "IN", Type: "A", Zones: []string{"a..b"}},
	} {
		if _, err := New([]Config{c}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
