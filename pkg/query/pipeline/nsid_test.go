package pipeline

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// qNSID is an EDNS query carrying the (empty) NSID option.
func qNSID(name string, qtype uint16) *dns.Msg {
	m := qEDNS(name, qtype)
	o := m.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
	return m
}

// nsidOf returns the NSID payload of r (hex, as miekg/dns holds it) and
// whether r carries one.
func nsidOf(r *dns.Msg) (string, bool) {
	if o := r.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if x, ok := e.(*dns.EDNS0_NSID); ok {
				return x.Nsid, true
			}
		}
	}
	return "", false
}

// TestNSID: as CoreDNS's nsid, every reply a plugin or stage writes to a
// query carrying NSID carries it (answers, cache hits, cluster answers,
// NXDOMAIN, the access list's refusal, RFC 8482's ANY), not the errors the
// server writes itself (a failed resolution's SERVFAIL), and nothing is
// added for a query without the option.
func TestNSID(t *testing.T) {
	res := &fakeResolver{fn: func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
		if q.Question[0].Name == "fail.example.com." {
			return nil, errors.New("upstream down")
		}
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		return m, nil
	}}
	pl := &Plugins{NSID: &NSID{Data: "node-1"},
		ACL: mustACL(t, acl.Rule{Zones: []string{"blocked.example"}, Policies: []acl.Policy{{Action: acl.Block}}})}
	_, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Plugins: pl})
	want := "6e6f64652d31" // "node-1"
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		nsid  bool
	}{
		{"www.example.com.", dns.TypeA, dns.RcodeSuccess, true},
		{"web.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, true},
		{"nope.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, true},
		{"x.blocked.example.", dns.TypeA, dns.RcodeRefused, true},
		{"www.example.com.", dns.TypeANY, dns.RcodeSuccess, true},
		{"fail.example.com.", dns.TypeA, dns.RcodeServerFailure, false},
	} {
		for _, proto := range []string{"udp"} {
			r := dnstest.Exchange(t, addr, proto, qNSID(c.name, c.qtype))
			got, ok := nsidOf(r)
			if r.Rcode != c.rcode || ok != c.nsid || ok && got != want {
				t.Errorf("%s %s over %s: rcode %s, NSID %q (%v); want %s, NSID %v", c.name, dns.TypeToString[c.qtype], proto,
					dns.RcodeToString[r.Rcode], got, ok, dns.RcodeToString[c.rcode], c.nsid)
			}
			if r = dnstest.Exchange(t, addr, proto, qEDNS(c.name, c.qtype)); r.IsEdns0() == nil {
				t.Errorf("%s over %s: no OPT", c.name, proto)
			} else if _, ok := nsidOf(r); ok {
				t.Errorf("%s over %s: NSID in the reply to a query without it", c.name, proto)
			}
		}
	}
}

// TestNSIDCacheHit: a cache hit served from wire form on the reader gets
// the option appended to its OPT.
func TestNSIDCacheHit(t *testing.T) {
	p := hotServer(t, func(c *Config) { c.Plugins = &Plugins{NSID: &NSID{Data: "n"}} })
	out, v := serveOnce(p, dnstest.Pack(qNSID("www.example.test.", dns.TypeA)), make([]byte, 0, 4096))
	if v != server.Reply {
		t.Fatalf("verdict %d, want a reply on the reader", v)
	}
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil {
		t.Fatal(err)
	}
	if got, ok := nsidOf(r); !ok || got != "6e" || len(r.Answer) != 1 {
		t.Fatalf("cache hit: NSID %q (%v), %v", got, ok, r)
	}
}

// TestACLBeforeANY: `acl { block type ANY }` refuses ANY questions, as
// CoreDNS's acl, which runs before anything answers them; without such a
// rule ANY gets RFC 8482's answer.
func TestACLBeforeANY(t *testing.T) {
	a := mustACL(t, acl.Rule{Policies: []acl.Policy{{Action: acl.Block, Types: []string{"ANY"}}}})
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Plugins: &Plugins{ACL: a}})
	r := dnstest.Exchange(t, addr, "udp", qEDNS("www.example.com.", dns.TypeANY))
	if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 || !slices.Equal(edeCodes(r), []uint16{dns.ExtendedErrorCodeBlocked}) {
		t.Fatalf("ANY with acl block type ANY: %v", r)
	}
	if r = dnstest.Exchange(t, addr, "udp", qEDNS("www.example.com.", dns.TypeA)); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("A passes: %v", r)
	}
	_, addr = start(t, Config{Resolver: &fakeResolver{},
		Plugins: &Plugins{ACL: mustACL(t, acl.Rule{Policies: []acl.Policy{{Action: acl.Block, Types: []string{"MX"}}}})}})
	r = dnstest.Exchange(t, addr, "udp", qEDNS("www.example.com.", dns.TypeANY))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeHINFO {
		t.Fatalf("ANY not blocked: want RFC 8482's HINFO, got %v", r)
	}
}

// TestNSIDZones: the most specific of Zones and Except holding the name
// decides, as CoreDNS routes a query to the block of the most specific
// zone.
func TestNSIDZones(t *testing.T) {
	for _, c := range []struct {
		n    NSID
		name string
		want bool
	}{
		{NSID{}, "www.example.org.", true},
		{NSID{Except: []string{"other.test."}}, "www.example.org.", true},
		{NSID{Except: []string{"other.test."}}, "a.other.test.", false},
		{NSID{Except: []string{"other.test."}}, "other.test.", false},
		{NSID{Zones: []string{"example.org."}}, "www.example.org.", true},
		{NSID{Zones: []string{"example.org."}}, "www.example.com.", false},
		{NSID{Zones: []string{".", "a.other.test."}, Except: []string{"other.test."}}, "x.a.other.test.", true},
		{NSID{Zones: []string{".", "a.other.test."}, Except: []string{"other.test."}}, "b.other.test.", false},
		{NSID{Zones: []string{"example.org."}, Except: []string{"."}}, "www.example.org.", true},
		{NSID{Zones: []string{"example.org."}, Except: []string{"."}}, "www.example.net.", false},
	} {
		if got := c.n.covers(c.name); got != c.want {
			t.Errorf("%+v covers %s: %v, want %v", c.n, c.name, got, c.want)
		}
	}
}
