package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

func scripted(t *testing.T, n int) ([]*dnstest.Scripted, []string) {
	t.Helper()
	var ups []*dnstest.Scripted
	var addrs []string
	for i := range n {
		s := dnstest.StartScripted(t, fmt.Sprintf("192.0.2.%d", 11+i), fmt.Sprintf("2001:db8::%d", 11+i), uint32(60+i))
		ups = append(ups, s)
		addrs = append(addrs, s.Addr)
	}
	return ups, addrs
}

func queries(ups []*dnstest.Scripted) string {
	var out []int
	for _, u := range ups {
		out = append(out, u.Queries())
	}
	return fmt.Sprint(out)
}

func rcodes(t *testing.T, names ...string) []int {
	t.Helper()
	rc, err := upstream.ParseRcodes(names, false)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestFailover: the listed rcodes go on to the next server, each server
// asked once, the last reply returned; others are the answer; an empty
// list passes nothing on; the default retries SERVFAIL/REFUSED once.
func TestFailover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover []int
		servers  int
		qname    string
		rcode    int
		asked    string
	}{
		{"servfail passed on", rcodes(t, "SERVFAIL", "refused"), 2, "sf1.example.", dns.RcodeServerFailure, "[1 1]"},
		{"refused passed on", rcodes(t, "SERVFAIL", "REFUSED"), 2, "ref1.example.", dns.RcodeRefused, "[1 1]"},
		{"nxdomain not listed", rcodes(t, "SERVFAIL", "REFUSED"), 2, "nx1.example.", dns.RcodeNameError, "[1 0]"},
		{"answer", rcodes(t, "SERVFAIL"), 2, "ok1.example.", dns.RcodeSuccess, "[1 0]"},
		{"three all servfail", rcodes(t, "SERVFAIL"), 3, "sf2.example.", dns.RcodeServerFailure, "[1 1 1]"},
		{"none", []int{}, 3, "sf3.example.", dns.RcodeServerFailure, "[1 0 0]"},
		{"default retries once", nil, 3, "sf4.example.", dns.RcodeServerFailure, "[1 1 0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ups, addrs := scripted(t, tc.servers)
			f := newForwarder(t, upstream.Config{Servers: addrs, Options: upstream.GroupOptions{Failover: tc.failover}})
			r := forward(t, f, tc.qname, dns.TypeA)
			if r.Rcode != tc.rcode || queries(ups) != tc.asked {
				t.Fatalf("rcode %s, servers asked %s; want %s, %s", dns.RcodeToString[r.Rcode], queries(ups), dns.RcodeToString[tc.rcode], tc.asked)
			}
		})
	}
	t.Run("the next server's answer", func(t *testing.T) {
		ups, addrs := scripted(t, 2)
		ups[0].SetMode(dnstest.ModeServfail)
		f := newForwarder(t, upstream.Config{Servers: addrs, Options: upstream.GroupOptions{Failover: rcodes(t, "SERVFAIL")}})
		if r := forward(t, f, "ok.example.", dns.TypeA); answerA(r) != ups[1].V4 || queries(ups) != "[1 1]" {
			t.Fatalf("%v, asked %s", r, queries(ups))
		}
	})
	if _, err := upstream.ParseRcodes([]string{"NOERROR"}, false); err == nil {
		t.Error("NOERROR accepted for failover")
	}
	if _, err := upstream.ParseRcodes([]string{"NOPE"}, true); err == nil {
		t.Error("NOPE accepted as an rcode")
	}
}

// TestNext: replies with the chained rcodes, or NODATA, are answered by
// the next group (its own policy and failover), chains of three included;
// a next without servers makes them ErrNoUpstream.
func TestNext(t *testing.T) {
	ups, addrs := scripted(t, 3)
	f := newForwarder(t, upstream.Config{Servers: addrs[:1], Options: upstream.GroupOptions{
		Next: &upstream.Next{On: rcodes(t, "NXDOMAIN", "SERVFAIL"), OnNoData: true, Servers: addrs[1:2],
			Options: upstream.GroupOptions{Next: &upstream.Next{On: rcodes(t, "NXDOMAIN"), Servers: addrs[2:3]}}}}})
	for _, tc := range []struct {
		qname  string
		qtype  uint16
		answer string // the TTL of the SOA or the answer: who answered
		asked  string
	}{
		{"nx1.example.", dns.TypeA, "62", "[1 1 1]"},
		{"sf1.example.", dns.TypeA, "", "[1 1 0]"},
		{"nodata1.example.", dns.TypeA, "61", "[1 1 0]"},
		{"ok1.example.", dns.TypeTXT, "61", "[1 1 0]"},
		{"ok1.example.", dns.TypeA, "60", "[1 0 0]"},
		{"ref1.example.", dns.TypeA, "", "[1 0 0]"},
	} {
		before := []int{ups[0].Queries(), ups[1].Queries(), ups[2].Queries()}
		r := forward(t, f, tc.qname, tc.qtype)
		ttl := ""
		if rrs := append(r.Answer, r.Ns...); len(rrs) > 0 {
			ttl = fmt.Sprint(rrs[0].Header().Ttl)
		}
		asked := fmt.Sprint([]int{ups[0].Queries() - before[0], ups[1].Queries() - before[1], ups[2].Queries() - before[2]})
		if ttl != tc.answer || asked != tc.asked {
			t.Errorf("%s %s: answered by ttl %q, asked %s; want %q, %s", tc.qname, dns.TypeToString[tc.qtype], ttl, asked, tc.answer, tc.asked)
		}
	}
	g := newForwarder(t, upstream.Config{Servers: addrs[:1], Options: upstream.GroupOptions{Next: &upstream.Next{On: rcodes(t, "NXDOMAIN")}}})
	if _, err := g.Exchange(context.Background(), stage.Origin{}, query("nx9.example.", dns.TypeA)); !errors.Is(err, upstream.ErrNoUpstream) {
		t.Fatalf("next without servers: %v, want ErrNoUpstream", err)
	}
	if r := forward(t, g, "ok9.example.", dns.TypeA); answerA(r) != ups[0].V4 {
		t.Fatalf("next without servers, an answer: %v", r)
	}
}

