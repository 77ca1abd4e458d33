package zonefile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const testZone = `$ORIGIN example.org.
$TTL 300
@        IN SOA ns1.example.org. hostmaster.example.org. 2026120201 7200 1800 86400 60
@        IN NS  ns1.example.org.
@        IN NS  ns2.example.org.
@        IN MX  10 mail.example.org.
ns1      IN A   192.0.2.53
ns2      IN A   192.0.2.54
mail     IN A   192.0.2.25
www      IN A   192.0.2.80
www      IN AAAA 2001:db8::80
alias    IN CNAME www
chain    IN CNAME alias
outside  IN CNAME www.example.net.
dangling IN CNAME nothere
loop     IN CNAME loop
*.wild   IN A   192.0.2.99
*.wild   IN TXT "wild"
*.cw     IN CNAME www
sub      IN NS  ns.sub
ns.sub   IN A   192.0.2.77
a.b.ent  IN A   192.0.2.1
_http._tcp IN SRV 0 0 80 www
`

// writeZone writes text to a zone file in a test directory.
func writeZone(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "db.example.org")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func newFiles(t *testing.T, zones ...Zone) *Files {
	t.Helper()
	f, err := New(Config{Zones: zones})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// render prints m's rcode, AA and sections, each sorted.
func render(m *dns.Msg) string {
	sec := func(rrs []dns.RR) string {
		var l []string
		for _, rr := range rrs {
			l = append(l, strings.ReplaceAll(rr.String(), "\t", " "))
		}
		sort.Strings(l)
		return strings.Join(l, "; ")
	}
	return fmt.Sprintf("%s aa=%v | %s | %s | %s", dns.RcodeToString[m.Rcode], m.Authoritative, sec(m.Answer), sec(m.Ns), sec(m.Extra))
}

const (
	soa    = "example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 2026120201 7200 1800 86400 60"
	apexNS = "example.org. 300 IN NS ns1.example.org.; example.org. 300 IN NS ns2.example.org."
)

// TestLookup pins the answers CoreDNS 1.15's file gives for the test zone
// (the same questions are asked of CoreDNS itself in the integration
// suite's TestZoneFileDifferential).
func TestLookup(t *testing.T) {
	f := newFiles(t, Zone{File: writeZone(t, testZone), Origins: []string{"example.org."}})
	for _, c := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"example.org.", dns.TypeSOA, "NOERROR aa=true | " + soa + " | " + apexNS + " | "},
		{"example.org.", dns.TypeNS, "NOERROR aa=true | " + apexNS + " |  | ns1.example.org. 300 IN A 192.0.2.53; ns2.example.org. 300 IN A 192.0.2.54"},
		{"example.org.", dns.TypeMX, "NOERROR aa=true | example.org. 300 IN MX 10 mail.example.org. | " + apexNS + " | mail.example.org. 300 IN A 192.0.2.25"},
		{"example.org.", dns.TypeA, "NOERROR aa=true |  | " + soa + " | "},
		{"www.example.org.", dns.TypeA, "NOERROR aa=true | www.example.org. 300 IN A 192.0.2.80 | " + apexNS + " | "},
		{"www.example.org.", dns.TypeTXT, "NOERROR aa=true |  | " + soa + " | "},
		{"nope.example.org.", dns.TypeA, "NXDOMAIN aa=true |  | " + soa + " | "},
		{"alias.example.org.", dns.TypeA, "NOERROR aa=true | alias.example.org. 300 IN CNAME www.example.org.; www.example.org. 300 IN A 192.0.2.80 | " + apexNS + " | "},
		{"alias.example.org.", dns.TypeMX, "NOERROR aa=true | alias.example.org. 300 IN CNAME www.example.org. | " + apexNS + " | "},
		{"alias.example.org.", dns.TypeCNAME, "NOERROR aa=true | alias.example.org. 300 IN CNAME www.example.org. | " + apexNS + " | "},
		{"chain.example.org.", dns.TypeAAAA, "NOERROR aa=true | alias.example.org. 300 IN CNAME www.example.org.; chain.example.org. 300 IN CNAME alias.example.org.; www.example.org. 300 IN AAAA 2001:db8::80 | " + apexNS + " | "},
		{"x.wild.example.org.", dns.TypeA, "NOERROR aa=true | x.wild.example.org. 300 IN A 192.0.2.99 | " + apexNS + " | "},
		{"y.x.wild.example.org.", dns.TypeTXT, "NOERROR aa=true | y.x.wild.example.org. 300 IN TXT \"wild\" | " + apexNS + " | "},
		{"x.wild.example.org.", dns.TypeMX, "NOERROR aa=true |  | " + soa + " | "},
		{"wild.example.org.", dns.TypeA, "NOERROR aa=true |  | " + soa + " | "},
		{"q.cw.example.org.", dns.TypeA, "NOERROR aa=true | q.cw.example.org. 300 IN CNAME www.example.org.; www.example.org. 300 IN A 192.0.2.80 | " + apexNS + " | "},
		{"sub.example.org.", dns.TypeA, "NOERROR aa=false |  | sub.example.org. 300 IN NS ns.sub.example.org. | ns.sub.example.org. 300 IN A 192.0.2.77"},
		{"host.sub.example.org.", dns.TypeA, "NOERROR aa=false |  | sub.example.org. 300 IN NS ns.sub.example.org. | ns.sub.example.org. 300 IN A 192.0.2.77"},
		{"b.ent.example.org.", dns.TypeA, "NOERROR aa=true |  | " + soa + " | "},
		{"ent.example.org.", dns.TypeA, "NOERROR aa=true |  | " + soa + " | "},
		{"x.ent.example.org.", dns.TypeA, "NXDOMAIN aa=true |  | " + soa + " | "},
		{"_http._tcp.example.org.", dns.TypeSRV, "NOERROR aa=true | _http._tcp.example.org. 300 IN SRV 0 0 80 www.example.org. | " + apexNS + " | www.example.org. 300 IN A 192.0.2.80; www.example.org. 300 IN AAAA 2001:db8::80"},
	} {
		a, ok := f.Lookup(c.name, c.qtype)
		if !ok || a.Msg == nil {
			t.Errorf("%s %s: not answered (%+v)", c.name, dns.TypeToString[c.qtype], a)
			continue
		}
		if got := render(a.Msg); got != c.want {
			t.Errorf("%s %s:\n got %s\nwant %s", c.name, dns.TypeToString[c.qtype], got, c.want)
		}
	}
	if _, ok := f.Lookup("www.example.com.", dns.TypeA); ok {
		t.Error("a name outside the zone answered")
	}
	if a, ok := f.Lookup("loop.example.org.", dns.TypeA); !ok || !a.Failed {
		t.Errorf("CNAME to itself: %+v, want a failure", a)
	}
}

