// Package migrate turns a CoreDNS Corefile (and optionally the kube-dns
// ConfigMap) into an equivalent nodedns configuration file: `nodedns
// migrate`. It owns the Corefile parser (corefile.go), the mapping of each
// directive to nodedns's keys (this file, directives.go) and the YAML it
// writes (emit.go).
//
// What cannot be carried (a plugin nodedns does not have, an option it
// cannot honour, a setting that would apply to only some zones where
// nodedns has one for all) is never silently lost: each is a Note naming
// the Corefile line and what the directive would have done. Where nodedns
// behaves differently by default, the output sets the Corefile's
// behaviour and says in a comment what nodedns would do otherwise.
//
// Limits: snippets and imports are not expanded (each is a note); one
// cluster index, one cache and one set of listen addresses serve every
// zone; the output uses this version's config keys (pkg/config), and an
// older agent warns about the keys it does not know and ignores them.
package migrate

import (
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cluster/kubedns"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// Note is one thing migrate says about a line of the Corefile (or, with
// File set, about a file of the kube-dns ConfigMap).
type Note struct {
	File string
	Line int
	Text string
}

// Options tune a migration.
type Options struct {
	// Env looks up environment variables ({$VAR} in the Corefile, and
	// KUBE_DNS_UPSTREAM_SERVICE_HOST for node-cache's
	// __PILLAR__CLUSTER__DNS__); nil: os.LookupEnv.
	Env func(string) (string, bool)
	// KubeDNS is the kube-dns ConfigMap (stubDomains,
	// upstreamNameservers) node-cache would have merged into the
	// Corefile; KubeDNSDir names where it was read, for messages.
	KubeDNS    *kubedns.Config
	KubeDNSDir string
	// ClusterDNS fills node-cache's __PILLAR__CLUSTER__DNS__ (the
	// kube-dns-upstream Service's ClusterIP), which node-cache fills at
	// start.
	ClusterDNS string
	// LocalIP is the agent's address when the Corefile binds none
	// (default 169.254.20.10, the node-local address).
	LocalIP string
	// Source names the Corefile in the output's header.
	Source string
}

// Result is a migration's outcome.
type Result struct {
	// YAML is the nodedns configuration file.
	YAML []byte
	// Dropped lists what could not be carried, by line.
	Dropped []Note
}

// DefaultLocalIP is the node-local address NodeLocal DNSCache and nodedns
// use.
const DefaultLocalIP = "169.254.20.10"

// Pillars of NodeLocal DNSCache's manifest that node-cache itself fills at
// start (the others the operator fills before applying it).
const (
	pillarClusterDNS = "__PILLAR__CLUSTER__DNS__"
	pillarUpstreams  = "__PILLAR__UPSTREAM__SERVERS__"
	resolvConf       = "/etc/resolv.conf"
)

// Migrate maps a Corefile onto a nodedns configuration. The error is a
// *SyntaxError when the Corefile does not parse.
func Migrate(src []byte, opts Options) (*Result, error) {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.LocalIP == "" {
		opts.LocalIP = DefaultLocalIP
	}
	f, err := Parse(src, opts.Env)
	if err != nil {
		return nil, err
	}
	m := newMigrator(opts)
	m.dropped = append(m.dropped, f.Skipped...)
	m.run(f)
	out := m.emit()
	sort.SliceStable(m.dropped, func(i, j int) bool { return m.dropped[i].Line < m.dropped[j].Line })
	return &Result{YAML: out, Dropped: m.dropped}, nil
}

// value is one key of the output, with where it came from.
type value struct {
	v    any
	line int
	// comments go above the key.
	comments []string
}

// stub is one stub domain of the output.
type stub struct {
	servers   []string
	forceTCP  bool
	preferUDP bool
	policy    string
	line      int
	file      string // set for the ConfigMap's stub domains
	comments  []string
}

// hostsOut is the hosts: key.
type hostsOut struct {
	entries   []string
	file      string
	ttl       string
	noReverse bool
	zones     []string
	fallZones []string
	fallSet   bool
	reload    string
}

// rewriteOut is one rule of the rewrite: key.
type rewriteOut struct{ typ, from, to, mode string }

type migrator struct {
	opts     Options
	vals     map[string]*value
	stubs    map[string]*stub
	dropped  []Note
	header   []string
	port     int
	portLine int

	clusterZones []string // lower-case FQDNs, primary first
	kubeLine     int      // line of the kubernetes directive taken
	clusterFwd   bool     // a cluster zone block forwards (node-cache)
	rootForward  *Directive
	rootServers  fwdServers
	reverseFwds  []pendingFwd
	binds        []string
	bindLine     int
	adminNotes   []string
	// clusterCache is cluster-ttl from the cache of a forwarded cluster
	// zone's block.
	clusterCache *value
}

func newMigrator(opts Options) *migrator {
	return &migrator{opts: opts, vals: map[string]*value{}, stubs: map[string]*stub{}}
}

// drop records something that is not carried.
func (m *migrator) drop(line int, format string, args ...any) {
	m.dropped = append(m.dropped, Note{Line: line, Text: fmt.Sprintf(format, args...)})
}

// set sets key (first setting wins; a different later value is dropped
// with a note naming both lines).
func (m *migrator) set(key string, v any, line int, comments ...string) bool {
	if old, ok := m.vals[key]; ok {
		if fmt.Sprint(old.v) != fmt.Sprint(v) {
			m.drop(line, "%s %v: line %d already set %s to %v, and nodedns has one value for every zone; kept the first", key, v, old.line, key, old.v)
			return false
		}
		return true
	}
	m.vals[key] = &value{v: v, line: line, comments: comments}
	return true
}

func (m *migrator) comment(key, text string) {
	if v, ok := m.vals[key]; ok {
		v.comments = append(v.comments, text)
	}
}

// addr is one server block key.
type addr struct {
	scheme string
	zones  []string // lower-case FQDNs ("." the root)
	port   int
}

// parseKey reads [scheme://]zone[:port]; zone may be a CIDR (its reverse
// zones).
func parseKey(k string) (addr, error) {
	a := addr{scheme: "dns"}
	if s, rest, ok := strings.Cut(k, "://"); ok {
		a.scheme = strings.ToLower(s)
		k = rest
	}
	defPort := map[string]int{"dns": 53, "tls": 853, "https": 443, "https3": 443, "quic": 853, "grpc": 443}
	p, known := defPort[a.scheme]
	if !known {
		return a, fmt.Errorf("unknown scheme %q", a.scheme)
	}
	a.port = p
	zone := k
	if i := strings.LastIndexByte(k, ':'); i >= 0 && !strings.Contains(k[:i], ":") {
		n, err := strconv.Atoi(k[i+1:])
		if err != nil || n < 1 || n > 65535 {
			return a, fmt.Errorf("port %q", k[i+1:])
		}
		a.port, zone = n, k[:i]
	}
	if zone == "" {
		zone = "."
	}
	if pfx, err := netip.ParsePrefix(zone); err == nil {
		a.zones = dnsname.ReverseZones(pfx)
		return a, nil
	}
	z := dnsname.Canonical(zone)
	if _, ok := dns.IsDomainName(z); !ok {
		return a, fmt.Errorf("zone %q", zone)
	}
	a.zones = []string{z}
	return a, nil
}

// block is a server block with its keys read.
type block struct {
	sb    *ServerBlock
	zones []string
	port  int
	root  bool
	kube  bool
}

func (m *migrator) run(f *File) {
	var blocks []*block
	for _, sb := range f.Blocks {
		b := &block{sb: sb}
		ok := true
		for _, k := range sb.Keys {
			a, err := parseKey(k.Text)
			if err != nil {
				m.drop(k.Line, "server block key %q: %v; the block is not carried", k.Text, err)
				ok = false
				break
			}
			if a.scheme != "dns" {
				m.drop(k.Line, "server block %q serves DNS over %s: nodedns serves plain DNS on UDP and TCP only; its %d directives are not carried", k.Text, strings.ToUpper(a.scheme), len(sb.Directives))
				ok = false
				break
			}
			if b.port != 0 && a.port != b.port {
				m.drop(k.Line, "server block key %q: port %d besides %d in one block; nodedns answers every zone on one port", k.Text, a.port, b.port)
			}
			if b.port == 0 {
				b.port = a.port
			}
			for _, z := range a.zones {
				if z == "." {
					b.root = true
				}
				b.zones = append(b.zones, z)
			}
		}
		if !ok {
			continue
		}
		for _, d := range sb.Directives {
			if d.Name == "kubernetes" {
				b.kube = true
			}
		}
		blocks = append(blocks, b)
	}
	m.findClusterZones(blocks)
	// The root block first: where one value serves every zone, the root
	// block's is the one that applies to most names.
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].root && !blocks[j].root })
	for _, b := range blocks {
		if m.port == 0 {
			m.port, m.portLine = b.port, b.sb.Line
		} else if b.port != m.port {
			m.drop(b.sb.Line, "server block %s listens on port %d, and line %d on %d: nodedns answers every zone on the same addresses (port %d kept)", keysText(b.sb), b.port, m.portLine, m.port, m.port)
		}
		m.block(b)
	}
	m.finish(blocks)
}