// TestExcept: excepted names skip the group (the zone apex never is):
// to a shorter stub zone, the default group, or nowhere.
func TestExcept(t *testing.T) {
	ups, addrs := scripted(t, 3)
	f := newForwarder(t, upstream.Config{Servers: addrs[:1], Options: upstream.GroupOptions{Except: []string{"corp.example", "Other.Example."}},
		Stubs:       map[string][]string{"corp.example.": addrs[1:2], "x.corp.example.": addrs[2:3]},
		StubOptions: map[string]upstream.GroupOptions{"x.corp.example.": {Except: []string{"x.corp.example", "y.x.corp.example"}}}})
	for _, tc := range []struct {
		qname, want string
	}{
		{"a.corp.example.", ups[1].V4},
		{"x.corp.example.", ups[2].V4},     // the apex of the stub is never excepted
		{"a.y.x.corp.example.", ups[1].V4}, // excepted from x.corp: corp.example
		{"a.x.corp.example.", ups[1].V4},   // excepted (the zone itself listed)
		{"a.example.", ups[0].V4},
		{"other.example.", ""},
		{"a.other.example.", ""},
	} {
		r, err := f.Exchange(context.Background(), stage.Origin{}, query(tc.qname, dns.TypeA))
		switch {
		case tc.want == "" && !errors.Is(err, upstream.ErrNoUpstream):
			t.Errorf("%s: %v %v, want ErrNoUpstream", tc.qname, r, err)
		case tc.want != "" && (err != nil || answerA(r) != tc.want):
			t.Errorf("%s: %v %v, want %s", tc.qname, r, err, tc.want)
		}
	}
	if ups[0].AskedFor("a.other.example.", dns.TypeA) != 0 {
		t.Error("the default group asked for an excepted name")
	}
}

// TestReadTimeout: each attempt waits ReadTimeout; two attempts per
// server.
func TestReadTimeout(t *testing.T) {
	ups, addrs := scripted(t, 2)
	for _, u := range ups {
		u.SetMode(dnstest.ModeBlackhole)
	}
	f := newForwarder(t, upstream.Config{Servers: addrs, Options: upstream.GroupOptions{ReadTimeout: 100 * time.Millisecond, Health: &upstream.Health{}}})
	start := time.Now()
	_, err := f.Exchange(context.Background(), stage.Origin{}, query("a.example.", dns.TypeA))
	took := time.Since(start)
	if !errors.Is(err, upstream.ErrAllFailed) || took < 350*time.Millisecond || took > 2*time.Second || queries(ups) != "[2 2]" {
		t.Fatalf("err %v after %s, asked %s; want 4 attempts of 100ms", err, took, queries(ups))
	}
}

// TestServerOptionsApart: the same address in two groups with different
// health settings is two servers, each judged by its own.
func TestServerOptionsApart(t *testing.T) {
	_, addrs := scripted(t, 1)
	f := newForwarder(t, upstream.Config{Servers: addrs, Stubs: map[string][]string{"corp.example.": addrs},
		StubOptions: map[string]upstream.GroupOptions{"corp.example.": {Health: &upstream.Health{MaxFails: 0}}}})
	if n := len(f.Servers()); n != 2 {
		t.Fatalf("%d servers, want 2", n)
	}
	g := newForwarder(t, upstream.Config{Servers: addrs, Stubs: map[string][]string{"corp.example.": addrs}})
	if n := len(g.Servers()); n != 1 {
		t.Fatalf("%d servers, want 1", n)
	}
}

// TestGroupOptionErrors: bad options are refused when the forwarder is
// built.
func TestGroupOptionErrors(t *testing.T) {
	for _, o := range []upstream.GroupOptions{
		{Failover: []int{dns.RcodeSuccess}},
		{ReadTimeout: -time.Second},
		{Health: &upstream.Health{MaxFails: -1}},
		{Health: &upstream.Health{MaxFails: 1, Domain: "bad..name"}},
		{Expire: -time.Second},
		{DoHMethod: "PUT"},
		{Except: []string{"bad..name"}},
		{Next: &upstream.Next{Servers: []string{"192.0.2.1"}}},
		{Next: &upstream.Next{On: []int{dns.RcodeNameError}, Servers: []string{"192.0.2.1"}, Options: upstream.GroupOptions{Except: []string{"a.example"}}}},
	} {
		if _, err := upstream.New(upstream.Config{Servers: []string{"192.0.2.1"}, Options: o, Logger: quiet}); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}
