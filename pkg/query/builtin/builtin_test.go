package builtin

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// render is a reply as "RCODE; section record; ..." (records sorted).
func render(m *dns.Msg) string {
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
	return strings.Join(append([]string{dns.RcodeToString[m.Rcode]}, lines...), "; ")
}

// TestLocal: the answers of CoreDNS 1.15's local plugin (plugin/local,
// its tests and the study's measurements).
func TestLocal(t *testing.T) {
	const soaLH = "localhost. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string // "" : not answered
	}{
		{"localhost.", dns.TypeA, "NOERROR; an localhost. 604800 IN A 127.0.0.1"},
		{"localhost.", dns.TypeAAAA, "NOERROR; an localhost. 604800 IN AAAA ::1"},
		{"localhost.", dns.TypeSOA, "NOERROR; an " + soaLH},
		{"localhost.", dns.TypeNS, "NOERROR; an localhost. 604800 IN NS localhost."},
		{"localhost.", dns.TypeMX, "NOERROR; ns " + soaLH},
		{"foo.localhost.", dns.TypeA, "NOERROR; an foo.localhost. 604800 IN A 127.0.0.1"},
		{"a.b.localhost.", dns.TypeAAAA, "NOERROR; an a.b.localhost. 604800 IN AAAA ::1"},
		{"foo.localhost.", dns.TypeTXT, "NOERROR; ns foo.localhost. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"localhost.cluster.local.", dns.TypeA, "NOERROR; an localhost.cluster.local. 604800 IN A 127.0.0.1"},
		{"localhost.example.", dns.TypeMX, "NOERROR; ns localhost.example. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"127.in-addr.arpa.", dns.TypeA, "NOERROR; ns 127.in-addr.arpa. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"127.in-addr.arpa.", dns.TypeNS, "NOERROR; an 127.in-addr.arpa. 604800 IN NS localhost."},
		{"0.in-addr.arpa.", dns.TypeSOA, "NOERROR; an 0.in-addr.arpa. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"1.0.0.127.in-addr.arpa.", dns.TypePTR, "NOERROR; an 1.0.0.127.in-addr.arpa. 604800 IN PTR localhost."},
		{"1.0.0.127.in-addr.arpa.", dns.TypeA, "NOERROR; ns 127.in-addr.arpa. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"2.0.0.127.in-addr.arpa.", dns.TypePTR, "NXDOMAIN; ns 127.in-addr.arpa. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"255.255.255.255.in-addr.arpa.", dns.TypePTR, "NXDOMAIN; ns 255.in-addr.arpa. 604800 IN SOA localhost. root.localhost. 1 0 0 0 604800"},
		{"10.in-addr.arpa.", dns.TypePTR, ""},
		{"1.0.0.10.in-addr.arpa.", dns.TypePTR, ""},
		{"notlocalhost.", dns.TypeA, ""},
		{"example.com.", dns.TypeA, ""},
	} {
		res, ok := NewLocal(true).Lookup(tc.name, tc.qtype, dns.ClassINET)
		got := ""
		if ok {
			got = render(res.Msg)
			if res.Msg.Authoritative {
				t.Errorf("%s %s: AA set", tc.name, dns.TypeToString[tc.qtype])
			}
		}
		if got != tc.want {
			t.Errorf("%s %s:\n got %q\nwant %q", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
	if _, ok := NewLocal(false).Lookup("localhost.cluster.local.", dns.TypeA, dns.ClassINET); ok {
		t.Error("the legacy prefix answered with localhost_prefix off")
	}
	if _, ok := NewLocal(false).Lookup("x.localhost.", dns.TypeA, dns.ClassINET); !ok {
		t.Error("a name under localhost. not answered with localhost_prefix off")
	}
}

func TestLocalNoMatchAllocs(t *testing.T) {
	l := NewLocal(true)
	if n := testing.AllocsPerRun(100, func() { l.Lookup("www.example.com.", dns.TypeA, dns.ClassINET) }); n != 0 {
		t.Fatalf("%v allocations for a name it does not answer", n)
	}
}

func TestChaos(t *testing.T) {
	c := NewChaos("nodedns-test", []string{"b", "a", "b", "c"})
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name   string
		qtype  uint16
		qclass uint16
		want   string
	}{
		{"version.bind.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR; an version.bind. 0 CH TXT \"nodedns-test\""},
		{"version.server.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR; an version.server. 0 CH TXT \"nodedns-test\""},
		{"authors.bind.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR; an authors.bind. 0 CH TXT \"a\"; an authors.bind. 0 CH TXT \"b\"; an authors.bind. 0 CH TXT \"c\""},
		{"hostname.bind.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR; an hostname.bind. 0 CH TXT \"" + host + "\""},
		{"id.server.", dns.TypeTXT, dns.ClassCHAOS, "NOERROR; an id.server. 0 CH TXT \"" + host + "\""},
		{"version.bind.", dns.TypeA, dns.ClassCHAOS, ""},
		{"version.bind.", dns.TypeTXT, dns.ClassINET, ""},
		{"other.bind.", dns.TypeTXT, dns.ClassCHAOS, ""},
	} {
		res, ok := c.Lookup(tc.name, tc.qtype, tc.qclass)
		got := ""
		if ok {
			got = render(res.Msg)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
