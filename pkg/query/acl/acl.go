// Package acl decides which clients get an answer to which questions, as
// CoreDNS's acl plugin (1.15): rules, each for some zones, of policies
// matching the query's type and the client's network, whose action is to
// allow, block (REFUSED, Extended DNS Error 15), filter (NOERROR without
// records, Extended DNS Error 17) or drop the query. The pipeline asks it
// about every query after rewrites, before the cache; it is a stage.ACL.
package acl

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Rule is one acl directive: the zones it applies to (default every name)
// and its policies, in order.
type Rule struct {
	Zones    []string
	Policies []Policy
}

// Policy is one line of a rule: the action, and the query types (none or
// "*": every type) and client networks (CIDRs or addresses; none or "*":
// every client) it matches.
type Policy struct {
	Action string
	Types  []string
	Nets   []string
}

// Actions of a policy.
const (
	Allow  = "allow"
	Block  = "block"
	Filter = "filter"
	Drop   = "drop"
)

// ACL is a list of compiled rules; safe for concurrent use.
type ACL struct {
	rules  []rule
	byName bool
}

type rule struct {
	zones    []string // lower-case FQDNs; "." holds every name
	policies []policy
}

type policy struct {
	action   stage.ACLAction
	allow    bool
	anyType  bool
	types    []uint16
	anyNet   bool
	prefixes []netip.Prefix
}

// New compiles rules; errors name the rule and policy (from 1).
func New(rules []Rule) (*ACL, error) {
	a := &ACL{}
	for i, r := range rules {
		cr := rule{}
		for _, z := range r.Zones {
			n := dnsname.Canonical(strings.TrimSpace(z))
			if _, ok := dns.IsDomainName(n); !ok {
				return nil, fmt.Errorf("acl rule %d: zone %q is not a domain name", i+1, z)
			}
			cr.zones = append(cr.zones, n)
		}
		if len(cr.zones) == 0 {
			cr.zones = []string{"."}
		}
		if !slices.Contains(cr.zones, ".") {
			a.byName = true
		}
		if len(r.Policies) == 0 {
			return nil, fmt.Errorf("acl rule %d: no policy", i+1)
		}
		for j, p := range r.Policies {
			cp, err := compile(p)
			if err != nil {
				return nil, fmt.Errorf("acl rule %d, policy %d: %w", i+1, j+1, err)
			}
			cr.policies = append(cr.policies, cp)
		}
		a.rules = append(a.rules, cr)
	}
	return a, nil
}

func compile(p Policy) (policy, error) {
	var cp policy
	switch strings.ToLower(p.Action) {
	case Allow:
		cp.allow = true
	case Block:
		cp.action = stage.ACLBlock
	case Filter:
		cp.action = stage.ACLFilter
	case Drop:
		cp.action = stage.ACLDrop
	default:
		return cp, fmt.Errorf("action %q: want allow, block, filter or drop", p.Action)
	}
	cp.anyType = len(p.Types) == 0
	for _, t := range p.Types {
		if t == "*" {
			cp.anyType = true
			continue
		}
		qt, ok := dns.StringToType[strings.ToUpper(t)]
		if !ok {
			return cp, fmt.Errorf("type %q is not a query type", t)
		}
		cp.types = append(cp.types, qt)
	}
	cp.anyNet = len(p.Nets) == 0
	for _, n := range p.Nets {
		if n == "*" {
			cp.anyNet = true
			continue
		}
		pfx, err := parseNet(n)
		if err != nil {
			return cp, err
		}
		cp.prefixes = append(cp.prefixes, pfx)
	}
	return cp, nil
}

// parseNet reads a CIDR, or an address (a /32 or /128), as CoreDNS does;
// the address bits past the prefix are ignored.
func parseNet(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("net %q is neither a CIDR nor an address", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("net %q is not a CIDR", s)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// ByName implements stage.ACL.
func (a *ACL) ByName() bool { return a.byName }

// Decide implements stage.ACL: for each rule whose zones hold name, the
// first policy matching qtype and client decides; allow ends the checks
// of every rule (CoreDNS's acl does the same); a rule without a matching
// policy leaves the decision to the next. Nothing is allocated.
func (a *ACL) Decide(name string, qtype uint16, client netip.Addr) stage.ACLAction {
	client = client.Unmap()
	for i := range a.rules {
		r := &a.rules[i]
		if !dnsname.InZones(name, r.zones) {
			continue
		}
		for j := range r.policies {
			p := &r.policies[j]
			if !p.anyType && !slices.Contains(p.types, qtype) {
				continue
			}
			if !p.anyNet && !contains(p.prefixes, client) {
				continue
			}
			if p.allow {
				return stage.ACLPass
			}
			return p.action
		}
	}
	return stage.ACLPass
}

func contains(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
