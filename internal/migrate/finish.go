package migrate

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// finish decides what depends on the whole file: addresses, the default
// upstreams, the kube-dns ConfigMap, and the Corefile's defaults where
// nodedns's differ.
func (m *migrator) finish(blocks []*block) {
	m.exceptServfailZones()
	if m.opts.NetworkMode == config.NetworkPod {
		m.podMode()
	} else {
		m.hostAddresses()
	}
	m.finishUpstreams()
}

// hostAddresses: the Corefile's binds become the intercepted addresses
// (local-ip) and, for loopback, unspecified or another port, listen.
func (m *migrator) hostAddresses() {
	// Loopback and unspecified binds cannot be intercepted (a link and
	// NOTRACK rules for them make no sense): they become listen addresses
	// beside the intercepted ones.
	var intercepted, local config.List
	for _, ip := range m.binds {
		if a, err := netip.ParseAddr(ip); err == nil && (a.IsLoopback() || a.IsUnspecified()) {
			local = append(local, ip)
		} else {
			intercepted = append(intercepted, ip)
		}
	}
	if len(intercepted) > 0 {
		set(m, &m.cfg.LocalIP, intercepted, m.bindLine)
	} else {
		set(m, &m.cfg.LocalIP, config.List{m.opts.LocalIP}, 0,
			"the Corefile binds no address nodedns can intercept (CoreDNS listened on every address of its pod, or on loopback only): nodedns answers on the node-local address; add the kube-dns ClusterIP to intercept pods that still use it")
	}
	if (m.port != 0 && m.port != 53) || len(local) > 0 {
		port := uint16(53)
		if m.port != 0 {
			port = uint16(m.port)
		}
		var l config.List
		for _, ip := range append(slices.Clone(m.cfg.LocalIP), local...) {
			l = append(l, netip.AddrPortFrom(netip.MustParseAddr(ip), port).String())
		}
		why := fmt.Sprintf("line %d: the Corefile serves port %d", m.portLine, port)
		if len(local) > 0 {
			why = fmt.Sprintf("line %d: the Corefile binds %s too, which nodedns listens on without intercepting", m.bindLine, strings.Join(local, ", "))
		}
		set(m, &m.cfg.Listen, l, m.portLine, why)
	}
}

