package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/template"
)

// The CoreDNS plugins the pipeline runs around its stages (local, chaos,
// acl, template, header, minimal): the structured keys (acl, templates,
// header) and their checks. The settings table (keys.go) declares the
// keys; pkg/agent builds the stages from them (pkg/query/builtin,
// pkg/query/acl, pkg/query/template) and hands them to the pipeline.

// Bounds of the plugin keys: every rule, policy and template is tried on
// queries on the reader.
const (
	maxACLRules       = 64
	maxACLPolicies    = 64
	maxACLItems       = 256 // types or nets of one policy
	maxTemplates      = 64
	maxTemplateItems  = 64 // zones, regexes or records of one template
	maxChaosAuthors   = 64
	maxChaosTextBytes = 255 // a TXT string
)

// ACLRule is one entry of the `acl:` key: CoreDNS's `acl [ZONES...] {
// ACTION [type TYPES...] [net NETS...] }` (pkg/query/acl).
type ACLRule struct {
	// Zones the rule applies to; default every name.
	Zones List `json:"zones,omitempty"`
	// Policies, in order: the first matching the query decides.
	Policies []ACLPolicy `json:"policies"`
}

// ACLPolicy is one line of an acl rule.
type ACLPolicy struct {
	// Action is allow, block, filter or drop.
	Action string `json:"action"`
	// Types are query types ("*" or none: every type).
	Types List `json:"types,omitempty"`
	// Nets are CIDRs or addresses ("*" or none: every client).
	Nets List `json:"nets,omitempty"`
}

// AccessList builds the `acl:` rules; nil when there are none.
func (c *Config) AccessList() (*acl.ACL, error) {
	if len(c.ACL) == 0 {
		return nil, nil
	}
	rules := make([]acl.Rule, 0, len(c.ACL))
	for _, r := range c.ACL {
		rule := acl.Rule{Zones: r.Zones}
		for _, p := range r.Policies {
			rule.Policies = append(rule.Policies, acl.Policy{Action: p.Action, Types: p.Types, Nets: p.Nets})
		}
		rules = append(rules, rule)
	}
	return acl.New(rules)
}

func checkACL(c *Config) error {
	if len(c.ACL) > maxACLRules {
		return fmt.Errorf("acl: %d rules: want at most %d (every rule is tried on every query)", len(c.ACL), maxACLRules)
	}
	for i, r := range c.ACL {
		if len(r.Policies) > maxACLPolicies || len(r.Zones) > maxACLItems {
			return fmt.Errorf("acl rule %d: at most %d policies and %d zones", i+1, maxACLPolicies, maxACLItems)
		}
		for j, p := range r.Policies {
			if len(p.Types) > maxACLItems || len(p.Nets) > maxACLItems {
				return fmt.Errorf("acl rule %d, policy %d: at most %d types and %d nets", i+1, j+1, maxACLItems, maxACLItems)
			}
		}
	}
	_, err := c.AccessList()
	return err
}

// TemplateConfig is one entry of the `templates:` key: CoreDNS's
// `template CLASS TYPE [ZONES...] { match; answer; additional; authority;
// rcode; ederror; fallthrough }` (pkg/query/template).
type TemplateConfig struct {
	// Class is IN (default), CH or ANY.
	Class string `json:"class,omitempty"`
	// Type is the query type (A, AAAA, ANY, ...).
	Type string `json:"type"`
	// Zones: default every name.
	Zones List `json:"zones,omitempty"`
	// Match are Go regular expressions of the lower-case, fully
	// qualified name; default ".*".
	Match []string `json:"match,omitempty"`
	// Answer, Additional and Authority are records in presentation form,
	// Go text/templates ({{ .Name }}, {{ .Group.name }}, ...).
	Answer     []string `json:"answer,omitempty"`
	Additional []string `json:"additional,omitempty"`
	Authority  []string `json:"authority,omitempty"`
	// Rcode: default NOERROR.
	Rcode string `json:"rcode,omitempty"`
	// EDE is the Extended DNS Error of the answer (CoreDNS's ederror).
	EDE *TemplateEDE `json:"ede,omitempty"`
	// Fallthrough: where a name of the zones no regex matches goes on
	// (absent: nowhere, SERVFAIL; empty: everywhere).
	Fallthrough ZoneList `json:"fallthrough,omitzero"`
}

// TemplateEDE is an Extended DNS Error (RFC 8914): its code and text.
type TemplateEDE struct {
	Code   uint16 `json:"code"`
	Reason string `json:"reason,omitempty"`
}

