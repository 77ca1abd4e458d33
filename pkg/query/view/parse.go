package view

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

type tokKind uint8

const (
	tIdent tokKind = iota + 1
	tString
	tOp
)

type token struct {
	kind tokKind
	text string // an identifier or operator; a string's value
	pos  int
}

func (t token) String() string {
	switch t.kind {
	case tString:
		return fmt.Sprintf("string %q at %d", t.text, t.pos+1)
	case tIdent:
		return fmt.Sprintf("%q at %d", t.text, t.pos+1)
	}
	return fmt.Sprintf("%q at %d", t.text, t.pos+1)
}

// lex splits s into identifiers, string literals ('...' or "...", with
// backslash escapes) and operators.
func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{kind: tIdent, text: s[i:j], pos: i})
			i = j
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] != '\\' {
					b.WriteByte(s[j])
					continue
				}
				j++
				if j == len(s) {
					break
				}
				switch s[j] {
				case '\\', '\'', '"':
					b.WriteByte(s[j])
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				default:
					return nil, fmt.Errorf("escape \\%c at %d: not carried", s[j], j)
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("string at %d not closed", i+1)
			}
			out = append(out, token{kind: tString, text: b.String(), pos: i})
			i = j + 1
		case c >= '0' && c <= '9':
			return nil, fmt.Errorf("number at %d: not carried (no function this package carries returns one)", i+1)
		default:
			op := ""
			for _, o := range []string{"==", "!=", "&&", "||", "!", "(", ")", "[", "]", ","} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("%q at %d: not carried", s[i:i+1], i+1)
			}
			out = append(out, token{kind: tOp, text: op, pos: i})
			i += len(op)
		}
	}
	return out, nil
}

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() (token, bool) {
	if p.i < len(p.toks) {
		return p.toks[p.i], true
	}
	return token{}, false
}

// accept consumes the next token when it is an operator or keyword of
// texts.
func (p *parser) accept(texts ...string) (string, bool) {
	t, ok := p.peek()
	if !ok || t.kind == tString {
		return "", false
	}
	for _, x := range texts {
		if t.text == x {
			p.i++
			return x, true
		}
	}
	return "", false
}

func (p *parser) expect(text string) error {
	if _, ok := p.accept(text); ok {
		return nil
	}
	if t, ok := p.peek(); ok {
		return fmt.Errorf("want %q, found %s", text, t)
	}
	return fmt.Errorf("want %q, found the end", text)
}

func deep(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested more than %d deep", maxDepth)
	}
	return nil
}

func (p *parser) or(depth int) (*node, error) {
	if err := deep(depth); err != nil {
		return nil, err
	}
	l, err := p.and(depth + 1)
	if err != nil {
		return nil, err
	}
	for {
		if _, ok := p.accept("||", "or"); !ok {
			return l, nil
		}
		r, err := p.and(depth + 1)
		if err != nil {
			return nil, err
		}
		l = &node{kind: kOr, l: l, r: r}
	}
}

func (p *parser) and(depth int) (*node, error) {
	l, err := p.not(depth + 1)
	if err != nil {
		return nil, err
	}
	for {
		if _, ok := p.accept("&&", "and"); !ok {
			return l, nil
		}
		r, err := p.not(depth + 1)
		if err != nil {
			return nil, err
		}
		l = &node{kind: kAnd, l: l, r: r}
	}
}

func (p *parser) not(depth int) (*node, error) {
	if err := deep(depth); err != nil {
		return nil, err
	}
	if _, ok := p.accept("!", "not"); ok {
		n, err := p.not(depth + 1)
		if err != nil {
			return nil, err
		}
		return &node{kind: kNot, l: n}, nil
	}
	return p.cmp(depth + 1)
}

// operand is one side of a comparison: a condition, a function's value,
// a string or a list of strings.
type operand struct {
	n     *node
	field field
	str   *token
	list  []string
	at    token
}

