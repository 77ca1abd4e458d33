package migrate

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// The plugins nodedns runs around its stages: template, acl, local,
// chaos, minimal, header. Each maps onto its key; a template or acl of a
// zone's block keeps that block's zones, since nodedns has one list for
// every zone.

// blockZones are the zones a directive of b applies to without zones of
// its own: none (every name) in the root block, else the block's.
func blockZones(b *block) config.List {
	if b.root {
		return nil
	}
	return trimAll(b.zones)
}

// argZones are zones given as arguments, trimmed, or the block's; none
// when "." is among them.
func argZones(b *block, args []string) config.List {
	if len(args) == 0 {
		return blockZones(b)
	}
	var out config.List
	for _, z := range args {
		c := dnsname.Canonical(z)
		if c == "." {
			return nil
		}
		out = append(out, trimDot(c))
	}
	return out
}

// template maps `template CLASS TYPE [ZONES...] {...}` onto an entry of
// the templates key.
func (m *migrator) template(b *block, d *Directive) {
	args := d.ArgTexts()
	if len(args) < 2 {
		m.drop(d.Line, "%s: wants a class and a type; not carried", d.String())
		return
	}
	t := config.TemplateConfig{Class: strings.ToUpper(args[0]), Type: strings.ToUpper(args[1]), Zones: argZones(b, args[2:])}
	if t.Class == "IN" {
		t.Class = ""
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "match":
			t.Match = append(t.Match, oa...)
		case "answer":
			t.Answer = append(t.Answer, oa...)
		case "additional":
			t.Additional = append(t.Additional, oa...)
		case "authority":
			t.Authority = append(t.Authority, oa...)
		case "rcode":
			t.Rcode = strings.ToUpper(firstArg(oa))
		case "ederror":
			if len(oa) == 0 || len(oa) > 2 {
				m.drop(o.Line, "template %s: want a code and an optional reason; the template is not carried", o.String())
				return
			}
			code, err := strconv.ParseUint(oa[0], 10, 16)
			if err != nil {
				m.drop(o.Line, "template %s: not a code; the template is not carried", o.String())
				return
			}
			t.EDE = &config.TemplateEDE{Code: uint16(code)}
			if len(oa) == 2 {
				t.EDE.Reason = oa[1]
			}
		case "fallthrough":
			t.Fallthrough = config.ZoneList{Set: true, Zones: []string{}}
			for _, z := range oa {
				t.Fallthrough.Zones = append(t.Fallthrough.Zones, trimDot(dnsname.Canonical(z)))
			}
		case "upstream":
			// Deprecated and without effect in CoreDNS too.
		case "var", "expr":
			m.drop(o.Line, "template %s: expressions (expr-lang) are not carried; the template is not carried", o.String())
			return
		default:
			m.drop(o.Line, "template option %s: not known to nodedns; the template is not carried", o.String())
			return
		}
	}
	var comments []string
	if len(t.Zones) == 0 && m.otherBlocks > 0 {
		comments = append(comments, fmt.Sprintf("line %d: a template of the root block answers in the other server blocks' zones too (CoreDNS answers those from their own blocks)", d.Line))
	}
	if !m.isSet(&m.cfg.Templates) {
		set(m, &m.cfg.Templates, []config.TemplateConfig{t}, d.Line, comments...)
	} else {
		m.cfg.Templates = append(m.cfg.Templates, t)
		for _, c := range comments {
			m.comment(&m.cfg.Templates, c)
		}
	}
	if _, err := m.cfg.TemplateSet(); err != nil {
		m.cfg.Templates = m.cfg.Templates[:len(m.cfg.Templates)-1]
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
		if len(m.cfg.Templates) == 0 {
			m.unset(&m.cfg.Templates)
		}
	}
}

