package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cluster/kubedns"
	"github.com/nodedns/nodedns/pkg/query/upstream"
)

// finish decides what depends on the whole file: addresses, the default
// upstreams, the kube-dns ConfigMap, and the Corefile's defaults where
// nodedns's differ.
func (m *migrator) finish(blocks []*block) {
	// Loopback and unspecified binds cannot be intercepted (a link and
	// NOTRACK rules for them make no sense): they become listen addresses
	// beside the intercepted ones.
	var intercepted, local []string
	for _, ip := range m.binds {
		if a, err := netip.ParseAddr(ip); err == nil && (a.IsLoopback() || a.IsUnspecified()) {
			local = append(local, ip)
		} else {
			intercepted = append(intercepted, ip)
		}
	}
	if len(intercepted) > 0 {
		m.set("local-ip", intercepted, m.bindLine)
	} else {
		m.set("local-ip", []string{m.opts.LocalIP}, 0,
			"the Corefile binds no address nodedns can intercept (CoreDNS listened on every address of its pod, or on loopback only): nodedns answers on the node-local address; add the kube-dns ClusterIP to intercept pods that still use it")
	}
	if (m.port != 0 && m.port != 53) || len(local) > 0 {
		port := uint16(53)
		if m.port != 0 {
			port = uint16(m.port)
		}
		var l []string
		for _, ip := range append(slices.Clone(m.vals["local-ip"].v.([]string)), local...) {
			l = append(l, netip.AddrPortFrom(netip.MustParseAddr(ip), port).String())
		}
		why := fmt.Sprintf("line %d: the Corefile serves port %d", m.portLine, port)
		if len(local) > 0 {
			why = fmt.Sprintf("line %d: the Corefile binds %s too, which nodedns listens on without intercepting", m.bindLine, strings.Join(local, ", "))
		}
		m.set("listen", l, m.portLine, why)
	}

	cd, _ := m.vals["cluster-dns"]
	for _, p := range m.reverseFwds {
		switch {
		case m.clusterFwd && cd != nil && sameServer(p.srv.addrs, cd.v.(string)):
			m.comment("cluster-zone", fmt.Sprintf("line %d: %s for %s: in forward mode nodedns sends in-addr.arpa and ip6.arpa to cluster-dns too", p.d.Line, p.d.String(), strings.Join(trimAll(p.b.zones), " ")))
		case m.clusterFwd:
			m.drop(p.d.Line, "%s for %s: in forward mode nodedns sends the reverse zones to cluster-dns; this forward is not carried", p.d.String(), strings.Join(trimAll(p.b.zones), " "))
		default:
			for _, z := range p.b.zones {
				m.stubDomain(p.d, z, p.srv, p.o)
			}
		}
	}

	if m.clusterFwd && m.clusterCache != nil {
		m.set("cluster-ttl", m.clusterCache.v, m.clusterCache.line, m.clusterCache.comments...)
	}
	m.defaultUpstreams()
	m.kubeDNSStubs()
	if m.clusterFwd {
		m.dropNamedServers()
	}

	if !m.was("loop") {
		m.set("loop-check", false, 0, "no loop directive in the Corefile (nodedns's default checks for a forwarding loop at start)")
	}
	if !m.was("autopath") {
		m.set("autopath", false, 0, "no autopath in the Corefile (nodedns's default walks the search path of this node's pods, one round trip instead of several per lookup: see the README before turning it on)")
	}
	if m.was("cache") {
		if _, ok := m.vals["min-ttl"]; !ok {
			minTTL := 5 * time.Second
			if v, ok := m.vals["max-ttl"]; ok {
				if d, err := time.ParseDuration(v.v.(string)); err == nil && d < minTTL {
					minTTL = d
				}
			}
			m.set("min-ttl", durText(minTTL), 0, "CoreDNS's cache keeps an answer at least 5s")
		}
		if _, ok := m.vals["prefetch"]; !ok {
			m.set("prefetch", 0, 0, "no prefetch in the Corefile's cache (nodedns's default refreshes entries hit twice before they expire)")
		}
		if _, ok := m.vals["serve-stale"]; !ok {
			m.set("serve-stale", "0s", 0, "no serve_stale in the Corefile's cache (nodedns's default serves an answer up to 1h stale when every upstream fails)")
		}
	} else {
		m.header = append(m.header, "The Corefile has no cache for external names; nodedns always keeps one (cache-size).")
	}
	if !m.was("kubernetes") && !m.clusterFwd {
		m.header = append(m.header, "The Corefile neither answers nor forwards the cluster zone; nodedns answers it from the API server when it has a kubeconfig (or runs in a pod).")
	}
	if m.was("reload") {
		m.header = append(m.header, "reload: nodedns re-reads this file when it changes (every 2s).")
	}
	if len(m.adminNotes) > 0 {
		if _, ok := m.vals["admin"]; ok {
			for _, n := range m.adminNotes {
				m.comment("admin", n)
			}
		} else {
			m.header = append(m.header, m.adminNotes...)
		}
	}
}