// TestExternalTarget: a CNAME target the zone does not hold is looked up
// through the server; its rcode decides the class of the answer.
func TestExternalTarget(t *testing.T) {
	f := newFiles(t, Zone{File: writeZone(t, testZone), Origins: []string{"example.org."}})
	a, ok := f.Lookup("outside.example.org.", dns.TypeA)
	if !ok || a.Target != "www.example.net." || a.Finish == nil {
		t.Fatalf("outside: %+v", a)
	}
	up := new(dns.Msg)
	up.Answer = []dns.RR{dnstest.MustRR("www.example.net. 60 IN A 192.0.2.1")}
	if got, want := render(a.Finish(up, false)), "NOERROR aa=true | outside.example.org. 300 IN CNAME www.example.net.; www.example.net. 60 IN A 192.0.2.1 | "+apexNS+" | "; got != want {
		t.Errorf("outside A:\n got %s\nwant %s", got, want)
	}
	nx := new(dns.Msg)
	nx.Rcode = dns.RcodeNameError
	if got, want := render(a.Finish(nx, false)), "NXDOMAIN aa=true | outside.example.org. 300 IN CNAME www.example.net. | "+soa+" | "; got != want {
		t.Errorf("outside NXDOMAIN:\n got %s\nwant %s", got, want)
	}
	if got, want := render(a.Finish(nil, true)), "SERVFAIL aa=true | outside.example.org. 300 IN CNAME www.example.net. | "+apexNS+" | "; got != want {
		t.Errorf("outside failed:\n got %s\nwant %s", got, want)
	}
	// A target in the zone that does not exist goes through the server
	// too (which answers NXDOMAIN from the zone).
	if a, ok = f.Lookup("dangling.example.org.", dns.TypeA); !ok || a.Target != "nothere.example.org." {
		t.Fatalf("dangling: %+v", a)
	}
}

