// Package rewrite rewrites query names before they are resolved and maps
// the answer's names back, so that clients see the name they asked, as
// CoreDNS's `rewrite [stop|continue] name TYPE FROM TO answer auto` does.
//
// Supported, with CoreDNS 1.15's semantics:
//   - Match types exact (the default), prefix, suffix, substring and regex
//     (Go RE2 syntax, matched against the lower-case name with its trailing
//     dot; TO may use {0} for the whole match and {1}.. for captures).
//   - FROM and TO are lower-cased and, except a regex FROM, made fully
//     qualified (a trailing dot is added), as CoreDNS normalizes them: so a
//     prefix or substring matches up to a label's end only when written
//     with one, e.g. prefix "foo." is what CoreDNS's `prefix foo` becomes.
//   - Rules apply in order; a matching rule stops the list unless its mode
//     is continue, in which case the next rules see the rewritten name.
//   - Answers: a suffix rule maps every name in the reply ending with TO
//     back to FROM; every other rule maps the rewritten name, and names
//     below it, back to the name it rewrote. Owner names and the names in
//     CNAME, DNAME, NS, PTR, MX, SRV, NAPTR and SOA (MNAME) are mapped, in
//     the answer, authority and additional sections; the question is the
//     client's own.
//   - A rewrite that produces something that is not a domain name answers
//     SERVFAIL.
//
// Not supported: answer rewrites other than auto (`answer name`, `answer
// value`: answers are always mapped back), regex `metadata`, and the
// rewrite fields other than name (type, class, edns0, ttl, cname, rcode).
//
// A name no rule matches costs string comparisons (and one regexp match
// per regex rule) and allocates nothing; a rewritten query takes the
// ordinary message path.
package rewrite

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Match types.
const (
	Exact     = "exact"
	Prefix    = "prefix"
	Suffix    = "suffix"
	Substring = "substring"
	Regex     = "regex"
)

// maxRegexLen bounds a regex FROM (as CoreDNS does), so a configuration
// cannot make the compiler use unbounded memory.
const maxRegexLen = 10000

// Rule is one name rewrite.
type Rule struct {
	// Type is the match type; "" is exact.
	Type string
	// From is matched against the query name; To replaces it.
	From, To string
	// Continue applies the following rules to the rewritten name too
	// (CoreDNS's `rewrite continue`); otherwise a match ends the list.
	Continue bool
}

// Rewriter applies a list of rules. It is immutable and safe for
// concurrent use.
type Rewriter struct {
	rules []rule
}

type rule struct {
	kind     string
	from, to string
	re       *regexp.Regexp
	// lit is a literal every match of re contains: names without it are
	// passed over without running the regexp (which costs about a
	// microsecond per name, more than the rest of a cache hit).
	lit  string
	cont bool
}

// New validates rules; an error names the rule (1-based) and the value.
func New(rules []Rule) (*Rewriter, error) {
	rw := &Rewriter{}
	for i, r := range rules {
		c, err := compile(r)
		if err != nil {
			return nil, fmt.Errorf("rewrite rule %d: %w", i+1, err)
		}
		rw.rules = append(rw.rules, c)
	}
	return rw, nil
}

func compile(r Rule) (rule, error) {
	kind := strings.ToLower(strings.TrimSpace(r.Type))
	if kind == "" {
		kind = Exact
	}
	if r.From == "" || r.To == "" {
		return rule{}, fmt.Errorf("%s rule needs both from and to (from %q, to %q)", kind, r.From, r.To)
	}
	c := rule{kind: kind, cont: r.Continue, to: normalize(r.To)}
	switch kind {
	case Exact:
		c.from = normalize(r.From)
		for _, n := range []string{c.from, c.to} {
			if !isName(n) {
				return rule{}, fmt.Errorf("exact rule: %q is not a domain name", n)
			}
		}
	case Prefix, Suffix, Substring:
		c.from = normalize(r.From)
	case Regex:
		if len(r.From) > maxRegexLen {
			return rule{}, fmt.Errorf("regex of %d bytes: at most %d", len(r.From), maxRegexLen)
		}
		re, err := regexp.Compile(r.From)
		if err != nil {
			return rule{}, fmt.Errorf("regex %q: %w", r.From, err)
		}
		if n := highestGroup(c.to); n > re.NumSubexp() {
			return rule{}, fmt.Errorf("to %q uses {%d} but regex %q has %d capture groups", r.To, n, r.From, re.NumSubexp())
		}
		c.from, c.re, c.lit = r.From, re, requiredLiteral(r.From)
	default:
		return rule{}, fmt.Errorf("type %q: want exact, prefix, suffix, substring or regex", r.Type)
	}
	return c, nil
}

