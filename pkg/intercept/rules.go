package intercept

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// commentPrefix starts the comment of every rule this package writes.
// Cleanup removes every rule carrying it; nothing else relies on it.
const commentPrefix = "nodedns: "

// dnsPort is the port intercepted on every local IP.
const dnsPort = 53

type direction int

const (
	toLocal   direction = iota // -d IP --dport PORT: packets to the agent
	fromLocal                  // -s IP --sport PORT: packets from the agent
	// Both directions of a flow the fallback chain redirected: its
	// conntrack entry was DNATed from IP:PORT.
	redirected
)

type portKind int

const (
	portDNS   portKind = iota // 53, udp and tcp
	portAdmin                 // Config.AdminPort, tcp only, only when set
)

// rowKind says which local IPs a row is rendered for, by their ipMode.
type rowKind int

const (
	rowAlways   rowKind = iota // every local IP
	rowServed                  // every local IP; -m socket unless modePlain
	rowFallback                // local IPs in modeDNAT only
)

// ipMode is how queries to one local IP are handled while no process holds
// a socket bound to it (see fallback.go).
type ipMode int

const (
	// modePlain: NOTRACK whatever happens; with no socket the kernel
	// answers ICMP port unreachable (the behaviour without a fallback).
	modePlain ipMode = iota
	// modeServed: NOTRACK only while a local socket is bound to the
	// address; otherwise the query is tracked and the nat table sees it
	// (for a Service ClusterIP, kube-proxy's own DNAT).
	modeServed
	// modeDNAT: modeServed, and our nat rules send the tracked query to
	// the fallback chain.
	modeDNAT
)

// ruleRow is one row of the rule table. Every row is rendered once per
// local IP and protocol.
type ruleRow struct {
	table, chain string
	dir          direction
	port         portKind
	target       string
	what         string // comment text after the prefix, before the address
	kind         rowKind
}

// ruleTable is the complete rule set, in the order it is checked.
//
// NOTRACK keeps DNS flows out of conntrack: no table entries to exhaust and
// none of the insertion races behind the classic 5 s DNS timeouts. Because
// untracked packets match neither NEW nor ESTABLISHED, the filter ACCEPT
// rules let them through node firewalls that accept by conntrack state.
//
// With the fallback (fallback.go) the PREROUTING NOTRACK applies only
// while a local socket is bound to the address (-m socket, which ignores
// sockets bound to the wildcard address): with none, the query stays
// tracked, so the nat table sees it and the rows of kind rowFallback send
// it to the fallback chain, masquerade it (the target may sit on the
// client's own bridge, which would otherwise answer the client directly,
// from the wrong address) and let both directions through a FORWARD
// policy that drops. The socket match is not allowed in OUTPUT, so queries
// of host-network clients have no fallback.
var ruleTable = []ruleRow{
	// Queries from pods arrive from outside and enter through PREROUTING.
	{"raw", "PREROUTING", toLocal, portDNS, "NOTRACK", "skip conntrack for queries to", rowServed},
	// Queries from host-network clients and the node itself start in OUTPUT.
	{"raw", "OUTPUT", toLocal, portDNS, "NOTRACK", "skip conntrack for local queries to", rowAlways},
	// Answers leave through OUTPUT.
	{"raw", "OUTPUT", fromLocal, portDNS, "NOTRACK", "skip conntrack for answers from", rowAlways},
	{"filter", "INPUT", toLocal, portDNS, "ACCEPT", "accept untracked queries to", rowAlways},
	{"filter", "OUTPUT", fromLocal, portDNS, "ACCEPT", "accept untracked answers from", rowAlways},
	// kubelet probes the admin endpoint from the node: both directions are
	// local, so OUTPUT sees them all.
	{"raw", "OUTPUT", toLocal, portAdmin, "NOTRACK", "skip conntrack for admin requests to", rowAlways},
	{"raw", "OUTPUT", fromLocal, portAdmin, "NOTRACK", "skip conntrack for admin answers from", rowAlways},
	// The fallback: only tracked queries (no socket served them) reach
	// the nat table.
	{"nat", "PREROUTING", toLocal, portDNS, fallbackChain, "fallback for unserved queries to", rowFallback},
	{"nat", "POSTROUTING", redirected, portDNS, "MASQUERADE", "masquerade fallback queries to", rowFallback},
	{"filter", "FORWARD", redirected, portDNS, "ACCEPT", "accept fallback flows of", rowFallback},
}

// rule is one rendered row: a rulespec for one address family.
type rule struct {
	v6      bool
	table   string
	chain   string
	comment string
	// served: the PREROUTING NOTRACK, conditional on a local socket
	// when spec holds socketMatch.
	served bool
	// fallback: a rule of the fallback (rowFallback), wanted only for
	// local IPs in modeDNAT.
	fallback bool
	spec     []string // as passed to iptables after "-t table -I chain 1"
}