func keysText(sb *ServerBlock) string {
	var ks []string
	for _, k := range sb.Keys {
		ks = append(ks, k.Text)
	}
	return strings.Join(ks, " ")
}

// findClusterZones: the kubernetes directive's zones, else the default
// cluster domain, which a block forwarding to the cluster DNS (node-cache)
// is recognized by.
func (m *migrator) findClusterZones(blocks []*block) {
	for _, b := range blocks {
		for _, d := range b.sb.Directives {
			if d.Name != "kubernetes" || reverseKube(b, d) {
				continue
			}
			var zs []string
			args := d.ArgTexts()
			if len(args) == 0 {
				args = b.zones
			}
			for _, a := range args {
				z, err := parseKey(a)
				if err != nil {
					continue
				}
				for _, zz := range z.zones {
					if zz != "." && !dnsname.IsReverse(zz) {
						zs = append(zs, zz)
					}
				}
			}
			m.clusterZones = zs
			return
		}
	}
	m.clusterZones = []string{"cluster.local."}
}

// reverseKube: a kubernetes directive for reverse zones only.
func reverseKube(b *block, d *Directive) bool {
	zones := b.zones
	if len(d.Args) > 0 {
		zones = nil
		for _, a := range d.ArgTexts() {
			k, err := parseKey(a)
			if err != nil {
				return false
			}
			zones = append(zones, k.zones...)
		}
	}
	return allReverse(zones)
}

func (m *migrator) isClusterZone(z string) bool {
	for _, c := range m.clusterZones {
		if z == c {
			return true
		}
	}
	return false
}

// block maps one server block.
func (m *migrator) block(b *block) {
	// A block for the cluster zone without the kubernetes plugin that
	// forwards is NodeLocal DNSCache's: the zone is asked of the cluster
	// DNS.
	clusterFwd := false
	if !b.kube && !b.root {
		all := true
		any := false
		for _, z := range b.zones {
			switch {
			case m.isClusterZone(z):
				any = true
			case dnsname.IsReverse(z):
			default:
				all = false
			}
		}
		clusterFwd = any && all && hasDirective(b.sb, "forward")
	}
	reverseOnly := !b.root && !b.kube && allReverse(b.zones) && hasDirective(b.sb, "forward")
	for _, d := range b.sb.Directives {
		m.directive(b, d, clusterFwd, reverseOnly)
	}
}

func hasDirective(sb *ServerBlock, name string) bool {
	for _, d := range sb.Directives {
		if d.Name == name {
			return true
		}
	}
	return false
}

func allReverse(zs []string) bool {
	for _, z := range zs {
		if !dnsname.IsReverse(z) {
			return false
		}
	}
	return len(zs) > 0
}