// normalize lower-cases s and makes it fully qualified, as CoreDNS's
// plugin.Name.Normalize.
func normalize(s string) string { return strings.ToLower(dns.Fqdn(strings.TrimSpace(s))) }

func isName(n string) bool {
	if n == "." {
		return true
	}
	_, ok := dns.IsDomainName(n)
	return ok && !strings.HasPrefix(n, ".") && !strings.Contains(n, "..")
}

// highestGroup returns the largest {n} used in s (0 when none).
func highestGroup(s string) int {
	hi := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			break
		}
		if n, err := strconv.Atoi(s[i+1 : i+j]); err == nil && n > hi {
			hi = n
		}
	}
	return hi
}

// apply rewrites name if the rule matches it.
func (r *rule) apply(name string) (string, bool) {
	switch r.kind {
	case Exact:
		if name == r.from {
			return r.to, true
		}
	case Prefix:
		if after, ok := strings.CutPrefix(name, r.from); ok {
			return r.to + after, true
		}
	case Suffix:
		if before, ok := strings.CutSuffix(name, r.from); ok {
			return before + r.to, true
		}
	case Substring:
		if strings.Contains(name, r.from) {
			return strings.ReplaceAll(name, r.from, r.to), true
		}
	case Regex:
		if r.lit != "" && !strings.Contains(name, r.lit) || !r.re.MatchString(name) {
			return "", false
		}
		groups := r.re.FindStringSubmatch(name)
		s := r.to
		for i := len(groups) - 1; i >= 0; i-- { // {10} before {1}
			s = strings.ReplaceAll(s, "{"+strconv.Itoa(i)+"}", groups[i])
		}
		return s, true
	}
	return "", false
}

// Len is the number of rules.
func (rw *Rewriter) Len() int {
	if rw == nil {
		return 0
	}
	return len(rw.rules)
}

// Rewrite applies the rules to name (a lower-case FQDN). ok is false when
// none matched. Otherwise to is the name to resolve, and revert returns a
// copy of a reply for it with the names mapped back to those the client
// asked (Revert.Msg). err says the rewritten name is not a domain name:
// the query gets SERVFAIL. This is the shape of stage.Rewriter.
func (rw *Rewriter) Rewrite(name string) (to string, revert func(*dns.Msg) *dns.Msg, ok bool, err error) {
	to, rv, ok, err := rw.Apply(name)
	if !ok || err != nil {
		return "", nil, ok, err
	}
	return to, rv.Msg, true, nil
}

// Apply is Rewrite with the Revert itself.
func (rw *Rewriter) Apply(name string) (to string, revert *Revert, ok bool, err error) {
	if rw == nil {
		return "", nil, false, nil
	}
	cur := name
	for i := range rw.rules {
		r := &rw.rules[i]
		next, hit := r.apply(cur)
		if !hit {
			continue
		}
		if !isName(next) {
			return "", nil, false, fmt.Errorf("rewrite of %s gave %q, not a domain name", name, next)
		}
		if revert == nil {
			revert = &Revert{}
		}
		if r.kind == Suffix {
			revert.maps = append(revert.maps, mapping{suffix: true, from: r.to, to: r.from})
		} else {
			revert.maps = append(revert.maps, mapping{from: next, to: cur})
		}
		cur = next
		if !r.cont {
			break
		}
	}
	if revert == nil {
		return "", nil, false, nil
	}
	return cur, revert, true, nil
}