// finishUpstreams decides the rest: the reverse zones' forwards, the
// default upstreams, the kube-dns ConfigMap, and the Corefile's defaults
// where nodedns's differ.
func (m *migrator) finishUpstreams() {

	for _, p := range m.reverseFwds {
		switch {
		case m.clusterFwd && m.isSet(&m.cfg.ClusterDNS) && sameServer(p.srv.addrs, m.cfg.ClusterDNS):
			m.comment(&m.cfg.ClusterZone, fmt.Sprintf("line %d: %s for %s: in forward mode nodedns sends in-addr.arpa and ip6.arpa to cluster-dns too", p.d.Line, p.d.String(), strings.Join(trimAll(p.b.zones), " ")))
		case m.clusterFwd:
			m.drop(p.d.Line, "%s for %s: in forward mode nodedns sends the reverse zones to cluster-dns; this forward is not carried", p.d.String(), strings.Join(trimAll(p.b.zones), " "))
		default:
			for _, z := range p.b.zones {
				m.stubDomain(p.d, z, p.srv, p.o)
			}
		}
	}

	if m.clusterFwd && m.clusterCache != nil {
		set(m, &m.cfg.ClusterTTL, config.Duration(m.clusterCache.ttl), m.clusterCache.line, m.clusterCache.comment)
	}
	m.defaultUpstreams()
	m.ownGroupDefaults()
	m.kubeDNSStubs()
	if m.clusterFwd {
		m.dropNamedServers()
	}

	if !m.seen["loop"] {
		set(m, &m.cfg.LoopCheck, false, 0, "no loop directive in the Corefile (nodedns's default checks for a forwarding loop at start)")
	}
	if !m.seen["autopath"] {
		set(m, &m.cfg.Autopath, false, 0, "no autopath in the Corefile (nodedns's default walks the search path of this node's pods, one round trip instead of several per lookup: see the README before turning it on)")
	}
	if m.seen["cache"] {
		if !m.isSet(&m.cfg.MinTTL) {
			minTTL := config.Duration(5 * time.Second)
			if m.isSet(&m.cfg.MaxTTL) {
				minTTL = min(minTTL, m.cfg.MaxTTL)
			}
			set(m, &m.cfg.MinTTL, minTTL, 0, "CoreDNS's cache keeps an answer at least 5s")
		}
		if !m.isSet(&m.cfg.MinNegativeTTL) {
			minNeg := config.Duration(5 * time.Second)
			if m.isSet(&m.cfg.MaxNegativeTTL) {
				minNeg = min(minNeg, m.cfg.MaxNegativeTTL)
			}
			set(m, &m.cfg.MinNegativeTTL, minNeg, 0, "CoreDNS's cache keeps a denial at least 5s")
		}
		if !m.isSet(&m.cfg.Prefetch) {
			set(m, &m.cfg.Prefetch, 0, 0, "no prefetch in the Corefile's cache (nodedns's default refreshes entries hit twice before they expire)")
		}
		if !m.isSet(&m.cfg.ServeStale) {
			set(m, &m.cfg.ServeStale, 0, 0, "no serve_stale in the Corefile's cache (nodedns's default serves an answer up to 1h stale when every upstream fails)")
		}
	} else {
		// What CoreDNS without a cache cannot do is turned off: no
		// stale answers, no refreshes, no remembered failures. Answers
		// and denials are still cached for their TTL.
		m.header = append(m.header, "The Corefile has no cache for external names; nodedns always keeps one (cache-size): answers and denials are kept for their TTL, where CoreDNS asks again.")
		set(m, &m.cfg.ServeStale, 0, 0, "no cache in the Corefile (nodedns's default serves an answer up to 1h stale when every upstream fails)")
		set(m, &m.cfg.Prefetch, 0, 0, "no cache in the Corefile (nodedns's default refreshes entries hit twice before they expire)")
		set(m, &m.cfg.ServfailTTL, 0, 0, "no cache in the Corefile (nodedns's default remembers a SERVFAIL, or a failure of every upstream, 5s)")
	}
	if !m.seen["kubernetes"] {
		// No kubernetes directive: the domain was given (findClusterZones
		// fails otherwise), and is written, never left to the default.
		set(m, &m.cfg.ClusterDomain, config.List{trimDot(m.clusterZones[0])}, 0, "the cluster domain: "+m.opts.ClusterDomainFrom)
		if !m.clusterFwd {
			m.header = append(m.header, fmt.Sprintf("The Corefile neither answers nor forwards the cluster zone %s; nodedns answers it from the API server when it has a kubeconfig (or runs in a pod).", trimDot(m.clusterZones[0])))
		}
	}
	m.overrideNotes()
	if m.seen["reload"] {
		m.header = append(m.header, "reload: nodedns re-reads this file when it changes (every 2s).")
	}
	m.header = append(m.header, m.unreached...)
	if len(m.hostNames) > 0 {
		if m.isSet(&m.cfg.UpstreamResolver) {
			for _, n := range m.hostNames {
				m.comment(&m.cfg.UpstreamResolver, n)
			}
		} else {
			m.header = append(m.header, m.hostNames...)
		}
	}
	if len(m.adminNotes) > 0 {
		if m.isSet(&m.cfg.Admin) {
			for _, n := range m.adminNotes {
				m.comment(&m.cfg.Admin, n)
			}
		} else {
			m.header = append(m.header, m.adminNotes...)
		}
	}
}