// socketMatch matches packets for which a local socket exists (xt_socket).
// Without --nowildcard it ignores sockets bound to the wildcard address, so
// only a socket bound to the local IP itself (or a connection of one)
// counts.
var socketMatch = []string{"-m", "socket"}

func (r rule) key() string { return r.table + "/" + r.chain }

func (r rule) String() string {
	fam := "iptables"
	if r.v6 {
		fam = "ip6tables"
	}
	return fmt.Sprintf("%s -t %s %s %s", fam, r.table, r.chain, strings.Join(quoteSpec(r.spec), " "))
}

// renderRules renders ruleTable for every local IP without the fallback
// (modePlain); rows for the admin port only when adminPort is set.
func renderRules(ips []netip.Addr, adminPort uint16) []rule {
	return renderRulesMode(ips, adminPort, func(netip.Addr) ipMode { return modePlain })
}

// renderRulesMode renders ruleTable for every local IP in the mode mode
// gives it; rows for the admin port only when adminPort is set.
func renderRulesMode(ips []netip.Addr, adminPort uint16, mode func(netip.Addr) ipMode) []rule {
	var out []rule
	for _, ip := range ips {
		m := mode(ip)
		for _, row := range ruleTable {
			if row.kind == rowFallback && m != modeDNAT {
				continue
			}
			port, protos := dnsPort, []string{"udp", "tcp"}
			if row.port == portAdmin {
				if adminPort == 0 {
					continue
				}
				port, protos = int(adminPort), []string{"tcp"}
			}
			for _, proto := range protos {
				comment := fmt.Sprintf("%s%s %s %s/%d", commentPrefix, row.what, ip, proto, port)
				spec := []string{"-p", proto}
				switch row.dir {
				case toLocal:
					spec = append(spec, "-d", ip.String(), "--dport", strconv.Itoa(port))
				case fromLocal:
					spec = append(spec, "-s", ip.String(), "--sport", strconv.Itoa(port))
				case redirected:
					spec = append(spec, "-m", "conntrack", "--ctstate", "DNAT",
						"--ctorigdst", ip.String(), "--ctorigdstport", strconv.Itoa(port))
				}
				if row.kind == rowServed && m != modePlain {
					spec = append(spec, socketMatch...)
				}
				spec = append(spec, "-m", "comment", "--comment", comment, "-j", row.target)
				out = append(out, rule{
					v6:       ip.Is6(),
					table:    row.table,
					chain:    row.chain,
					comment:  comment,
					served:   row.kind == rowServed,
					fallback: row.kind == rowFallback,
					spec:     spec,
				})
			}
		}
	}
	return out
}

// countComment counts the rules in lines (iptables -S output) whose comment
// is exactly comment.
func countComment(lines []string, comment string) int {
	n := 0
	for _, l := range lines {
		if c, ok := lineComment(l); ok && c == comment {
			n++
		}
	}
	return n
}

// lineComment returns the --comment value of an iptables -S / -save line.
func lineComment(line string) (string, bool) {
	if !strings.Contains(line, "--comment") {
		return "", false
	}
	words, err := splitRuleLine(line)
	if err != nil {
		return "", false
	}
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "--comment" {
			return words[i+1], true
		}
	}
	return "", false
}

// splitRuleLine splits one line of iptables -S / -save output into words,
// undoing the quoting iptables applies to comments: double quotes, with
// backslash escaping a quote or backslash inside them.
func splitRuleLine(line string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
		quoted bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\'):
			i++
			cur.WriteByte(line[i])
		case quoted && c == '"':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '"':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in rule %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// quoteSpec quotes the words of a rulespec the way iptables -S prints them.
func quoteSpec(spec []string) []string {
	out := make([]string, len(spec))
	for i, w := range spec {
		if w == "" || strings.ContainsAny(w, " \t\"\\") {
			w = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w) + `"`
		}
		out[i] = w
	}
	return out
}

// savedRule is one of our rules found in iptables-save output.
type savedRule struct {
	table, chain string
	comment      string
	spec         []string
}

// ourSavedRules returns the rules in iptables-save output whose comment
// starts with commentPrefix and, if match is not nil, satisfies match.
func ourSavedRules(save []byte, match func(comment string) bool) []savedRule {
	var (
		out   []savedRule
		table string
	)
	for _, line := range strings.Split(string(save), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			c, ok := lineComment(line)
			if !ok || !strings.HasPrefix(c, commentPrefix) || table == "" || (match != nil && !match(c)) {
				continue
			}
			words, err := splitRuleLine(line)
			if err != nil || len(words) < 3 {
				continue
			}
			out = append(out, savedRule{table: table, chain: words[1], comment: c, spec: words[2:]})
		}
	}
	return out
}

// hasSavedChain reports whether iptables-save output declares chain in
// table.
func hasSavedChain(save []byte, table, chain string) bool {
	cur := ""
	for _, line := range strings.Split(string(save), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			cur = line[1:]
		case cur == table && strings.HasPrefix(line, ":"+chain+" "):
			return true
		}
	}
	return false
}