// TestBadZone: errors name the file and the line.
func TestBadZone(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"$ORIGIN example.org.\n@ 300 IN SOA ns. h. 1 2 3 4 5\nwww 300 IN A 999.1.1.1\n", "line: 3"},
		{"$ORIGIN example.org.\nwww 300 IN A 192.0.2.1\n", "no SOA"},
		{"$ORIGIN example.org.\n@ 300 IN SOA ns. h. 1 2 3 4 5\nwww.example.com. 300 IN A 192.0.2.1\n", "outside the zone"},
	} {
		p := writeZone(t, c.text)
		_, err := New(Config{Zones: []Zone{{File: p, Origins: []string{"example.org."}}}})
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to name %s and say %q", c.text, err, p, c.want)
		}
	}
	if _, err := New(Config{Zones: []Zone{{File: filepath.Join(t.TempDir(), "missing"), Origins: []string{"example.org."}}}}); err == nil {
		t.Error("a missing file without reload: no error")
	}
	f := newFiles(t, Zone{File: filepath.Join(t.TempDir(), "missing"), Origins: []string{"example.org."}, Reload: time.Minute})
	if a, ok := f.Lookup("www.example.org.", dns.TypeA); !ok || !a.Failed {
		t.Errorf("a zone whose file is missing: %+v, want SERVFAIL", a)
	}
}

// TestReload: a new serial is served, the same serial is not, a file that
// no longer parses keeps the zone (counted).
func TestReload(t *testing.T) {
	p := writeZone(t, testZone)
	f := newFiles(t, Zone{File: p, Origins: []string{"example.org."}, Reload: time.Hour})
	clock := time.Now()
	edit := func(text string) {
		t.Helper()
		clock = clock.Add(2 * time.Hour) // past the reload interval
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		f.check(clock)
	}
	addr := func() string {
		a, _ := f.Lookup("www.example.org.", dns.TypeA)
		if a.Msg == nil || len(a.Msg.Answer) == 0 {
			return ""
		}
		return a.Msg.Answer[0].(*dns.A).A.String()
	}
	gen := f.Generation()
	edit(strings.Replace(testZone, "192.0.2.80", "192.0.2.81", 1))
	if got := addr(); got != "192.0.2.80" || f.Generation() != gen {
		t.Fatalf("same serial: %s, want the old zone", got)
	}
	edit(strings.Replace(strings.Replace(testZone, "192.0.2.80", "192.0.2.81", 1), "2026120201", "2026120202", 1))
	if got := addr(); got != "192.0.2.81" || f.Generation() == gen {
		t.Fatalf("new serial: %s, want 192.0.2.81", got)
	}
	edit(testZone + "bad IN A nonsense\n")
	if got := addr(); got != "192.0.2.81" || f.Stats().Rejected != 1 {
		t.Fatalf("bad file: %s, rejected %d; want the zone kept and one rejection", got, f.Stats().Rejected)
	}
}

// TestFallthrough: NXDOMAIN and NODATA of the fallthrough zones go on.
func TestFallthrough(t *testing.T) {
	f := newFiles(t, Zone{File: writeZone(t, testZone), Origins: []string{"example.org."}, Fall: true})
	if _, ok := f.Lookup("nope.example.org.", dns.TypeA); ok {
		t.Error("NXDOMAIN with fallthrough answered")
	}
	if _, ok := f.Lookup("www.example.org.", dns.TypeA); !ok {
		t.Error("an answer with fallthrough not answered")
	}
}

// TestLookupAllocs: a name outside every zone costs no allocation.
func TestLookupAllocs(t *testing.T) {
	f := newFiles(t, Zone{File: writeZone(t, testZone), Origins: []string{"example.org."}})
	if n := testing.AllocsPerRun(100, func() { f.Lookup("www.example.com.", dns.TypeA) }); n != 0 {
		t.Errorf("%.1f allocations for a name outside the zones", n)
	}
}