func (p *parser) cmp(depth int) (*node, error) {
	l, err := p.operand(depth + 1)
	if err != nil {
		return nil, err
	}
	switch op, _ := p.accept("==", "!=", "matches", "in", "not"); op {
	case "":
		if t, ok := p.peek(); ok && t.kind == tIdent && l.n == nil {
			return nil, fmt.Errorf("operator %s: not carried (==, !=, in, not in, matches)", t)
		}
		if l.n == nil {
			return nil, fmt.Errorf("%s alone is not a condition: compare it", what(l))
		}
		return l.n, nil
	case "==", "!=":
		r, err := p.operand(depth + 1)
		if err != nil {
			return nil, err
		}
		f, s := l, r
		if f.field == 0 {
			f, s = r, l
		}
		if f.field == 0 || s.str == nil {
			return nil, fmt.Errorf("%s %s %s: not carried (a function of the query compared to a string)", what(l), op, what(r))
		}
		return &node{kind: kEq, neg: op == "!=", field: f.field, values: []value{readValue(f.field, s.str.text)}}, nil
	case "matches":
		r, err := p.operand(depth + 1)
		if err != nil {
			return nil, err
		}
		if l.field != fName || r.str == nil {
			return nil, fmt.Errorf("%s matches %s: not carried (name() matches a string)", what(l), what(r))
		}
		re, err := regexp.Compile(r.str.text)
		if err != nil {
			return nil, fmt.Errorf("matches %q: %w", r.str.text, err)
		}
		return &node{kind: kMatch, re: re}, nil
	default: // in, not in
		neg := op == "not"
		if neg {
			if _, ok := p.accept("in"); !ok {
				return nil, fmt.Errorf("not after %s: want not in", what(l))
			}
		}
		r, err := p.operand(depth + 1)
		if err != nil {
			return nil, err
		}
		if l.field == 0 || r.list == nil {
			return nil, fmt.Errorf("%s in %s: not carried (a function of the query in a list of strings)", what(l), what(r))
		}
		n := &node{kind: kIn, neg: neg, field: l.field}
		for _, s := range r.list {
			n.values = append(n.values, readValue(l.field, s))
		}
		return n, nil
	}
}

func what(o operand) string {
	switch {
	case o.field != 0:
		return fieldName(o.field) + "()"
	case o.str != nil:
		return fmt.Sprintf("%q", o.str.text)
	case o.list != nil:
		return "a list"
	}
	return "a condition"
}

func fieldName(f field) string {
	for k, v := range fieldNames {
		if v == f {
			return k
		}
	}
	return "?"
}

func (p *parser) operand(depth int) (operand, error) {
	if err := deep(depth); err != nil {
		return operand{}, err
	}
	t, ok := p.peek()
	if !ok {
		return operand{}, fmt.Errorf("the expression ends where a value is wanted")
	}
	p.i++
	switch {
	case t.kind == tString:
		return operand{str: &t, at: t}, nil
	case t.kind == tOp && t.text == "(":
		n, err := p.or(depth + 1)
		if err != nil {
			return operand{}, err
		}
		return operand{n: n, at: t}, p.expect(")")
	case t.kind == tOp && t.text == "[":
		var list []string
		for first := true; ; first = false {
			if _, ok := p.accept("]"); ok {
				return operand{list: append([]string{}, list...), at: t}, nil
			}
			if !first {
				if err := p.expect(","); err != nil {
					return operand{}, err
				}
			}
			s, ok := p.peek()
			if !ok || s.kind != tString {
				return operand{}, fmt.Errorf("a list holds strings only (at %d)", t.pos+1)
			}
			p.i++
			list = append(list, s.text)
		}
	case t.kind == tIdent && (t.text == "true" || t.text == "false"):
		return operand{n: &node{kind: kConst, b: t.text == "true"}, at: t}, nil
	case t.kind == tIdent:
		if err := p.expect("("); err != nil {
			return operand{}, fmt.Errorf("%s: not carried (only the functions client_ip, name, type, class, proto and incidr)", t)
		}
		if t.text == "incidr" {
			return p.incidr(t, depth)
		}
		f, ok := fieldNames[t.text]
		if !ok {
			return operand{}, fmt.Errorf("%s(): not carried (only client_ip, name, type, class, proto and incidr)", t.text)
		}
		if err := p.expect(")"); err != nil {
			return operand{}, fmt.Errorf("%s(): takes no argument: %w", t.text, err)
		}
		return operand{field: f, at: t}, nil
	}
	return operand{}, fmt.Errorf("%s: not carried here", t)
}

// incidr reads incidr(client_ip(), 'CIDR') (or a constant address).
func (p *parser) incidr(t token, depth int) (operand, error) {
	ip, err := p.operand(depth + 1)
	if err != nil {
		return operand{}, err
	}
	if err := p.expect(","); err != nil {
		return operand{}, err
	}
	cidr, err := p.operand(depth + 1)
	if err != nil {
		return operand{}, err
	}
	if err := p.expect(")"); err != nil {
		return operand{}, err
	}
	if cidr.str == nil {
		return operand{}, fmt.Errorf("incidr at %d: the network must be a string", t.pos+1)
	}
	pfx, err := netip.ParsePrefix(cidr.str.text)
	if err != nil {
		return operand{}, fmt.Errorf("incidr at %d: %q is not a network: %w", t.pos+1, cidr.str.text, err)
	}
	pfx = pfx.Masked()
	switch {
	case ip.field == fClientIP:
		return operand{n: &node{kind: kInCIDR, pfx: pfx}, at: t}, nil
	case ip.str != nil:
		// A constant: CoreDNS's incidr fails (false) on a string that is
		// no address.
		a, err := netip.ParseAddr(ip.str.text)
		return operand{n: &node{kind: kConst, b: err == nil && pfx.Contains(a.Unmap())}, at: t}, nil
	}
	return operand{}, fmt.Errorf("incidr(%s, ...): not carried (incidr(client_ip(), 'CIDR'))", what(ip))
}
