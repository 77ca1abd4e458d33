package rewrite

import (
	"regexp"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestRewrite pins the request side against CoreDNS 1.15's rules.
func TestRewrite(t *testing.T) {
	cases := []struct {
		name  string
		rules []Rule
		in    string
		want  string // "" for no match
	}{
		{"exact", []Rule{{From: "Foo.Example.COM", To: "bar.default.svc.cluster.local"}}, "foo.example.com.", "bar.default.svc.cluster.local."},
		{"exact needs the whole name", []Rule{{Type: "exact", From: "foo.example.com", To: "bar.example.com"}}, "x.foo.example.com.", ""},
		{"prefix (normalized with a dot, as CoreDNS)", []Rule{{Type: "prefix", From: "foo", To: "bar"}}, "foo.example.com.", "bar.example.com."},
		{"prefix no label end", []Rule{{Type: "prefix", From: "foo", To: "bar"}}, "food.example.com.", ""},
		{"suffix", []Rule{{Type: "suffix", From: ".schmoogle.com", To: ".google.com."}}, "www.schmoogle.com.", "www.google.com."},
		{"substring", []Rule{{Type: "substring", From: "us-west-1.example.org", To: "us-west-1.consul"}}, "ftp.service.us-west-1.example.org.", "ftp.service.us-west-1.consul."},
		{"regex with captures", []Rule{{Type: "regex", From: `(.*)-(us-west-1)\.example\.org\.`, To: "{1}.service.{2}.consul"}},
			"ftp-us-west-1.example.org.", "ftp.service.us-west-1.consul."},
		{"regex whole match", []Rule{{Type: "regex", From: `^[a-z]+\.legacy\.$`, To: "{0}corp.example"}}, "app.legacy.", "app.legacy.corp.example."},
		{"regex no match", []Rule{{Type: "regex", From: `^db-(\d+)\.`, To: "db{1}.internal"}}, "web-1.example.", ""},
		{"stop is the default", []Rule{{From: "a.example", To: "b.example"}, {From: "b.example", To: "c.example"}}, "a.example.", "b.example."},
		{"continue", []Rule{{From: "a.example", To: "b.example", Continue: true}, {From: "b.example", To: "c.example"}}, "a.example.", "c.example."},
		{"first matching rule", []Rule{{From: "x.example", To: "y.example"}, {Type: "suffix", From: "example", To: "test"}}, "a.example.", "a.test."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rw, err := New(c.rules)
			if err != nil {
				t.Fatal(err)
			}
			got, rev, ok, err := rw.Apply(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				got = ""
			}
			if got != c.want {
				t.Fatalf("%s -> %q, want %q", c.in, got, c.want)
			}
			if ok && rev.Name(got) != c.in {
				t.Errorf("revert of %s gives %s, want %s", got, rev.Name(got), c.in)
			}
		})
	}
}

// TestRewriteInvalidResult: a rewrite into something that is not a domain
// name is an error (SERVFAIL), as CoreDNS.
func TestRewriteInvalidResult(t *testing.T) {
	rw, err := New([]Rule{{Type: "regex", From: `^(.*)$`, To: "{1}.{1}.{1}.{1}.{1}"}})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "."
	if _, _, _, err := rw.Rewrite(long); err == nil {
		t.Fatal("a name over 255 octets was accepted")
	}
}

// TestRevertAnswer: owner names and values map back to the name asked,
// including names below it and CNAME targets; other names stay; the
// shared message is not modified.
func TestRevertAnswer(t *testing.T) {
	rw, err := New([]Rule{{Type: "regex", From: `^(.+)\.legacy\.example\.$`, To: "{1}.default.svc.cluster.local."}})
	if err != nil {
		t.Fatal(err)
	}
	to, rev, ok, err := rw.Apply("web.legacy.example.")
	if err != nil || !ok || to != "web.default.svc.cluster.local." {
		t.Fatalf("%q %v %v", to, ok, err)
	}
	m := &dns.Msg{Answer: []dns.RR{
		dnstest.MustRR("web.default.svc.cluster.local. 5 IN CNAME real.default.svc.cluster.local."),
		dnstest.MustRR("real.default.svc.cluster.local. 5 IN A 10.0.0.1"),
	}, Extra: []dns.RR{dnstest.MustRR("_http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 100 80 web.default.svc.cluster.local.")}}
	before := m.String()
	out := rev.Msg(m)
	if m.String() != before {
		t.Fatal("the stage's message was modified")
	}
	want := []string{
		"web.legacy.example.\t5\tIN\tCNAME\treal.default.svc.cluster.local.",
		"real.default.svc.cluster.local.\t5\tIN\tA\t10.0.0.1",
	}
	for i, w := range want {
		if out.Answer[i].String() != w {
			t.Errorf("answer %d: %s, want %s", i, out.Answer[i], w)
		}
	}
	if out.Answer[1] != m.Answer[1] {
		t.Error("an unchanged record was copied")
	}
	if got := out.Extra[0].String(); got != "_http._tcp.web.legacy.example.\t5\tIN\tSRV\t0 100 80 web.legacy.example." {
		t.Errorf("extra: %s", got)
	}

	// Suffix: every name ending with the new suffix maps back.
	rw, _ = New([]Rule{{Type: "suffix", From: ".corp.", To: ".corp.example.com."}})
	_, rev, _, _ = rw.Apply("app.corp.")
	out = rev.Msg(&dns.Msg{Answer: []dns.RR{dnstest.MustRR("app.corp.example.com. 60 IN CNAME lb.corp.example.com."), dnstest.MustRR("lb.corp.example.com. 60 IN A 192.0.2.1")}})
	if out.Answer[0].String() != "app.corp.\t60\tIN\tCNAME\tlb.corp." || out.Answer[1].Header().Name != "lb.corp." {
		t.Errorf("suffix revert: %v", out.Answer)
	}
}

