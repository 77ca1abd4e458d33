// Package template answers questions from templates, as CoreDNS's template
// plugin (1.15): a template matches a class, a type, zones and regular
// expressions of the question name, and answers with records rendered from
// Go text/templates ({{ .Name }}, regex groups, ...), an rcode and an
// Extended DNS Error; a name in its zones that no regex matches falls
// through to the next template (and then the next stage) only where the
// template's fallthrough says so, else the answer is SERVFAIL. The common
// uses: dropping AAAA in IPv4-only clusters (`IN AAAA .` with rcode
// NOERROR), fixed addresses for a wildcard of names, NXDOMAIN for names
// matched. The pipeline asks it before static records and the cluster
// zone; it is a stage.Templates.
//
// Not carried: `var` and `expr` (expr-lang expressions) and `.Meta`
// (always ""; there is no metadata plugin).
package template

import (
	"bytes"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	gotmpl "text/template"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Config is one template directive.
type Config struct {
	// Class and Type of the questions it answers (IN, CH, ANY; A, AAAA,
	// ANY, ...); ANY matches every one.
	Class, Type string
	// Zones it answers in; default every name.
	Zones []string
	// Match are regular expressions (Go RE2) of the lower-case,
	// fully qualified name; the first that matches is the template's
	// match; default ".*".
	Match []string
	// Answer, Additional and Authority are records in presentation form,
	// each a Go text/template.
	Answer, Additional, Authority []string
	// Rcode of the answer; default NOERROR.
	Rcode string
	// EDE, when EDECode is set (HasEDE), is the Extended DNS Error the
	// answer carries, with EDEText.
	HasEDE  bool
	EDECode uint16
	EDEText string
	// Fallthrough: where a name of the zones no regex matches goes on
	// (Set false: nowhere, the answer is SERVFAIL; Set with no zones:
	// everywhere).
	Fallthrough    []string
	FallthroughSet bool
}

// maxRegexpLen bounds a regex (CoreDNS's bound).
const maxRegexpLen = 10000

type tmpl struct {
	zones      []string
	qclass     uint16
	qtype      uint16
	regex      []*regexp.Regexp
	answer     []*gotmpl.Template
	additional []*gotmpl.Template
	authority  []*gotmpl.Template
	rcode      int
	hasEDE     bool
	edeCode    uint16
	edeText    string
	fallSet    bool
	fall       []string // lower-case FQDNs; "." every name
	// fixed is the answer of a template that renders no record.
	fixed *dns.Msg
}

// Set is the templates of one configuration, in order; safe for
// concurrent use.
type Set struct {
	zones []string // every template's zones
	ts    []*tmpl
}

// New compiles the templates; errors name the template (from 1).
func New(cfgs []Config) (*Set, error) {
	s := &Set{}
	for i, c := range cfgs {
		t, err := compile(c)
		if err != nil {
			return nil, fmt.Errorf("template %d: %w", i+1, err)
		}
		for _, z := range t.zones {
			if !containsString(s.zones, z) {
				s.zones = append(s.zones, z)
			}
		}
		s.ts = append(s.ts, t)
	}
	return s, nil
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func compile(c Config) (*tmpl, error) {
	t := &tmpl{rcode: dns.RcodeSuccess, hasEDE: c.HasEDE, edeCode: c.EDECode, edeText: c.EDEText, fallSet: c.FallthroughSet}
	var ok bool
	if t.qclass, ok = dns.StringToClass[strings.ToUpper(c.Class)]; !ok {
		return nil, fmt.Errorf("class %q is not a DNS class", c.Class)
	}
	if t.qtype, ok = dns.StringToType[strings.ToUpper(c.Type)]; !ok {
		return nil, fmt.Errorf("type %q is not a DNS type", c.Type)
	}
	zones, err := canonZones(c.Zones)
	if err != nil {
		return nil, err
	}
	if t.zones = zones; len(t.zones) == 0 {
		t.zones = []string{"."}
	}
	if t.fall, err = canonZones(c.Fallthrough); err != nil {
		return nil, fmt.Errorf("fallthrough: %w", err)
	}
	if t.fallSet && len(t.fall) == 0 {
		t.fall = []string{"."}
	}
	for _, r := range c.Match {
		if len(r) > maxRegexpLen {
			return nil, fmt.Errorf("match: a regex of %d bytes: want at most %d", len(r), maxRegexpLen)
		}
		re, err := regexp.Compile(r)
		if err != nil {
			return nil, fmt.Errorf("match %q: %w", r, err)
		}
		t.regex = append(t.regex, re)
	}
	if len(t.regex) == 0 {
		t.regex = []*regexp.Regexp{regexp.MustCompile(".*")}
	}
	if c.Rcode != "" {
		if t.rcode, ok = dns.StringToRcode[strings.ToUpper(c.Rcode)]; !ok {
			return nil, fmt.Errorf("rcode %q is not an rcode", c.Rcode)
		}
	}
	for _, sec := range []struct {
		name string
		in   []string
		out  *[]*gotmpl.Template
	}{{"answer", c.Answer, &t.answer}, {"additional", c.Additional, &t.additional}, {"authority", c.Authority, &t.authority}} {
		for _, text := range sec.in {
			tt, err := gotmpl.New(sec.name).Funcs(gotmpl.FuncMap{"parseInt": strconv.ParseUint}).Parse(text)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", sec.name, text, err)
			}
			*sec.out = append(*sec.out, tt)
		}
	}
	if len(t.answer)+len(t.additional)+len(t.authority) == 0 {
		t.fixed = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: t.rcode}}
	}
	return t, nil
}