// Revert maps the names of a reply back, undoing the rewrites of one query
// in reverse order.
type Revert struct {
	maps []mapping
}

// mapping turns from into to: the name itself or, for a suffix rule, any
// name ending with it; otherwise also names below it.
type mapping struct {
	suffix   bool
	from, to string
}

func (m mapping) apply(name string) string {
	if m.suffix {
		if before, ok := strings.CutSuffix(name, m.from); ok {
			return before + m.to
		}
		return name
	}
	if name == m.from {
		return m.to
	}
	if i := len(name) - len(m.from); i > 0 && name[i-1] == '.' && name[i:] == m.from {
		return name[:i] + m.to
	}
	return name
}

// Name maps one name back (compared case-insensitively).
func (rv *Revert) Name(name string) string {
	lower := strings.ToLower(name)
	out := lower
	for i := len(rv.maps) - 1; i >= 0; i-- {
		out = rv.maps[i].apply(out)
	}
	if out == lower {
		return name
	}
	return out
}

// Msg returns m with its records' names mapped back. m is not modified
// (stages share their messages): changed records are copies.
func (rv *Revert) Msg(m *dns.Msg) *dns.Msg {
	out := new(dns.Msg)
	*out = *m
	out.Answer = rv.rrs(m.Answer)
	out.Ns = rv.rrs(m.Ns)
	out.Extra = rv.rrs(m.Extra)
	return out
}

func (rv *Revert) rrs(in []dns.RR) []dns.RR {
	var out []dns.RR
	for i, rr := range in {
		c := rv.rr(rr)
		if c == rr && out == nil {
			continue
		}
		if out == nil {
			out = make([]dns.RR, len(in))
			copy(out, in[:i])
		}
		out[i] = c
	}
	if out == nil {
		return in
	}
	return out
}

// rr returns rr itself when nothing in it maps, else a changed copy.
func (rv *Revert) rr(rr dns.RR) dns.RR {
	if rr.Header().Rrtype == dns.TypeOPT {
		return rr
	}
	owner := rv.Name(rr.Header().Name)
	var val string
	if f := nameField(rr); f != nil {
		val = *f
	}
	newVal := val
	if val != "" {
		newVal = rv.Name(val)
	}
	if owner == rr.Header().Name && newVal == val {
		return rr
	}
	c := dns.Copy(rr)
	c.Header().Name = owner
	if newVal != val {
		*nameField(c) = newVal
	}
	return c
}

// nameField points at the domain name a record carries in its data, in
// rr itself; nil for types that carry none.
func nameField(rr dns.RR) *string {
	switch r := rr.(type) {
	case *dns.CNAME:
		return &r.Target
	case *dns.DNAME:
		return &r.Target
	case *dns.NS:
		return &r.Ns
	case *dns.PTR:
		return &r.Ptr
	case *dns.MX:
		return &r.Mx
	case *dns.SRV:
		return &r.Target
	case *dns.NAPTR:
		return &r.Replacement
	case *dns.SOA:
		return &r.Ns
	}
	return nil
}

// requiredLiteral returns the longest literal that every match of pattern
// contains, or "": the literals reached from the top through
// concatenations, captures and repetitions of at least one. Literals
// matched case-insensitively are left out (a name is lower-case, the
// pattern's literal may not be).
func requiredLiteral(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return ""
	}
	best := ""
	var walk func(r *syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		switch r.Op {
		case syntax.OpLiteral:
			if r.Flags&syntax.FoldCase == 0 && len(string(r.Rune)) > len(best) {
				best = string(r.Rune)
			}
		case syntax.OpConcat, syntax.OpCapture, syntax.OpPlus:
			for _, sub := range r.Sub {
				walk(sub)
			}
		case syntax.OpRepeat:
			if r.Min >= 1 {
				walk(r.Sub[0])
			}
		}
	}
	walk(re.Simplify())
	return best
}
