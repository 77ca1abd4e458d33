package view

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func q(client, name string, qtype uint16, tcp bool) *Query {
	return &Query{Client: netip.MustParseAddr(client), Name: name, Type: qtype, Class: dns.ClassINET, TCP: tcp}
}

// TestMatch: the carried forms, as CoreDNS's view evaluates them.
func TestMatch(t *testing.T) {
	v4 := q("10.1.2.3", "www.example.com.", dns.TypeA, false)
	v6 := q("fd00::5", "abc.x.y.example.com.", dns.TypeAAAA, true)
	other := q("192.0.2.1", "example.com.", dns.TypeMX, false)
	for _, c := range []struct {
		expr            string
		v4, v6, otherOK bool
	}{
		{`incidr(client_ip(), '10.0.0.0/8')`, true, false, false},
		{`incidr(client_ip(), "fd00::/8")`, false, true, false},
		{`incidr(client_ip(), '10.1.2.3/8')`, true, false, false}, // host bits, as net.ParseCIDR
		{`incidr(client_ip(), '::/0')`, false, true, false},       // an IPv4 client is in no IPv6 network
		{`client_ip() == '10.1.2.3'`, true, false, false},
		{`'fd00::5' == client_ip()`, false, true, false},
		{`client_ip() != '10.1.2.3'`, false, true, true},
		{`client_ip() == '[fd00::5]'`, false, false, false},
		{`name() == 'www.example.com.'`, true, false, false},
		{`name() == 'www.example.com'`, false, false, false},
		{`name() matches '^abc\\..*\\.example\\.com\\.$'`, false, true, false},
		{`name() matches 'example[.]com[.]$' && !(type() == 'MX')`, true, true, false},
		{`type() == 'A'`, true, false, false},
		{`type() in ['A', 'AAAA']`, true, true, false},
		{`type() not in ['A', 'AAAA']`, false, false, true},
		{`type() == 'TYPE1'`, false, false, false}, // A prints as A
		{`class() == 'IN'`, true, true, true},
		{`proto() == 'tcp'`, false, true, false},
		{`proto() in ['udp']`, true, false, true},
		{`true`, true, true, true},
		{`not false and (false or true)`, true, true, true},
		{`incidr(client_ip(), '10.0.0.0/8') || incidr(client_ip(), 'fd00::/8')`, true, true, false},
		{`(type() == 'A' && name() == 'www.example.com.') || client_ip() == '192.0.2.1'`, true, false, true},
		{`!incidr(client_ip(), '10.0.0.0/8') && !incidr(client_ip(), 'fd00::/8')`, false, false, true},
		{`incidr('10.0.0.1', '10.0.0.0/8')`, true, true, true},
		{`incidr('nonsense', '10.0.0.0/8')`, false, false, false},
		{`client_ip() == 'not an address'`, false, false, false},
		{`client_ip() in ['192.0.2.1', 'fd00::5']`, false, true, true},
	} {
		e, err := Parse(c.expr)
		if err != nil {
			t.Errorf("Parse(%s): %v", c.expr, err)
			continue
		}
		for _, x := range []struct {
			q    *Query
			want bool
		}{{v4, c.v4}, {v6, c.v6}, {other, c.otherOK}} {
			if got := e.Match(x.q); got != x.want {
				t.Errorf("%s for %v %s %s: %v, want %v", c.expr, x.q.Client, x.q.Name, dns.TypeToString[x.q.Type], got, x.want)
			}
		}
	}
}

// TestRefused: what is not carried is an error naming it.
func TestRefused(t *testing.T) {
	for _, c := range []struct{ expr, says string }{
		{`port() == '53'`, "port()"},
		{`size() > 100`, `">"`},
		{`do()`, "do()"},
		{`bufsize() == 1232`, "number"},
		{`metadata('kubernetes/client-namespace') == 'prod'`, "metadata()"},
		{`server_ip() == '10.0.0.10'`, "server_ip()"},
		{`type() == 'A' ? true : false`, "?"},
		{`name() startsWith 'www'`, "startsWith"},
		{`name()`, "name() alone"},
		{`'A'`, "alone"},
		{`type() matches 'A'`, "matches"},
		{`name() == type()`, "compared to a string"},
		{`incidr(client_ip(), 'not-a-cidr')`, "not a network"},
		{`incidr(name(), '10.0.0.0/8')`, "incidr(name()"},
		{`name() matches '('`, "matches"},
		{`type() in 'A'`, "list"},
		{`type() == 'A' &&`, "ends"},
		{`(type() == 'A'`, `want ")"`},
		{`type() == 'A')`, "unexpected"},
		{`'unclosed`, "not closed"},
		{`name() == 'a\qb'`, "escape"},
		{`[1, 2]`, "number"},
		{``, "ends"},
		{strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), "nested"},
		{strings.Repeat("!", 40) + "true", "nested"},
	} {
		_, err := Parse(c.expr)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Parse(%s): %v, want an error saying %q", c.expr, err, c.says)
		}
	}
	if _, err := Parse(strings.Repeat(" ", MaxLen+1)); err == nil {
		t.Error("an expression over MaxLen parsed")
	}
}

// TestMatchAllocs: a condition costs no allocation on the reader.
func TestMatchAllocs(t *testing.T) {
	e, err := Parse(`(incidr(client_ip(), '10.0.0.0/8') || client_ip() == 'fd00::5') && type() in ['A', 'AAAA'] && name() matches 'example[.]com[.]$' && proto() != 'tcp'`)
	if err != nil {
		t.Fatal(err)
	}
	x := q("10.1.2.3", "www.example.com.", dns.TypeA, false)
	if !e.Match(x) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(1000, func() { e.Match(x) }); n != 0 {
		t.Errorf("%.1f allocations per match", n)
	}
}

// FuzzParse: any input parses or fails with an error, never a panic, and
// what parses matches without one.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`incidr(client_ip(), '10.0.0.0/8')`, `type() in ['A', 'AAAA'] && !(name() matches '^x')`,
		`name() == "a.b." || proto() != 'udp'`, `not true or false`, `client_ip() not in ['::1']`, `incidr('1.2.3.4', '1.0.0.0/8')`} {
		f.Add(s)
	}
	qs := []*Query{q("10.1.2.3", "www.example.com.", dns.TypeA, false), q("fd00::5", ".", dns.TypeAAAA, true), {}}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			if e != nil {
				t.Fatal("an error and an expression")
			}
			return
		}
		for _, x := range qs {
			e.Match(x)
		}
	})
}