// TestContinueRevertsInReverse: with continue, the answer is mapped back
// through every applied rule, the last one first.
func TestContinueRevertsInReverse(t *testing.T) {
	rw, _ := New([]Rule{{Type: "prefix", From: "old", To: "new", Continue: true}, {Type: "suffix", From: "example.", To: "example.net."}})
	to, rev, _, _ := rw.Apply("old.app.example.")
	if to != "new.app.example.net." {
		t.Fatalf("to %s", to)
	}
	out := rev.Msg(&dns.Msg{Answer: []dns.RR{dnstest.MustRR("new.app.example.net. 60 IN A 192.0.2.1")}})
	if out.Answer[0].Header().Name != "old.app.example." {
		t.Fatalf("reverted owner %s", out.Answer[0].Header().Name)
	}
}

func TestBadRules(t *testing.T) {
	cases := []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{Type: "regex", From: "(", To: "x"}}, `rewrite rule 1: regex "(": error parsing regexp`},
		{[]Rule{{From: "a", To: "b"}, {Type: "regex", From: `^(a)\.`, To: "{2}.x"}}, `rewrite rule 2: to "{2}.x" uses {2} but regex`},
		{[]Rule{{Type: "wild", From: "a", To: "b"}}, `rewrite rule 1: type "wild": want exact, prefix, suffix, substring or regex`},
		{[]Rule{{Type: "exact", From: "a..b", To: "c"}}, `rewrite rule 1: exact rule: "a..b." is not a domain name`},
		{[]Rule{{Type: "suffix", From: "a"}}, "needs both from and to"},
		{[]Rule{{Type: "regex", From: strings.Repeat("a", maxRegexLen+1), To: "b"}}, "at most 10000"},
	}
	for _, c := range cases {
		if _, err := New(c.rules); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.rules, err, c.want)
		}
	}
}

// TestNoMatchAllocs: names no rule matches cost no allocation (every
// query goes through the rules).
func TestNoMatchAllocs(t *testing.T) {
	rw, err := New([]Rule{
		{From: "a.example", To: "b.example"},
		{Type: "prefix", From: "old", To: "new"},
		{Type: "suffix", From: ".legacy", To: ".svc.cluster.local"},
		{Type: "substring", From: "corp", To: "internal"},
		{Type: "regex", From: `^(.*)-(us-west-1)\.example\.org\.$`, To: "{1}.{2}.consul"},
	})
	if err != nil {
		t.Fatal(err)
	}
	rw.Rewrite("www.example.com.")
	if n := testing.AllocsPerRun(200, func() { rw.Rewrite("www.example.com.") }); n != 0 {
		t.Fatalf("%.1f allocations for a name no rule matches", n)
	}
}

func FuzzRewrite(f *testing.F) {
	f.Add("ftp-us-west-1.example.org.", `(.*)-(us-west-1)\.example\.org`, "{1}.service.{2}.consul")
	f.Add("a.b.", "a", "{0}{0}")
	f.Fuzz(func(t *testing.T, name, from, to string) {
		name = strings.ToLower(dns.Fqdn(name))
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		if re, err := regexp.Compile(from); err == nil && re.MatchString(name) {
			if lit := requiredLiteral(from); !strings.Contains(name, lit) {
				t.Fatalf("%q matches %q but lacks its required literal %q", name, from, lit)
			}
		}
		for _, typ := range []string{Exact, Prefix, Suffix, Substring, Regex} {
			rw, err := New([]Rule{{Type: typ, From: from, To: to}})
			if err != nil {
				continue
			}
			got, rev, ok, err := rw.Apply(name)
			if err != nil || !ok {
				continue
			}
			if _, ok := dns.IsDomainName(got); !ok {
				t.Fatalf("%s %q->%q on %q gave %q", typ, from, to, name, got)
			}
			m := &dns.Msg{Answer: []dns.RR{&dns.CNAME{Hdr: dns.RR_Header{Name: got, Rrtype: dns.TypeCNAME, Class: dns.ClassINET}, Target: got}}}
			rev.Msg(m)
		}
	})
}

func TestRequiredLiteral(t *testing.T) {
	for pattern, want := range map[string]string{
		`^(.+)\.old\.example\.$`:         ".old.example.",
		`(.*)-(us-west-1)\.example\.org`: ".example.org",
		`^(db|web)-(\d+)\.legacy\.$`:     ".legacy.",
		`(?i)^API\.EXAMPLE\.$`:           "",
		`^(a|bcd)\.x\.$`:                 ".x.",
		`(foo)+\.bar`:                    ".bar",
		`(foo){0,2}x`:                    "x",
		`^[a-z]+$`:                       "",
	} {
		if got := requiredLiteral(pattern); got != want {
			t.Errorf("%s: %q, want %q", pattern, got, want)
		}
	}
}
