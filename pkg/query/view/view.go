// Package view reads and evaluates the conditions of CoreDNS's view
// plugin (`view NAME { expr EXPRESSION }`): the simple forms of its
// expr-lang expressions, over the client's address and the question.
//
// Carried: client_ip(), name(), type(), class() and proto(); compared
// with == and != to a string, `in` a list of strings (`not in`), name()
// `matches` a Go regular expression (expr-lang's are Go's too);
// incidr(client_ip(), 'CIDR'); true and false; combined with && (and),
// || (or), ! (not) and parentheses. Anything else (port(), size(), do(),
// bufsize(), id(), opcode(), server_ip(), server_port(), metadata(),
// numbers, arithmetic, other operators) is refused by Parse with an error
// naming it: a condition is never guessed at.
//
// An Expr is read once; Match runs on the socket's reader for every query
// a view could take: it allocates nothing (a regular expression's match
// takes what Go's regexp takes, nothing in steady state).
package view

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// MaxLen bounds an expression's length; maxDepth its nesting.
const (
	MaxLen   = 4096
	maxDepth = 32
)

// Query is what a condition is asked about: the client's address and the
// question as asked (the name lower-case and fully qualified, as CoreDNS's
// name() has it).
type Query struct {
	Client      netip.Addr
	Name        string
	Type, Class uint16
	TCP         bool
}

// Expr is a condition read by Parse.
type Expr struct {
	src  string
	root *node
}

// String is the expression as written.
func (e *Expr) String() string { return e.src }

// Match reports whether the condition holds for q.
func (e *Expr) Match(q *Query) bool { return e.root.eval(q) }

// Holds is Match for the query of these fields (stage.Condition).
func (e *Expr) Holds(client netip.Addr, name string, qtype, qclass uint16, tcp bool) bool {
	q := Query{Client: client, Name: name, Type: qtype, Class: qclass, TCP: tcp}
	return e.root.eval(&q)
}

// What a node is.
type kind uint8

const (
	kConst  kind = iota // b
	kAnd                // l && r
	kOr                 // l || r
	kNot                // !l
	kInCIDR             // the client in pfx
	kEq                 // field == the value (neg: !=)
	kIn                 // field in the values (neg: not in)
	kMatch              // name matches re
)

// field is what a comparison reads of the query.
type field uint8

const (
	fClientIP field = iota + 1
	fName
	fType
	fClass
	fProto
)

var fieldNames = map[string]field{"client_ip": fClientIP, "name": fName, "type": fType, "class": fClass, "proto": fProto}

// value is a string literal read for a field: an address, a name, a type
// or class number, a protocol. ok false: no query has it (a type name
// CoreDNS would not print, an address that is none), so == never holds.
type value struct {
	ip  netip.Addr
	s   string
	num uint16
	tcp bool
	ok  bool
}

type node struct {
	kind   kind
	b      bool
	neg    bool
	l, r   *node
	field  field
	values []value
	pfx    netip.Prefix
	re     *regexp.Regexp
}

func (n *node) eval(q *Query) bool {
	switch n.kind {
	case kConst:
		return n.b
	case kAnd:
		return n.l.eval(q) && n.r.eval(q)
	case kOr:
		return n.l.eval(q) || n.r.eval(q)
	case kNot:
		return !n.l.eval(q)
	case kInCIDR:
		return q.Client.IsValid() && n.pfx.Contains(q.Client.Unmap())
	case kMatch:
		return n.re.MatchString(q.Name)
	case kEq, kIn:
		for i := range n.values {
			if n.values[i].holds(n.field, q) {
				return !n.neg
			}
		}
		return n.neg
	}
	return false
}

func (v *value) holds(f field, q *Query) bool {
	if !v.ok {
		return false
	}
	switch f {
	case fClientIP:
		return q.Client.Unmap() == v.ip
	case fName:
		return q.Name == v.s
	case fType:
		return q.Type == v.num
	case fClass:
		return q.Class == v.num
	case fProto:
		return q.TCP == v.tcp
	}
	return false
}

// readValue reads the string literal s as a value of f, as CoreDNS's
// functions print theirs: client_ip() an address without brackets,
// name() lower-case with the final dot, type() and class() their names
// (TYPE65280 for one without), proto() udp or tcp.
func readValue(f field, s string) value {
	v := value{s: s}
	switch f {
	case fClientIP:
		ip, err := netip.ParseAddr(s)
		v.ip, v.ok = ip.Unmap(), err == nil && ip.Zone() == ""
	case fName:
		v.ok = true
	case fType:
		if t, ok := dns.StringToType[s]; ok {
			v.num, v.ok = t, true
		} else if n, ok := numbered(s, "TYPE"); ok && dns.TypeToString[n] == "" {
			v.num, v.ok = n, true
		}
	case fClass:
		if c, ok := dns.StringToClass[s]; ok {
			v.num, v.ok = c, true
		} else if n, ok := numbered(s, "CLASS"); ok && dns.ClassToString[n] == "" {
			v.num, v.ok = n, true
		}
	case fProto:
		v.tcp, v.ok = s == "tcp", s == "tcp" || s == "udp"
	}
	return v
}

func numbered(s, prefix string) (uint16, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || rest == "" || rest[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 16)
	return uint16(n), err == nil
}

// Parse reads expression s; the error names what is not carried, or what
// does not parse.
func Parse(s string) (*Expr, error) {
	if len(s) > MaxLen {
		return nil, fmt.Errorf("expression of %d bytes: want at most %d", len(s), MaxLen)
	}
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.i < len(p.toks) {
		return nil, fmt.Errorf("unexpected %s after a whole expression", p.toks[p.i])
	}
	return &Expr{src: s, root: n}, nil
}