// TemplateSet builds the `templates:` key; nil when there are none.
func (c *Config) TemplateSet() (*template.Set, error) {
	if len(c.Templates) == 0 {
		return nil, nil
	}
	cfgs := make([]template.Config, 0, len(c.Templates))
	for _, t := range c.Templates {
		tc := template.Config{Class: t.Class, Type: t.Type, Zones: t.Zones, Match: t.Match, Answer: t.Answer,
			Additional: t.Additional, Authority: t.Authority, Rcode: t.Rcode,
			Fallthrough: t.Fallthrough.Zones, FallthroughSet: t.Fallthrough.Set}
		if tc.Class == "" {
			tc.Class = "IN"
		}
		if t.EDE != nil {
			tc.HasEDE, tc.EDECode, tc.EDEText = true, t.EDE.Code, t.EDE.Reason
		}
		cfgs = append(cfgs, tc)
	}
	return template.New(cfgs)
}

func checkTemplates(c *Config) error {
	if len(c.Templates) > maxTemplates {
		return fmt.Errorf("templates: %d templates: want at most %d", len(c.Templates), maxTemplates)
	}
	for i, t := range c.Templates {
		for _, n := range []int{len(t.Zones), len(t.Match), len(t.Answer), len(t.Additional), len(t.Authority), len(t.Fallthrough.Zones)} {
			if n > maxTemplateItems {
				return fmt.Errorf("template %d: a list of %d items: want at most %d", i+1, n, maxTemplateItems)
			}
		}
		if t.Type == "" {
			return fmt.Errorf("template %d: no type", i+1)
		}
	}
	_, err := c.TemplateSet()
	return err
}

// HeaderConfig is the `header:` key: CoreDNS's header plugin, flags (aa,
// ra, rd) set or cleared on the query and on the replies.
type HeaderConfig struct {
	Query    HeaderRules `json:"query,omitzero"`
	Response HeaderRules `json:"response,omitzero"`
}

// HeaderRules are flags set and cleared.
type HeaderRules struct {
	Set   List `json:"set,omitempty"`
	Clear List `json:"clear,omitempty"`
}

var headerFlagBits = map[string]uint16{"aa": dnswire.FlagAA, "ra": dnswire.FlagRA, "rd": dnswire.FlagRD}

// HeaderMasks are the `header:` key's rules as flags set and cleared on
// the stages' replies (the query's RD rules included: a cache hit takes
// RD from the changed query, an upstream echoes it) and whether the
// upstream query has RD clear.
func (c *Config) HeaderMasks() (set, clear uint16, clearRD bool, err error) {
	h := c.Header
	if h == nil {
		return 0, 0, false, nil
	}
	masks := func(where string, r HeaderRules) (s, cl uint16, err error) {
		for _, f := range r.Set {
			b, ok := headerFlagBits[strings.ToLower(f)]
			if !ok {
				return 0, 0, fmt.Errorf("header %s set %q: want aa, ra or rd", where, f)
			}
			s |= b
		}
		for _, f := range r.Clear {
			b, ok := headerFlagBits[strings.ToLower(f)]
			if !ok {
				return 0, 0, fmt.Errorf("header %s clear %q: want aa, ra or rd", where, f)
			}
			if s&b != 0 {
				return 0, 0, fmt.Errorf("header %s: %s both set and cleared", where, f)
			}
			cl |= b
		}
		return s, cl, nil
	}
	qs, qc, err := masks("query", h.Query)
	if err != nil {
		return 0, 0, false, err
	}
	rs, rc, err := masks("response", h.Response)
	if err != nil {
		return 0, 0, false, err
	}
	// The query's RD, then the response's rules over it.
	set, clear = qs&dnswire.FlagRD, qc&dnswire.FlagRD
	set, clear = (set|rs)&^rc, (clear|rc)&^rs
	return set, clear, qc&dnswire.FlagRD != 0, nil
}

func checkChaos(c *Config) error {
	if len(c.ChaosVersion) > maxChaosTextBytes {
		return fmt.Errorf("--chaos-version: %d bytes: want at most %d (one TXT string)", len(c.ChaosVersion), maxChaosTextBytes)
	}
	if len(c.ChaosAuthors) > maxChaosAuthors {
		return fmt.Errorf("--chaos-authors: %d authors: want at most %d", len(c.ChaosAuthors), maxChaosAuthors)
	}
	if i := slices.IndexFunc(c.ChaosAuthors, func(a string) bool { return len(a) > maxChaosTextBytes }); i >= 0 {
		return fmt.Errorf("--chaos-authors: author %d over %d bytes", i+1, maxChaosTextBytes)
	}
	return nil
}