// acl maps `acl [ZONES...] { ACTION [type TYPES...] [net NETS...] }` onto
// a rule of the acl key.
func (m *migrator) acl(b *block, d *Directive) {
	r := config.ACLRule{Zones: argZones(b, d.ArgTexts())}
	for _, o := range d.Block {
		p := config.ACLPolicy{Action: strings.ToLower(o.Name)}
		oa := o.ArgTexts()
		section := ""
		for _, tok := range oa {
			switch lt := strings.ToLower(tok); lt {
			case "type", "net":
				section = lt
				continue
			}
			switch section {
			case "type":
				p.Types = append(p.Types, tok)
			case "net":
				p.Nets = append(p.Nets, tok)
			default:
				m.drop(o.Line, "acl %s: %q is neither type nor net; the rule is not carried", o.String(), tok)
				return
			}
		}
		r.Policies = append(r.Policies, p)
	}
	if len(r.Policies) == 0 {
		m.drop(d.Line, "%s: no policy", d.String())
		return
	}
	if !m.isSet(&m.cfg.ACL) {
		set(m, &m.cfg.ACL, []config.ACLRule{r}, d.Line, "EDE 15 and 17 go to clients that sent EDNS only (CoreDNS adds an OPT to every blocked or filtered reply)")
	} else {
		m.cfg.ACL = append(m.cfg.ACL, r)
	}
	if len(r.Zones) == 0 && m.otherBlocks > 0 {
		m.comment(&m.cfg.ACL, fmt.Sprintf("line %d: a rule of the root block applies in the other server blocks' zones too (CoreDNS judges those by their own blocks)", d.Line))
	}
	if _, err := m.cfg.AccessList(); err != nil {
		m.cfg.ACL = m.cfg.ACL[:len(m.cfg.ACL)-1]
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
		if len(m.cfg.ACL) == 0 {
			m.unset(&m.cfg.ACL)
		}
	}
}

// local maps `local { localhost_prefix on|off }`.
func (m *migrator) local(d *Directive) {
	prefix := true
	for _, o := range d.Block {
		a := firstArg(o.ArgTexts())
		if o.Name != "localhost_prefix" || a != "on" && a != "off" {
			m.drop(o.Line, "local option %s: not known to nodedns", o.String())
			continue
		}
		prefix = a == "on"
	}
	set(m, &m.cfg.Local, true, d.Line)
	if !prefix {
		set(m, &m.cfg.LocalLocalhostPrefix, false, d.Line)
	}
}

// chaos maps `chaos [VERSION [AUTHORS...]]`. nodedns's defaults name
// nodedns where CoreDNS's name CoreDNS: the output says so.
func (m *migrator) chaos(d *Directive) {
	m.noBlock(d)
	args := d.ArgTexts()
	set(m, &m.cfg.Chaos, true, d.Line, fmt.Sprintf("line %d: %s; other CH queries are REFUSED (CoreDNS forwards them when the block forwards)", d.Line, d.String()))
	if len(args) == 0 {
		m.comment(&m.cfg.Chaos, "version.bind answers nodedns-VERSION where CoreDNS answered CoreDNS-1.15.0")
	} else {
		set(m, &m.cfg.ChaosVersion, args[0], d.Line)
	}
	if len(args) > 1 {
		set(m, &m.cfg.ChaosAuthors, config.List(args[1:]), d.Line)
	} else {
		m.comment(&m.cfg.Chaos, "authors.bind answers nodedns where CoreDNS listed its owners")
	}
}

// minimal maps `minimal`.
func (m *migrator) minimal(d *Directive) {
	m.noBlock(d)
	set(m, &m.cfg.MinimalResponses, true, d.Line, "forwarded answers are minimal in nodedns with or without it")
}

// headerFlags maps `header { query|response set|clear FLAGS... }`.
func (m *migrator) headerFlags(d *Directive) {
	h := &config.HeaderConfig{}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		var rules *config.HeaderRules
		switch strings.ToLower(o.Name) {
		case "query":
			rules = &h.Query
		case "response":
			rules = &h.Response
		}
		if rules == nil || len(oa) < 2 {
			m.drop(o.Line, "header %s: want query|response set|clear FLAGS; not carried", o.String())
			continue
		}
		flags := make(config.List, 0, len(oa)-1)
		for _, f := range oa[1:] {
			flags = append(flags, strings.ToLower(f))
		}
		switch strings.ToLower(oa[0]) {
		case "set":
			rules.Set = append(rules.Set, flags...)
		case "clear":
			rules.Clear = append(rules.Clear, flags...)
		default:
			m.drop(o.Line, "header %s: want set or clear; not carried", o.String())
		}
	}
	set(m, &m.cfg.Header, h, d.Line, "RD in replies is the client's whatever the rules say of a forwarded reply's (CoreDNS copies it from the upstream's)")
	if _, _, _, err := m.cfg.HeaderMasks(); err != nil {
		m.unset(&m.cfg.Header)
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
	}
}

// otherBlocks counts server blocks besides the root's (templates of the
// root block say so in a comment).
func countOtherBlocks(blocks []*block) int {
	n := 0
	for _, b := range blocks {
		if !b.root {
			n++
		}
	}
	return n
}