func sameServer(addrs []string, clusterDNS string) bool {
	for _, a := range addrs {
		sp, err := upstream.ParseServer(a)
		cs, err2 := upstream.ParseServer(clusterDNS)
		if err != nil || err2 != nil || sp.String() != cs.String() {
			return false
		}
	}
	return len(addrs) > 0
}

// defaultUpstreams maps the root block's forward (or the ConfigMap's
// upstreamNameservers, which node-cache puts in place of its upstream
// pillar and of /etc/resolv.conf).
func (m *migrator) defaultUpstreams() {
	var kd []string
	if m.opts.KubeDNS != nil {
		kd = m.opts.KubeDNS.UpstreamNameservers
	}
	kdFile := filepath.Join(m.opts.KubeDNSDir, kubedns.UpstreamNameserversKey)
	d := m.rootForward
	srv := m.rootServers
	switch {
	case d == nil && len(kd) > 0:
		m.set("upstream", kd, 0, "from the kube-dns ConfigMap (upstreamNameservers)")
	case d == nil:
		m.header = append(m.header, "The Corefile forwards no other names; nodedns forwards them to the nameservers of the node's /etc/resolv.conf.")
	case srv.resolvConf && len(kd) > 0:
		if len(srv.addrs) > 0 {
			m.drop(d.Line, "%s: the addresses besides the node's resolvers are replaced by the kube-dns ConfigMap's upstreamNameservers", d.String())
		}
		m.set("upstream", kd, d.Line, fmt.Sprintf("line %d: %s, with the kube-dns ConfigMap's upstreamNameservers in place of the node's resolvers, as node-cache does", d.Line, d.String()))
		if v, ok := m.vals["force-tcp"]; ok && srv.pillar {
			// node-cache switches its upstream block to UDP for custom
			// upstreams.
			delete(m.vals, "force-tcp")
			_ = v
		}
	case srv.resolvConf && len(srv.addrs) > 0:
		m.drop(d.Line, "%s: nodedns forwards either to the node's resolvers or to addresses; took the addresses", d.String())
		m.set("upstream", srv.addrs, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
	case srv.resolvConf:
		m.header = append(m.header, fmt.Sprintf("line %d: %s: the default upstreams are the nameservers of the node's /etc/resolv.conf, as without an upstream key.", d.Line, d.String()))
	default:
		m.set("upstream", srv.addrs, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
		if len(kd) > 0 {
			m.dropped = append(m.dropped, Note{File: kdFile, Text: fmt.Sprintf("upstreamNameservers %s: not used; the Corefile's forward at line %d names its servers, and node-cache replaces only its upstream placeholder", strings.Join(kd, " "), d.Line)})
		}
	}
}

// kubeDNSStubs adds the ConfigMap's stubDomains the Corefile does not
// forward itself.
func (m *migrator) kubeDNSStubs() {
	if m.opts.KubeDNS == nil {
		return
	}
	file := filepath.Join(m.opts.KubeDNSDir, kubedns.StubDomainsKey)
	for _, zone := range m.opts.KubeDNS.Zones() {
		servers := m.opts.KubeDNS.StubDomains[zone]
		if old, ok := m.stubs[zone]; ok {
			if !slices.Equal(old.servers, servers) {
				m.dropped = append(m.dropped, Note{File: file, Text: fmt.Sprintf("stub domain %s %v: the Corefile forwards it at line %d; kept the Corefile's", zone, servers, old.line)})
			}
			continue
		}
		fq := strings.ToLower(dns.Fqdn(zone))
		if m.isClusterZone(fq) {
			m.dropped = append(m.dropped, Note{File: file, Text: fmt.Sprintf("stub domain %s: the cluster zone itself; not carried", zone)})
			continue
		}
		var ok []string
		for _, s := range servers {
			sp, err := upstream.ParseServer(s)
			if err == nil && sp.ByName() && !m.inClusterZone(sp.Name) {
				err = fmt.Errorf("a name outside the cluster zone")
			}
			if err != nil {
				m.dropped = append(m.dropped, Note{File: file, Text: fmt.Sprintf("stub domain %s: nameserver %s not carried: %v", zone, s, err)})
				continue
			}
			ok = append(ok, s)
		}
		if len(ok) == 0 {
			continue
		}
		m.stubs[zone] = &stub{servers: ok, file: file, comments: []string{"from the kube-dns ConfigMap (stubDomains)"}}
	}
}

// dropNamedServers: in forward mode nodedns has no index of Services to
// resolve server names from.
func (m *migrator) dropNamedServers() {
	named := func(s string) bool {
		sp, err := upstream.ParseServer(s)
		return err == nil && sp.ByName()
	}
	for _, z := range sortedStubZones(m.stubs) {
		st := m.stubs[z]
		var keep []string
		for _, s := range st.servers {
			if named(s) {
				m.dropped = append(m.dropped, Note{File: st.file, Line: st.line, Text: fmt.Sprintf("stub domain %s: server %s is a name; with the cluster zone forwarded nodedns has no index to resolve it from", z, s)})
				continue
			}
			keep = append(keep, s)
		}
		if len(keep) == 0 {
			delete(m.stubs, z)
			continue
		}
		st.servers = keep
	}
	if v, ok := m.vals["upstream"]; ok {
		var keep []string
		for _, s := range v.v.([]string) {
			if named(s) {
				m.drop(v.line, "upstream %s is a name; with the cluster zone forwarded nodedns has no index to resolve it from", s)
				continue
			}
			keep = append(keep, s)
		}
		if len(keep) == 0 {
			delete(m.vals, "upstream")
		} else {
			v.v = keep
		}
	}
}

func sortedStubZones(m map[string]*stub) []string {
	out := make([]string, 0, len(m))
	for z := range m {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

func (m *migrator) inClusterZone(name string) bool {
	for _, z := range m.clusterZones {
		if dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

// order is the order of the output's keys.
var order = []string{
	"local-ip", "listen",
	"cluster-domain", "cluster-zone", "cluster-dns", "cluster-dns-protocol", "kubeconfig", "pods", "cluster-ttl",
	"endpoint-pod-names", "ignore-empty-service", "no-endpoints", "namespaces", "namespace-labels", "fallthrough",
	"cluster-sync-wait", "autopath",
	"upstream", "policy", "force-tcp", "prefer-udp", "upstream-ca", "stub-domains", "max-inflight",
	"cache-size", "min-ttl", "max-ttl", "max-negative-ttl", "prefetch", "serve-stale", "max-udp-size",
	"hosts", "rewrite", "loadbalance",
	"admin", "lameduck", "loop-check", "log-queries",
}

// emit writes the configuration as YAML.
func (m *migrator) emit() []byte {
	var b bytes.Buffer
	src := m.opts.Source
	if src == "" {
		src = "a Corefile"
	}
	fmt.Fprintf(&b, "# nodedns configuration written by `nodedns migrate` from %s.\n", src)
	b.WriteString("# Review it before use; what could not be carried was listed on stderr\n# with its line.\n")
	for _, h := range m.header {
		writeComment(&b, "", h)
	}
	if len(m.stubs) > 0 {
		m.vals["stub-domains"] = &value{}
	}
	for _, key := range order {
		v, ok := m.vals[key]
		if !ok {
			continue
		}
		b.WriteByte('\n')
		for _, c := range v.comments {
			writeComment(&b, "", c)
		}
		switch key {
		case "stub-domains":
			m.emitStubs(&b)
		case "hosts":
			emitHosts(&b, v.v.(*hostsOut))
		case "rewrite":
			b.WriteString("rewrite:\n")
			for _, r := range v.v.([]rewriteOut) {
				fmt.Fprintf(&b, "  - {type: %s, from: %s, to: %s", q(r.typ), q(r.from), q(r.to))
				if r.mode != "" {
					fmt.Fprintf(&b, ", mode: %s", q(r.mode))
				}
				b.WriteString("}\n")
			}
		default:
			fmt.Fprintf(&b, "%s: %s\n", key, scalar(v.v))
		}
	}
	return b.Bytes()
}

func (m *migrator) emitStubs(b *bytes.Buffer) {
	b.WriteString("stub-domains:\n")
	for _, z := range sortedStubZones(m.stubs) {
		s := m.stubs[z]
		for _, c := range s.comments {
			writeComment(b, "  ", c)
		}
		if !s.forceTCP && !s.preferUDP && s.policy == "" {
			fmt.Fprintf(b, "  %s: %s\n", q(z), scalar(s.servers))
			continue
		}
		fmt.Fprintf(b, "  %s:\n    servers: %s\n", q(z), scalar(s.servers))
		if s.forceTCP {
			b.WriteString("    force-tcp: true\n")
		}
		if s.preferUDP {
			b.WriteString("    prefer-udp: true\n")
		}
		if s.policy != "" {
			fmt.Fprintf(b, "    policy: %s\n", q(s.policy))
		}
	}
}

func emitHosts(b *bytes.Buffer, h *hostsOut) {
	b.WriteString("hosts:\n")
	if h.file != "" {
		fmt.Fprintf(b, "  file: %s\n", q(h.file))
	}
	if len(h.entries) > 0 {
		b.WriteString("  entries:\n")
		for _, e := range h.entries {
			fmt.Fprintf(b, "    - %s\n", q(e))
		}
	}
	if h.ttl != "" {
		fmt.Fprintf(b, "  ttl: %s\n", q(h.ttl))
	}
	if h.noReverse {
		b.WriteString("  no-reverse: true\n")
	}
	if len(h.zones) > 0 {
		fmt.Fprintf(b, "  zones: %s\n", scalar(h.zones))
	}
	if h.fallSet {
		fmt.Fprintf(b, "  fallthrough: %s\n", scalar(h.fallZones))
	}
	if h.reload != "" {
		fmt.Fprintf(b, "  reload: %s\n", q(h.reload))
	}
}

// writeComment writes text as comment lines, wrapped near 76 columns.
func writeComment(b *bytes.Buffer, indent, text string) {
	line := indent + "#"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 78 && len(line) > len(indent)+1 {
			b.WriteString(line + "\n")
			line = indent + "#"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
}

// q quotes s as a YAML double-quoted scalar (JSON's string syntax is a
// subset).
func q(s string) string {
	out, _ := json.Marshal(s)
	return string(out)
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return q(x)
	case bool:
		return fmt.Sprint(x)
	case int:
		return fmt.Sprint(x)
	case float64:
		return fmt.Sprint(x)
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = q(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic(fmt.Sprintf("migrate: no YAML form for %T", v))
}
