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
)

type portKind int

const (
	portDNS   portKind = iota // 53, udp and tcp
	portAdmin                 // Config.AdminPort, tcp only, only when set
)

// ruleRow is one row of the rule table. Every row is rendered once per
// local IP and protocol.
type ruleRow struct {
	table, chain string
	dir          direction
	port         portKind
	target       string
	what         string // comment text after the prefix, before the address
}

// ruleTable is the complete rule set, in the order it is checked.
//
// NOTRACK keeps DNS flows out of conntrack: no table entries to exhaust and
// none of the insertion races behind the classic 5 s DNS timeouts. Because
// untracked packets match neither NEW nor ESTABLISHED, the filter ACCEPT
// rules let them through node firewalls that accept by conntrack state.
var ruleTable = []ruleRow{
	// Queries from pods arrive from outside and enter through PREROUTING.
	{"raw", "PREROUTING", toLocal, portDNS, "NOTRACK", "skip conntrack for queries to"},
	// Queries from host-network clients and the node itself start in OUTPUT.
	{"raw", "OUTPUT", toLocal, portDNS, "NOTRACK", "skip conntrack for local queries to"},
	// Answers leave through OUTPUT.
	{"raw", "OUTPUT", fromLocal, portDNS, "NOTRACK", "skip conntrack for answers from"},
	{"filter", "INPUT", toLocal, portDNS, "ACCEPT", "accept untracked queries to"},
	{"filter", "OUTPUT", fromLocal, portDNS, "ACCEPT", "accept untracked answers from"},
	// kubelet probes the admin endpoint from the node: both directions are
	// local, so OUTPUT sees them all.
	{"raw", "OUTPUT", toLocal, portAdmin, "NOTRACK", "skip conntrack for admin requests to"},
	{"raw", "OUTPUT", fromLocal, portAdmin, "NOTRACK", "skip conntrack for admin answers from"},
}

// rule is one rendered row: a rulespec for one address family.
type rule struct {
	v6      bool
	table   string
	chain   string
	comment string
	spec    []string // as passed to iptables after "-t table -I chain 1"
}

func (r rule) key() string { return r.table + "/" + r.chain }

func (r rule) String() string {
	fam := "iptables"
	if r.v6 {
		fam = "ip6tables"
	}
	return fmt.Sprintf("%s -t %s %s %s", fam, r.table, r.chain, strings.Join(quoteSpec(r.spec), " "))
}

// renderRules renders ruleTable for every local IP; rows for the admin port
// only when adminPort is set.
func renderRules(ips []netip.Addr, adminPort uint16) []rule {
	var out []rule
	for _, ip := range ips {
		for _, row := range ruleTable {
			port, protos := dnsPort, []string{"udp", "tcp"}
			if row.port == portAdmin {
				if adminPort == 0 {
					continue
				}
				port, protos = int(adminPort), []string{"tcp"}
			}
			for _, proto := range protos {
				addrFlag, portFlag := "-d", "--dport"
				if row.dir == fromLocal {
					addrFlag, portFlag = "-s", "--sport"
				}
				comment := fmt.Sprintf("%s%s %s %s/%d", commentPrefix, row.what, ip, proto, port)
				out = append(out, rule{
					v6:      ip.Is6(),
					table:   row.table,
					chain:   row.chain,
					comment: comment,
					spec: []string{
						"-p", proto,
						addrFlag, ip.String(),
						portFlag, strconv.Itoa(port),
						"-m", "comment", "--comment", comment,
						"-j", row.target,
					},
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
