package acl

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

func TestDecide(t *testing.T) {
	a, err := New([]Rule{
		// AKS's coredns-custom example: transfers blocked, internal
		// networks allowed, everyone else blocked.
		{Policies: []Policy{
			{Action: "block", Types: []string{"AXFR", "IXFR"}},
			{Action: "allow", Nets: []string{"10.0.0.0/8", "fd00::/8", "127.0.25.7"}},
			{Action: "filter", Types: []string{"mx", "TXT"}, Nets: []string{"192.0.2.0/24"}},
			{Action: "drop", Nets: []string{"198.51.100.1"}},
			{Action: "block", Types: []string{"*"}, Nets: []string{"192.0.2.0/24"}},
		}},
		{Zones: []string{"internal.example"}, Policies: []Policy{{Action: "block"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !a.ByName() {
		t.Error("a rule for one zone: ByName false")
	}
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		qtype  uint16
		client netip.Addr
		want   stage.ACLAction
	}{
		{"www.example.com.", dns.TypeAXFR, ip("10.1.2.3"), stage.ACLBlock},
		{"www.example.com.", dns.TypeA, ip("10.1.2.3"), stage.ACLPass},
		{"www.example.com.", dns.TypeA, ip("::ffff:10.1.2.3"), stage.ACLPass},
		{"www.example.com.", dns.TypeA, ip("fd00::1"), stage.ACLPass},
		{"www.example.com.", dns.TypeMX, ip("192.0.2.9"), stage.ACLFilter},
		{"www.example.com.", dns.TypeA, ip("192.0.2.9"), stage.ACLBlock},
		{"www.example.com.", dns.TypeA, ip("198.51.100.1"), stage.ACLDrop},
		{"www.example.com.", dns.TypeA, ip("198.51.100.2"), stage.ACLPass},
		// allow in rule 1 stops every rule: rule 2 does not block it.
		{"a.internal.example.", dns.TypeA, ip("127.0.25.7"), stage.ACLPass},
		{"a.internal.example.", dns.TypeA, ip("127.0.25.8"), stage.ACLBlock},
		{"internal.example.", dns.TypeA, ip("127.0.25.8"), stage.ACLBlock},
		{"notinternal.example.", dns.TypeA, ip("127.0.25.8"), stage.ACLPass},
	} {
		if got := a.Decide(tc.name, tc.qtype, tc.client); got != tc.want {
			t.Errorf("%s %s from %s: %d, want %d", tc.name, dns.TypeToString[tc.qtype], tc.client, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { a.Decide("www.example.com.", dns.TypeA, ip("192.0.2.9")) }); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}

func TestNewErrors(t *testing.T) {
	for _, rules := range [][]Rule{
		{{Policies: []Policy{{Action: "deny"}}}},
		{{Policies: []Policy{{Action: "block", Types: []string{"BOGUS"}}}}},
		{{Policies: []Policy{{Action: "block", Nets: []string{"10.0.0.0/33"}}}}},
		{{Policies: []Policy{{Action: "block", Nets: []string{"host.example"}}}}},
		{{Zones: []string{"a..b"}, Policies: []Policy{{Action: "block"}}}},
		{{}},
	} {
		if _, err := New(rules); err == nil {
			t.Errorf("%+v accepted", rules)
		}
	}
}