// overrideNotes say in the output's header what overrides what it writes,
// where the shipped manifest or the agent's own reading would silently
// win or lose.
func (m *migrator) overrideNotes() {
	if m.opts.KubeDNS != nil && (m.isSet(&m.cfg.Upstream) || len(m.opts.KubeDNS.StubDomains) > 0) {
		m.header = append(m.header,
			"The kube-dns ConfigMap ("+m.opts.KubeDNSDir+") was copied into fixed keys (upstream, stub-domains): they override that ConfigMap from now on, and later edits of it change nothing where these keys are set.",
			"To follow the ConfigMap instead, delete the keys copied from it and keep kube-dns-config: /etc/kube-dns (the shipped manifest mounts the kube-dns ConfigMap there, and the agent re-reads it when it changes, under this file's keys).")
	}
	if m.isSet(&m.cfg.Admin) {
		m.comment(&m.cfg.Admin, "the shipped manifest's --admin=[$(HOST_IP)]:9253 flag overrides this line (a flag wins over the file): drop the flag from the DaemonSet to use it")
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
	var kd config.List
	if m.opts.KubeDNS != nil {
		kd = m.opts.KubeDNS.UpstreamNameservers
	}
	kdFile := filepath.Join(m.opts.KubeDNSDir, kubedns.UpstreamNameserversKey)
	d := m.rootForward
	srv := m.rootServers
	switch {
	case d == nil && len(kd) > 0:
		set(m, &m.cfg.Upstream, kd, 0, "from the kube-dns ConfigMap (upstreamNameservers)")
	case d == nil:
		m.header = append(m.header, "The Corefile forwards no other names; nodedns forwards them to the nameservers of the node's /etc/resolv.conf.")
	case srv.resolvConf && len(kd) > 0:
		if len(srv.addrs) > 0 {
			m.drop(d.Line, "%s: the addresses besides the node's resolvers are replaced by the kube-dns ConfigMap's upstreamNameservers", d.String())
		}
		set(m, &m.cfg.Upstream, kd, d.Line, fmt.Sprintf("line %d: %s, with the kube-dns ConfigMap's upstreamNameservers in place of the node's resolvers, as node-cache does", d.Line, d.String()))
		if srv.pillar {
			// node-cache switches its upstream block to UDP for custom
			// upstreams.
			m.unset(&m.cfg.ForceTCP)
		}
	case srv.resolvConf && len(srv.addrs) > 0:
		m.drop(d.Line, "%s: nodedns forwards either to the node's resolvers or to addresses; took the addresses", d.String())
		set(m, &m.cfg.Upstream, srv.addrs, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
	case srv.resolvConf:
		m.header = append(m.header, fmt.Sprintf("line %d: %s: the default upstreams are the nameservers of the node's /etc/resolv.conf, as without an upstream key.", d.Line, d.String()))
	default:
		set(m, &m.cfg.Upstream, srv.addrs, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
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
			if !slices.Equal(old.Servers, servers) {
				m.dropped = append(m.dropped, Note{File: file, Text: fmt.Sprintf("stub domain %s %v: the Corefile forwards it at line %d; kept the Corefile's", zone, servers, old.line)})
			}
			continue
		}
		fq := dnsname.Canonical(zone)
		if m.isClusterZone(fq) {
			m.dropped = append(m.dropped, Note{File: file, Text: fmt.Sprintf("stub domain %s: the cluster zone itself; not carried", zone)})
			continue
		}
		var ok []string
		for _, s := range servers {
			sp, err := upstream.ParseServer(s)
			if err == nil && sp.ByName() && !dnsname.InZones(sp.Name, m.clusterZones) {
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
		// node-cache forwards them with CoreDNS's forward, which hands a
		// SERVFAIL or REFUSED back as the answer.
		none := config.List{}
		m.stubs[zone] = &stub{StubDomain: config.StubDomain{Servers: ok, ForwardOptions: config.ForwardOptions{Failover: &none}}, file: file,
			comments: []string{"from the kube-dns ConfigMap (stubDomains); failover: [] as CoreDNS's forward in node-cache"}}
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
		for _, s := range st.Servers {
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
		st.Servers = keep
	}
	if o := m.origins[m.key(&m.cfg.Upstream)]; o != nil {
		var keep config.List
		for _, s := range m.cfg.Upstream {
			if named(s) {
				m.drop(o.line, "upstream %s is a name; with the cluster zone forwarded nodedns has no index to resolve it from", s)
				continue
			}
			keep = append(keep, s)
		}
		if len(keep) == 0 {
			m.unset(&m.cfg.Upstream)
		} else {
			m.cfg.Upstream = keep
		}
	}
}

// ownGroupDefaults writes CoreDNS's policy and transport into the stub
// domains and next groups whose forward names none, where the root
// forward set them: in a Corefile every forward has its own (random,
// the client's transport), in nodedns a group without them takes the
// default upstreams' (policy, force-tcp).
func (m *migrator) ownGroupDefaults() {
	policy := m.isSet(&m.cfg.Policy) && m.cfg.Policy != "random"
	tcp := m.isSet(&m.cfg.ForceTCP) && m.cfg.ForceTCP
	if !policy && !tcp {
		return
	}
	var fix func(sd *config.StubDomain) bool
	fix = func(sd *config.StubDomain) bool {
		if sd == nil || len(sd.Servers) == 0 {
			return false
		}
		changed := false
		if policy && sd.Policy == "" {
			sd.Policy, changed = "random", true
		}
		if tcp && !sd.ForceTCP && !sd.PreferUDP {
			sd.PreferUDP, changed = true, true
		}
		return fix(sd.Next) || changed
	}
	why := "policy random / prefer-udp: its forward names no policy / force_tcp, so CoreDNS's defaults, not the default upstreams' that a stub domain would otherwise take"
	for _, z := range sortedStubZones(m.stubs) {
		if st := m.stubs[z]; st.file == "" && fix(&st.StubDomain) {
			st.comments = append(st.comments, why)
		}
	}
	if fix(m.cfg.UpstreamNext) {
		m.comment(&m.cfg.UpstreamNext, why)
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