func canonZones(zs []string) ([]string, error) {
	var out []string
	for _, z := range zs {
		n := dnsname.Canonical(strings.TrimSpace(z))
		if _, ok := dns.IsDomainName(n); !ok {
			return nil, fmt.Errorf("zone %q is not a domain name", z)
		}
		out = append(out, n)
	}
	return out, nil
}

// Data is what a record template reads (CoreDNS's fields): the zone that
// matched, the name (lower-case), the regex and its matches (Match by
// index, Group by index and name), the class and type (the template's
// when the question's is ANY), the question, the query, the client's
// address; Var is always empty (no var directives) and Meta "".
type Data struct {
	Zone     string
	Name     string
	Regex    string
	Match    []string
	Group    map[string]string
	Class    string
	Type     string
	Message  *dns.Msg
	Question *dns.Question
	Remote   string
	Var      map[string]any
}

// Meta is CoreDNS's metadata lookup: there is no metadata here.
func (*Data) Meta(string) string { return "" }

// Lookup implements stage.Templates, as CoreDNS's handler: a name outside
// every template's zones is not its own; else each template in turn whose
// zone, class and type fit tries its regexes: the first match answers; a
// template without a match ends the search with SERVFAIL unless its
// fallthrough covers the name.
func (s *Set) Lookup(name string, qtype, qclass uint16, client netip.Addr, id uint16) (stage.TemplateAnswer, bool) {
	if !dnsname.InZones(name, s.zones) {
		return stage.TemplateAnswer{}, false
	}
	for _, t := range s.ts {
		zone := longest(name, t.zones)
		if zone == "" {
			continue
		}
		if t.qclass != dns.ClassANY && qclass != dns.ClassANY && qclass != t.qclass ||
			t.qtype != dns.TypeANY && qtype != dns.TypeANY && qtype != t.qtype {
			continue
		}
		re := t.firstMatch(name)
		if re == nil {
			if t.fallSet && dnsname.InZones(name, t.fall) {
				continue
			}
			return stage.TemplateAnswer{Msg: servfail, Fixed: true}, true
		}
		return t.answerFor(re, zone, name, qtype, qclass, client, id), true
	}
	return stage.TemplateAnswer{}, false
}

// servfail is the answer of a template that matches no regex for a name
// of its zones without fallthrough, and of one that fails to render.
var servfail = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}

func (t *tmpl) firstMatch(name string) *regexp.Regexp {
	for _, re := range t.regex {
		if re.MatchString(name) {
			return re
		}
	}
	return nil
}

// longest is the longest of zones holding name, or "".
func longest(name string, zones []string) string {
	best := ""
	for _, z := range zones {
		if dnsname.InZone(name, z) && len(z) > len(best) {
			best = z
		}
	}
	return best
}

// answerFor renders t's answer for name, matched by re.
func (t *tmpl) answerFor(re *regexp.Regexp, zone, name string, qtype, qclass uint16, client netip.Addr, id uint16) stage.TemplateAnswer {
	a := stage.TemplateAnswer{HasEDE: t.hasEDE, EDECode: t.edeCode, EDEText: t.edeText}
	if t.rcode == dns.RcodeServerFailure {
		a.Msg, a.Fixed, a.HasEDE = servfail, true, false
		return a
	}
	if t.fixed != nil {
		a.Msg, a.Fixed = t.fixed, true
		return a
	}
	q := dns.Question{Name: name, Qtype: qtype, Qclass: qclass}
	d := &Data{Zone: zone, Name: name, Regex: re.String(), Class: dns.ClassToString[qclass], Type: dns.TypeToString[qtype],
		Question: &q, Remote: client.Unmap().String(),
		Message: &dns.Msg{MsgHdr: dns.MsgHdr{Id: id, RecursionDesired: true}, Question: []dns.Question{q}}}
	if qclass == dns.ClassANY {
		d.Class = dns.ClassToString[t.qclass]
	}
	if qtype == dns.TypeANY {
		d.Type = dns.TypeToString[t.qtype]
	}
	matches := re.FindStringSubmatch(name)
	d.Match = matches
	d.Group = make(map[string]string, 2*len(matches))
	for i, m := range matches {
		d.Group[strconv.Itoa(i)] = m
	}
	for i, g := range re.SubexpNames() {
		if g != "" && i < len(matches) {
			d.Group[g] = matches[i]
		}
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: t.rcode}}
	var err error
	if m.Answer, err = render(t.answer, d); err != nil {
		return stage.TemplateAnswer{Msg: servfail, Fixed: true}
	}
	if m.Extra, err = render(t.additional, d); err != nil {
		return stage.TemplateAnswer{Msg: servfail, Fixed: true}
	}
	if m.Ns, err = render(t.authority, d); err != nil {
		return stage.TemplateAnswer{Msg: servfail, Fixed: true}
	}
	if qtype == dns.TypeA || qtype == dns.TypeAAAA {
		for _, rr := range m.Answer {
			if cn, ok := rr.(*dns.CNAME); ok {
				a.Targets = append(a.Targets, strings.ToLower(cn.Target))
			}
		}
	}
	a.Msg = m
	return a
}

// render executes each template with d and parses the record it writes.
func render(ts []*gotmpl.Template, d *Data) ([]dns.RR, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]dns.RR, 0, len(ts))
	var b bytes.Buffer
	for _, t := range ts {
		b.Reset()
		if err := t.Execute(&b, d); err != nil {
			return nil, err
		}
		rr, err := dns.NewRR(b.String())
		if err != nil {
			return nil, err
		}
		if rr == nil {
			return nil, fmt.Errorf("template %q wrote no record", t.Root.String())
		}
		out = append(out, rr)
	}
	return out, nil
}
