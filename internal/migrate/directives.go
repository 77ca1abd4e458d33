package migrate

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/upstream"
)

// unsupported says what the plugins nodedns does not carry would have done.
var unsupported = map[string]string{
	"acl":          "filtered queries by client address and type",
	"auto":         "served zones from zone files in a directory",
	"azure":        "served zones from Azure DNS",
	"chaos":        "answered CH TXT queries for version.bind and authors.bind",
	"clouddns":     "served zones from Google Cloud DNS",
	"debug":        "disabled panic recovery and printed debug output (nodedns: log-level: debug)",
	"dns64":        "synthesized AAAA records from A records (DNS64)",
	"dnssec":       "signed answers with DNSSEC on the fly",
	"dnstap":       "logged queries and answers over dnstap",
	"dynupdate":    "accepted dynamic updates (RFC 2136)",
	"erratic":      "answered erratically for testing",
	"etcd":         "served records from etcd (SkyDNS)",
	"file":         "served a zone from a zone file",
	"geoip":        "looked up the client's location",
	"grpc":         "forwarded queries over gRPC",
	"grpc_server":  "served DNS over gRPC",
	"header":       "rewrote header flags of answers",
	"https":        "served DNS over HTTPS",
	"https3":       "served DNS over HTTP/3",
	"k8s_external": "answered for the external IPs of Services in an external zone",
	"local":        "answered localhost and its reverse names itself",
	"metadata":     "made request metadata available to other plugins",
	"minimal":      "left the authority and additional sections out of answers",
	"multisocket":  "served on several sockets per port",
	"nomad":        "served records from Nomad",
	"nsid":         "added the NSID EDNS option to answers",
	"on":           "ran commands on startup or shutdown",
	"pprof":        "served Go profiling data",
	"proxyproto":   "accepted the PROXY protocol",
	"quic":         "served DNS over QUIC",
	"root":         "set the directory of relative file names",
	"route53":      "served zones from AWS Route 53",
	"secondary":    "served zones transferred from a primary",
	"shed":         "shed load above a CPU threshold",
	"sign":         "signed zone files with DNSSEC",
	"siit":         "translated IPv4 and IPv6 addresses (SIIT)",
	"template":     "synthesized answers from templates",
	"timeouts":     "set the server's read, write and idle timeouts",
	"tls":          "configured TLS for the server's own DNS-over-TLS listeners",
	"trace":        "traced queries (OpenTracing)",
	"transfer":     "served zone transfers",
	"tsig":         "verified TSIG signatures",
	"view":         "served the block only to queries matching an expression",
	"whoami":       "answered with the client's address and port",
}

// directive maps one directive of block b.
func (m *migrator) directive(b *block, d *Directive, clusterFwd, reverseOnly bool) {
	switch d.Name {
	case "kubernetes":
		m.kubernetes(b, d)
	case "forward":
		m.forward(b, d, clusterFwd, reverseOnly)
	case "cache":
		m.cache(b, d, clusterFwd)
	case "hosts":
		m.hosts(b, d)
	case "rewrite":
		m.rewrite(b, d)
	case "loadbalance":
		m.loadbalance(d)
	case "autopath":
		m.autopath(d)
	case "health":
		m.health(d)
	case "ready":
		m.noteAdmin(d, "/ready", ":8181")
	case "prometheus":
		m.prometheus(d)
	case "reload":
		m.seen("reload")
		m.noBlock(d)
	case "loop":
		m.seen("loop")
		m.set("loop-check", true, d.Line)
	case "errors":
		m.seen("errors")
		for _, o := range d.Block {
			if o.Name != "consolidate" && o.Name != "stacktrace" {
				m.drop(o.Line, "errors option %s: not known to nodedns", o.String())
			}
		}
	case "log":
		m.logDirective(b, d)
	case "bind":
		m.bind(d)
	case "bufsize":
		m.bufsize(d)
	case "any":
		// nodedns answers ANY with RFC 8482's HINFO, as the any plugin.
		m.noBlock(d)
	case "cancel":
		// Every query of nodedns has a deadline (the upstream budget, 5s).
		m.noBlock(d)
	default:
		if what, ok := unsupported[d.Name]; ok {
			m.drop(d.Line, "%s: not carried; it %s", d.String(), what)
		} else {
			m.drop(d.Line, "%s: unknown directive, not carried", d.String())
		}
	}
}

func (m *migrator) seen(name string) {
	m.set("#"+name, true, 0)
}

func (m *migrator) was(name string) bool {
	_, ok := m.vals["#"+name]
	return ok
}

// noBlock drops the options of a directive that takes none here.
func (m *migrator) noBlock(d *Directive) {
	for _, o := range d.Block {
		m.drop(o.Line, "%s option %s: not carried", d.Name, o.String())
	}
}

func seconds(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func trimDot(z string) string {
	if z == "." {
		return z
	}
	return strings.TrimSuffix(z, ".")
}

func (m *migrator) kubernetes(b *block, d *Directive) {
	if reverseKube(b, d) && len(d.Block) == 0 {
		// A block of its own for the cluster's reverse zones: nodedns
		// answers PTR for every address the cluster knows anyway.
		return
	}
	if m.kubeLine != 0 {
		m.drop(d.Line, "second kubernetes directive: nodedns has one cluster index, configured from line %d", m.kubeLine)
		return
	}
	m.kubeLine = d.Line
	m.seen("kubernetes")
	var doms []string
	for _, z := range m.clusterZones {
		doms = append(doms, trimDot(z))
	}
	if len(doms) == 0 {
		m.drop(d.Line, "%s: no cluster zone in it (the root zone cannot be one); cluster-domain left at cluster.local", d.String())
		doms = []string{"cluster.local"}
	}
	m.set("cluster-domain", doms, d.Line, fmt.Sprintf("line %d: %s (nodedns answers PTR queries for every address the cluster knows)", d.Line, d.String()))
	pods, fall := false, false
	for _, o := range d.Block {
		args := o.ArgTexts()
		switch o.Name {
		case "endpoint_pod_names":
			m.set("endpoint-pod-names", true, o.Line)
		case "pods":
			pods = true
			if len(args) == 1 && slices.Contains([]string{"disabled", "insecure", "verified"}, args[0]) {
				m.set("pods", args[0], o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: want disabled, insecure or verified", o.String())
			}
		case "namespaces":
			m.set("namespaces", args, o.Line)
		case "namespace_labels":
			m.set("namespace-labels", strings.Join(args, " "), o.Line)
		case "labels":
			m.drop(o.Line, "kubernetes %s: not carried; only Services matching the selector would have been answered", o.String())
		case "endpoint":
			m.drop(o.Line, "kubernetes %s: not carried; nodedns reaches the API server through its kubeconfig or the in-cluster configuration", o.String())
		case "tls":
			m.drop(o.Line, "kubernetes %s: not carried; client certificates for the API server come from the kubeconfig", o.String())
		case "kubeconfig":
			if len(args) >= 1 {
				m.set("kubeconfig", args[0], o.Line)
			}
			if len(args) == 2 {
				m.drop(o.Line, "kubernetes kubeconfig context %s: not carried; nodedns uses the kubeconfig's current context", args[1])
			}
		case "fallthrough":
			fall = true
			zones := make([]string, 0, len(args))
			for _, a := range args {
				zones = append(zones, trimDot(strings.ToLower(dns.Fqdn(a))))
			}
			if len(zones) == 0 {
				zones = []string{"."}
			}
			m.set("fallthrough", zones, o.Line)
		case "ttl":
			if n, ok := seconds(firstArg(args)); ok && n <= 3600 {
				m.set("cluster-ttl", durText(time.Duration(n)*time.Second), o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: want 0 to 3600 seconds", o.String())
			}
		case "noendpoints":
			m.set("no-endpoints", true, o.Line)
		case "ignore":
			if len(args) == 1 && args[0] == "empty_service" {
				m.set("ignore-empty-service", true, o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: not known to nodedns", o.String())
			}
		case "startup_timeout":
			if dur, err := time.ParseDuration(firstArg(args)); err == nil && dur >= 0 {
				m.set("cluster-sync-wait", durText(dur), o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: not a duration", o.String())
			}
		case "zonal":
			m.drop(o.Line, "kubernetes %s: not carried; it would have preferred endpoints of the client's zone", o.String())
		case "multicluster":
			m.drop(o.Line, "kubernetes %s: not carried; it would have answered multi-cluster Services (ServiceImport)", o.String())
		case "apiserver_qps", "apiserver_burst", "apiserver_max_inflight":
			m.drop(o.Line, "kubernetes %s: not carried; nodedns lists once from the API server's watch cache and then watches", o.String())
		default:
			m.drop(o.Line, "kubernetes option %s: not known to nodedns", o.String())
		}
	}
	if !pods {
		m.set("pods", "disabled", d.Line, "the kubernetes directive has no pods option: CoreDNS then answers no pod names (nodedns's default is insecure)")
	}
	if !fall {
		m.set("fallthrough", []string{}, d.Line, "the kubernetes directive has no fallthrough: a name the cluster does not know is NXDOMAIN, in the reverse zones too (nodedns's default falls through in-addr.arpa and ip6.arpa)")
	}
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// fwdOptions are the options of a forward directive.
type fwdOptions struct {
	forceTCP, preferUDP bool
	policy              string
	tlsName             string
	ca                  string
	caLine              int
	maxConcurrent       int
	maxConcurrentLine   int
}

func (m *migrator) forwardOptions(d *Directive) fwdOptions {
	var o fwdOptions
	for _, x := range d.Block {
		args := x.ArgTexts()
		switch x.Name {
		case "force_tcp":
			o.forceTCP = true
		case "prefer_udp":
			o.preferUDP = true
		case "policy":
			if len(args) == 1 && slices.Contains([]string{"random", "round_robin", "sequential"}, args[0]) {
				o.policy = args[0]
			} else {
				m.drop(x.Line, "forward %s: want random, round_robin or sequential", x.String())
			}
		case "tls":
			switch len(args) {
			case 0:
			case 1:
				o.ca, o.caLine = args[0], x.Line
			case 2:
				m.drop(x.Line, "forward %s: the client certificate is not carried (nodedns presents none)", x.String())
			default:
				m.drop(x.Line, "forward %s: the client certificate is not carried (nodedns presents none); its CA is", x.String())
				o.ca, o.caLine = args[2], x.Line
			}
		case "tls_servername":
			o.tlsName = firstArg(args)
		case "max_concurrent":
			if n, err := strconv.Atoi(firstArg(args)); err == nil && n > 0 {
				o.maxConcurrent, o.maxConcurrentLine = n, x.Line
			} else {
				m.drop(x.Line, "forward %s: not carried", x.String())
			}
		case "expire":
			if dur, err := time.ParseDuration(firstArg(args)); err != nil || dur != 10*time.Second {
				m.drop(x.Line, "forward %s: not carried; nodedns closes upstream connections idle for 10s", x.String())
			}
		case "max_fails":
			if firstArg(args) != "2" {
				m.drop(x.Line, "forward %s: not carried; nodedns marks a server down after 2 failures in a row", x.String())
			}
		case "health_check":
			if dur, err := time.ParseDuration(firstArg(args)); err != nil || dur != 500*time.Millisecond || len(args) > 1 {
				m.drop(x.Line, "forward %s: not carried; nodedns probes a server marked down with . NS every 0.5s", x.String())
			}
		case "read_timeout":
			if dur, err := time.ParseDuration(firstArg(args)); err != nil || dur != 2*time.Second {
				m.drop(x.Line, "forward %s: not carried; nodedns waits 2s for one upstream's reply", x.String())
			}
		case "except":
			m.drop(x.Line, "forward %s: not carried; names under those zones would not have been forwarded", x.String())
		case "next", "failover":
			m.drop(x.Line, "forward %s: not carried; those rcodes would have been passed on (to the next plugin, or another upstream)", x.String())
		case "next_on_nodata":
			m.drop(x.Line, "forward %s: not carried; NODATA answers would have been passed to the next plugin", x.String())
		case "failfast_all_unhealthy_upstreams":
			m.drop(x.Line, "forward %s: not carried; with every upstream down it would have answered SERVFAIL at once (nodedns tries one anyway, and serves stale answers)", x.String())
		case "max_age", "max_idle_conns", "max_connect_attempts":
			m.drop(x.Line, "forward %s: not carried; nodedns bounds its upstream connections itself (8 per TCP or TLS server)", x.String())
		case "resolver", "source_address", "doh_method":
			m.drop(x.Line, "forward %s: not carried", x.String())
		default:
			m.drop(x.Line, "forward option %s: not known to nodedns", x.String())
		}
	}
	if o.forceTCP && o.preferUDP {
		// CoreDNS: force_tcp takes precedence.
		o.preferUDP = false
	}
	return o
}

// fwdServers are the TO addresses of a forward directive in nodedns's form.
type fwdServers struct {
	addrs      []string
	resolvConf bool // /etc/resolv.conf, or node-cache's upstream pillar
	pillar     bool // node-cache's upstream pillar
}

func (m *migrator) forwardServers(d *Directive, tos []Token, o fwdOptions) fwdServers {
	var s fwdServers
	for _, t := range tos {
		to := t.Text
		switch {
		case to == pillarUpstreams:
			s.resolvConf, s.pillar = true, true
		case to == pillarClusterDNS:
			ip := m.opts.ClusterDNS
			if ip == "" {
				ip, _ = m.opts.Env("KUBE_DNS_UPSTREAM_SERVICE_HOST")
			}
			if ip == "" {
				m.drop(t.Line, "forward to %s: node-cache fills it at start with the kube-dns-upstream Service's ClusterIP; give that with --cluster-dns (without it nodedns answers the zone itself, from the API server)", to)
				continue
			}
			if _, err := netip.ParseAddr(ip); err != nil {
				m.drop(t.Line, "forward to %s = %q: not an IP address", to, ip)
				continue
			}
			s.addrs = append(s.addrs, ip)
		case strings.HasPrefix(to, "__PILLAR__"):
			m.drop(t.Line, "forward to %s: a placeholder of nodelocaldns.yaml left unfilled", to)
		case strings.HasPrefix(to, "/"):
			if to == resolvConf {
				s.resolvConf = true
			} else {
				m.drop(t.Line, "forward to the nameservers of %s: not carried; give them as addresses", to)
			}
		default:
			a, ok := m.serverAddr(t, o)
			if ok {
				s.addrs = append(s.addrs, a)
			}
		}
	}
	return s
}

// serverAddr converts one CoreDNS TO address.
func (m *migrator) serverAddr(t Token, o fwdOptions) (string, bool) {
	to := t.Text
	scheme, host := "dns", to
	if sc, rest, ok := strings.Cut(to, "://"); ok {
		scheme, host = strings.ToLower(sc), rest
	}
	switch scheme {
	case "dns", "tls":
	default:
		m.drop(t.Line, "forward to %s: DNS over %s is not carried (nodedns speaks plain DNS and DNS over TLS)", to, strings.ToUpper(scheme))
		return "", false
	}
	name := ""
	if i := strings.LastIndexByte(host, '%'); i >= 0 {
		// CoreDNS's per-server TLS name (tls://IP%name), or an IPv6 zone.
		name, host = host[i+1:], host[:i]
		if j := strings.LastIndexByte(name, ':'); j >= 0 {
			host += name[j:]
			name = name[:j]
		}
		if strings.HasPrefix(host, "[") && !strings.HasSuffix(host, "]") && !strings.Contains(host, "]:") {
			host += "]"
		}
		if scheme != "tls" {
			m.drop(t.Line, "forward to %s: addresses with a zone are not carried", to)
			return "", false
		}
	}
	if scheme == "tls" && name == "" {
		name = o.tlsName
	}
	out := host
	if scheme == "tls" {
		out = "tls://" + host
		if name != "" {
			out += "#" + name
		}
	}
	sp, err := upstream.ParseServer(out)
	if err != nil {
		m.drop(t.Line, "forward to %s: %v", to, err)
		return "", false
	}
	if sp.ByName() {
		in := false
		for _, z := range m.clusterZones {
			if dns.IsSubDomain(z, sp.Name) {
				in = true
			}
		}
		if !in {
			m.drop(t.Line, "forward to %s: a host name outside the cluster zone; CoreDNS resolves it, nodedns takes only addresses and names of the cluster zone", to)
			return "", false
		}
	}
	return out, true
}

func (m *migrator) forward(b *block, d *Directive, clusterFwd, reverseOnly bool) {
	args := d.Args
	if len(args) < 2 {
		m.drop(d.Line, "%s: wants FROM and at least one TO", d.String())
		return
	}
	from, err := parseKey(args[0].Text)
	if err != nil || len(from.zones) != 1 {
		m.drop(d.Line, "%s: FROM %q is not one zone", d.String(), args[0].Text)
		return
	}
	fromZone := from.zones[0]
	o := m.forwardOptions(d)
	before := len(m.dropped)
	srv := m.forwardServers(d, args[1:], o)
	if len(srv.addrs) == 0 && !srv.resolvConf {
		if len(m.dropped) == before {
			m.drop(d.Line, "%s: no server left to forward to", d.String())
		}
		return
	}
	switch {
	case clusterFwd && fromZone == ".":
		m.clusterForward(d, srv, o)
	case reverseOnly && fromZone == ".":
		m.reverseFwds = append(m.reverseFwds, pendingFwd{b: b, d: d, srv: srv, o: o})
	case b.root && fromZone == ".":
		m.rootForward = d
		m.rootServers = srv
		m.upstreamOptions(d, o)
	default:
		zones := b.zones
		if fromZone != "." {
			zones = []string{fromZone}
		}
		for _, z := range zones {
			m.stubDomain(d, z, srv, o)
		}
	}
}

// upstreamOptions carries the forward options of the default upstreams.
func (m *migrator) upstreamOptions(d *Directive, o fwdOptions) {
	if o.forceTCP {
		m.set("force-tcp", true, d.Line)
	}
	if o.preferUDP {
		m.set("prefer-udp", true, d.Line)
	}
	if o.policy != "" {
		m.set("policy", o.policy, d.Line)
	}
	if o.ca != "" {
		m.set("upstream-ca", o.ca, o.caLine)
	}
	if o.maxConcurrent > 0 {
		m.set("max-inflight", o.maxConcurrent, o.maxConcurrentLine,
			fmt.Sprintf("line %d: forward max_concurrent (CoreDNS answers REFUSED past it, nodedns SERVFAIL)", o.maxConcurrentLine))
	}
}

// pendingFwd is a reverse-zone block's forward, decided once the cluster
// zone's arrangement is known.
type pendingFwd struct {
	b   *block
	d   *Directive
	srv fwdServers
	o   fwdOptions
}

func (m *migrator) clusterForward(d *Directive, srv fwdServers, o fwdOptions) {
	if srv.resolvConf || len(srv.addrs) == 0 {
		m.drop(d.Line, "%s: the cluster zone forwarded to the node's resolvers is not carried; nodedns needs the cluster DNS's address (cluster-dns)", d.String())
		return
	}
	first := srv.addrs[0]
	sp, err := upstream.ParseServer(first)
	if err != nil || sp.Scheme != "dns" || sp.ByName() {
		m.drop(d.Line, "%s: nodedns asks the cluster DNS by address over plain DNS; %s is not carried", d.String(), first)
		return
	}
	if len(srv.addrs) > 1 {
		m.drop(d.Line, "%s: nodedns asks one cluster DNS (%s); %s not carried", d.String(), first, strings.Join(srv.addrs[1:], " "))
	}
	m.clusterFwd = true
	m.set("cluster-zone", "forward", d.Line, fmt.Sprintf("line %d: the cluster zone is forwarded to the cluster DNS (NodeLocal DNSCache's arrangement); see the README on when to answer it locally instead", d.Line))
	cd := first
	if sp.Addr.Port() == 53 {
		cd = sp.Addr.Addr().String()
	}
	m.set("cluster-dns", cd, d.Line)
	proto := "udp"
	if o.forceTCP {
		proto = "tcp"
	}
	m.set("cluster-dns-protocol", proto, d.Line)
	if o.policy != "" && len(srv.addrs) > 1 {
		m.drop(d.Line, "forward policy %s for the cluster DNS: not carried (one server)", o.policy)
	}
	if o.ca != "" || o.maxConcurrent > 0 {
		m.drop(d.Line, "forward options tls / max_concurrent for the cluster DNS: not carried")
	}
}

func (m *migrator) stubDomain(d *Directive, zone string, srv fwdServers, o fwdOptions) {
	if zone == "." || m.isClusterZone(zone) {
		m.drop(d.Line, "%s: forwarding %s is not carried; nodedns answers it itself", d.String(), zone)
		return
	}
	if srv.resolvConf {
		m.drop(d.Line, "%s: stub domain %s to the node's resolvers is not carried; the default upstreams answer it", d.String(), trimDot(zone))
		if len(srv.addrs) == 0 {
			return
		}
	}
	key := trimDot(zone)
	if old, ok := m.stubs[key]; ok {
		m.drop(d.Line, "%s: stub domain %s already forwarded at line %d; kept that", d.String(), key, old.line)
		return
	}
	st := &stub{servers: srv.addrs, forceTCP: o.forceTCP, preferUDP: o.preferUDP, policy: o.policy, line: d.Line,
		comments: []string{fmt.Sprintf("line %d: %s", d.Line, d.String())}}
	m.stubs[key] = st
	if o.ca != "" {
		m.set("upstream-ca", o.ca, o.caLine)
	}
	if o.maxConcurrent > 0 {
		m.drop(o.maxConcurrentLine, "forward max_concurrent %d for %s: not carried; nodedns bounds queries in flight for every zone together (max-inflight)", o.maxConcurrent, key)
	}
}

func (m *migrator) cache(b *block, d *Directive, clusterFwd bool) {
	args := d.ArgTexts()
	var maxTTL, negTTL, minTTL string
	if len(args) > 0 {
		if n, err := strconv.Atoi(args[0]); err == nil {
			if n <= 0 {
				m.drop(d.Line, "%s: a TTL must be positive", d.String())
			} else {
				maxTTL = durText(time.Duration(n) * time.Second)
				negTTL = maxTTL
			}
			args = args[1:]
		}
	}
	for _, z := range args {
		if zz := strings.ToLower(dns.Fqdn(z)); zz != "." && !slices.Contains(b.zones, zz) {
			m.drop(d.Line, "%s: caching only %s is not carried; nodedns caches every external name", d.String(), z)
			break
		}
	}
	succCap, denCap := -1, -1
	var prefetch, stale string
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "success", "denial":
			if len(oa) == 0 {
				m.drop(o.Line, "cache %s: wants a capacity", o.String())
				continue
			}
			n, err := strconv.Atoi(oa[0])
			if err != nil || n < 0 {
				m.drop(o.Line, "cache %s: bad capacity", o.String())
				continue
			}
			var ttl, mttl string
			if len(oa) > 1 {
				if t, ok := seconds(oa[1]); ok && t > 0 {
					ttl = durText(time.Duration(t) * time.Second)
				}
			}
			if len(oa) > 2 {
				if t, ok := seconds(oa[2]); ok {
					mttl = durText(time.Duration(t) * time.Second)
				}
			}
			if o.Name == "success" {
				succCap = n
				if ttl != "" {
					maxTTL = ttl
				}
				if mttl != "" {
					minTTL = mttl
				}
			} else {
				denCap = n
				if ttl != "" {
					negTTL = ttl
				}
				if mttl != "" && mttl != "5s" {
					m.drop(o.Line, "cache %s: the minimum TTL of denials is not carried (nodedns keeps a denial for its SOA's TTL, capped by max-negative-ttl)", o.String())
				}
			}
		case "prefetch":
			if n, err := strconv.Atoi(firstArg(oa)); err == nil && n >= 0 {
				prefetch = strconv.Itoa(n)
			}
			if len(oa) > 1 && !(oa[1] == "1m" && (len(oa) < 3 || oa[2] == "10%")) {
				m.drop(o.Line, "cache %s: the window and percentage are not carried; nodedns refreshes an entry hit that often before it expires", o.String())
			}
		case "serve_stale":
			dur := time.Hour
			if len(oa) > 0 {
				if x, err := time.ParseDuration(oa[0]); err == nil && x >= 0 {
					dur = x
				}
			}
			stale = durText(dur)
			if len(oa) > 2 {
				m.drop(o.Line, "cache %s: the stale TTL and recheck options are not carried", o.String())
			}
		case "servfail":
			if dur, err := time.ParseDuration(firstArg(oa)); err != nil || dur != 5*time.Second {
				m.drop(o.Line, "cache %s: not carried; nodedns keeps a SERVFAIL for 5s", o.String())
			}
		case "disable":
			// Cluster answers come from the index and are never cached:
			// disabling the cache for the cluster zone is what nodedns does.
			zs := oa[min(1, len(oa)):]
			cluster := len(zs) > 0 && (oa[0] == "success" || oa[0] == "denial")
			for _, z := range zs {
				if !m.isClusterZone(strings.ToLower(dns.Fqdn(z))) {
					cluster = false
				}
			}
			if !cluster {
				m.drop(o.Line, "cache %s: not carried; nodedns caches answers and denials of every external name", o.String())
			}
		case "keepttl":
			m.drop(o.Line, "cache %s: not carried; nodedns counts TTLs down", o.String())
		case "serve_stale_policy":
			m.drop(o.Line, "cache %s: not carried", o.String())
		default:
			m.drop(o.Line, "cache option %s: not known to nodedns", o.String())
		}
	}
	switch {
	case clusterFwd:
		// node-cache's cache of the cluster zone: nodedns caps forwarded
		// cluster answers at cluster-ttl.
		ttl := maxTTL
		if negTTL != "" && (ttl == "" || durLess(negTTL, ttl)) {
			ttl = negTTL
		}
		if ttl != "" {
			// Applies only if the block's forward is carried (finish).
			m.clusterCache = &value{v: ttl, line: d.Line, comments: []string{
				fmt.Sprintf("line %d: cache in the cluster zone's block; nodedns keeps forwarded cluster answers at most cluster-ttl (the shorter of its TTLs)", d.Line)}}
		}
		return
	case b.kube && !b.root:
		// The cluster zone's own block: nodedns answers it from the index,
		// never cached.
		return
	}
	m.seen("cache")
	if maxTTL != "" {
		m.set("max-ttl", maxTTL, d.Line)
	}
	if negTTL != "" {
		m.set("max-negative-ttl", negTTL, d.Line)
	}
	if minTTL != "" {
		m.set("min-ttl", minTTL, d.Line)
	}
	if prefetch != "" {
		n, _ := strconv.Atoi(prefetch)
		m.set("prefetch", n, d.Line)
	}
	if stale != "" {
		m.set("serve-stale", stale, d.Line, "nodedns serves a stale answer when refreshing it fails (CoreDNS's verify mode)")
	}
	if succCap >= 0 || denCap >= 0 {
		if succCap < 0 {
			succCap = 10000
		}
		if denCap < 0 {
			denCap = 10000
		}
		m.set("cache-size", max(succCap+denCap, 1), d.Line, "CoreDNS's success and denial capacities together")
	}
}

func durLess(a, b string) bool {
	x, err1 := time.ParseDuration(a)
	y, err2 := time.ParseDuration(b)
	return err1 == nil && err2 == nil && x < y
}

func (m *migrator) hosts(b *block, d *Directive) {
	if v, ok := m.vals["hosts"]; ok {
		m.drop(d.Line, "second hosts directive: not carried; nodedns has one hosts table (line %d)", v.line)
		return
	}
	h := &hostsOut{file: "/etc/hosts"}
	args := d.ArgTexts()
	if len(args) > 0 {
		h.file = args[0]
		for _, z := range args[1:] {
			h.zones = append(h.zones, trimDot(strings.ToLower(dns.Fqdn(z))))
		}
	}
	if len(h.zones) == 0 && !b.root {
		for _, z := range b.zones {
			h.zones = append(h.zones, trimDot(z))
		}
	}
	if slices.Contains(h.zones, ".") {
		h.zones = nil
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		if _, err := netip.ParseAddr(o.Name); err == nil {
			h.entries = append(h.entries, strings.Join(append([]string{o.Name}, oa...), " "))
			continue
		}
		switch o.Name {
		case "ttl":
			if n, ok := seconds(firstArg(oa)); ok && n > 0 {
				h.ttl = durText(time.Duration(n) * time.Second)
			} else {
				m.drop(o.Line, "hosts %s: want a positive number of seconds", o.String())
			}
		case "no_reverse":
			h.noReverse = true
		case "reload":
			if dur, err := time.ParseDuration(firstArg(oa)); err == nil && dur >= 0 {
				h.reload = durText(dur)
			} else {
				m.drop(o.Line, "hosts %s: not a duration", o.String())
			}
		case "fallthrough":
			h.fallSet = true
			for _, z := range oa {
				h.fallZones = append(h.fallZones, trimDot(strings.ToLower(dns.Fqdn(z))))
			}
		default:
			m.drop(o.Line, "hosts option %s: not known to nodedns", o.String())
		}
	}
	m.set("hosts", h, d.Line, fmt.Sprintf("line %d: %s (the file is read in the agent's pod: mount it there)", d.Line, d.String()))
}

func (m *migrator) rewrite(b *block, d *Directive) {
	args := d.ArgTexts()
	mode := ""
	if len(args) > 0 && (args[0] == "stop" || args[0] == "continue") {
		mode, args = args[0], args[1:]
	}
	if len(args) == 0 && d.HasBlock {
		// The old block form: rewrite [stop|continue] { name ...; answer ... }.
		for _, o := range d.Block {
			switch o.Name {
			case "name":
				m.nameRule(b, d, o.Line, mode, o.ArgTexts())
			case "answer":
				// nodedns maps answers back itself.
			default:
				m.drop(o.Line, "rewrite %s: not carried; nodedns rewrites query names only", o.String())
			}
		}
		return
	}
	if len(args) == 0 {
		m.drop(d.Line, "%s: nothing to rewrite", d.String())
		return
	}
	if args[0] != "name" {
		m.drop(d.Line, "%s: not carried; nodedns rewrites query names only (this rewrites the %s)", d.String(), args[0])
		return
	}
	m.nameRule(b, d, d.Line, mode, args[1:])
}

func (m *migrator) nameRule(b *block, d *Directive, line int, mode string, args []string) {
	typ := "exact"
	if len(args) > 0 && slices.Contains([]string{"exact", "prefix", "suffix", "substring", "regex"}, args[0]) {
		typ, args = args[0], args[1:]
	}
	if len(args) < 2 {
		m.drop(line, "%s: wants FROM and TO", d.String())
		return
	}
	from, to, opts := args[0], args[1], args[2:]
	for i := 0; i < len(opts); i++ {
		switch opts[i] {
		case "metadata":
			m.drop(line, "%s: request metadata in TO is not carried; the rule is dropped", d.String())
			return
		case "answer":
			if i+1 < len(opts) && opts[i+1] == "auto" {
				i++
				continue
			}
			// answer name/value FROM TO: nodedns maps every rewritten name
			// back (answer auto).
			i += 3
		}
	}
	if !b.root && !ruleInZones(typ, from, b.zones) {
		m.drop(line, "%s: a %s rule in the block for %s would apply to every zone in nodedns; not carried", d.String(), typ, strings.Join(trimAll(b.zones), " "))
		return
	}
	r := rewriteOut{typ: typ, from: from, to: to, mode: mode}
	v, ok := m.vals["rewrite"]
	if !ok {
		m.vals["rewrite"] = &value{v: []rewriteOut{r}, line: line}
		return
	}
	v.v = append(v.v.([]rewriteOut), r)
}

func trimAll(zs []string) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = trimDot(z)
	}
	return out
}

// ruleInZones: a rule from a zone's block keeps its meaning globally only
// when it can match nothing outside the zone.
func ruleInZones(typ, from string, zones []string) bool {
	var name string
	switch typ {
	case "exact":
		name = strings.ToLower(dns.Fqdn(from))
	case "suffix":
		name = strings.ToLower(dns.Fqdn(strings.TrimPrefix(from, ".")))
	default:
		return false
	}
	for _, z := range zones {
		if z == "." || dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

func (m *migrator) loadbalance(d *Directive) {
	args := d.ArgTexts()
	if len(args) == 0 || args[0] == "round_robin" {
		m.set("loadbalance", "round_robin", d.Line)
		m.noBlock(d)
		return
	}
	m.drop(d.Line, "%s: not carried; nodedns rotates A and AAAA records (round_robin) only", d.String())
}

func (m *migrator) autopath(d *Directive) {
	m.seen("autopath")
	args := d.ArgTexts()
	if len(args) > 0 && args[len(args)-1] == "@kubernetes" {
		m.set("autopath", true, d.Line, fmt.Sprintf("line %d: %s (nodedns walks the search path of this node's pods)", d.Line, d.String()))
		return
	}
	m.drop(d.Line, "%s: not carried; nodedns walks the search path of the cluster zone (autopath @kubernetes) only", d.String())
}

func (m *migrator) health(d *Directive) {
	m.noteAdmin(d, "/health", ":8080")
	for _, o := range d.Block {
		if o.Name == "lameduck" {
			if dur, err := time.ParseDuration(firstArg(o.ArgTexts())); err == nil && dur >= 0 {
				m.set("lameduck", durText(dur), o.Line)
				continue
			}
		}
		m.drop(o.Line, "health option %s: not carried", o.String())
	}
}

// noteAdmin records a health or ready endpoint: nodedns serves both on the
// admin address.
func (m *migrator) noteAdmin(d *Directive, path, def string) {
	a := firstArg(d.ArgTexts())
	if a == "" {
		a = def
	}
	m.adminNotes = append(m.adminNotes, fmt.Sprintf("line %d: %s on %s; nodedns serves %s on the admin address (probes: nodedns probe health|ready)", d.Line, d.Name, a, path))
}

func (m *migrator) prometheus(d *Directive) {
	a := firstArg(d.ArgTexts())
	if a == "" {
		a = "localhost:9153"
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		m.drop(d.Line, "%s: not an address with a port", d.String())
		return
	}
	switch host {
	case "", "::":
		// Every address, as CoreDNS listens.
		host = "0.0.0.0"
	case "localhost":
		host = "127.0.0.1"
	}
	ip, err1 := netip.ParseAddr(host)
	p, err2 := strconv.ParseUint(port, 10, 16)
	if err1 != nil || err2 != nil || p == 0 {
		m.drop(d.Line, "%s: not an IP address with a port", d.String())
		return
	}
	m.set("admin", netip.AddrPortFrom(ip, uint16(p)).String(), d.Line,
		fmt.Sprintf("line %d: %s (nodedns serves /metrics, /health and /ready there)", d.Line, d.String()))
	m.noBlock(d)
}

func (m *migrator) logDirective(b *block, d *Directive) {
	m.set("log-queries", 1, d.Line, fmt.Sprintf("line %d: %s (every query logged, in nodedns's format)", d.Line, d.String()))
	if !b.root {
		m.comment("log-queries", "nodedns logs queries of every zone, not only "+strings.Join(trimAll(b.zones), " "))
	}
	if len(d.Args) > 0 && len(d.Args) < 3 {
		// NAMES or a format: nodedns logs every name in its own format.
		m.comment("log-queries", "the names and format given to log are not carried")
	}
	for _, o := range d.Block {
		if o.Name == "class" && slices.Contains(o.ArgTexts(), "all") {
			continue
		}
		m.drop(o.Line, "log option %s: not carried; nodedns logs every query (a fraction with log-queries)", o.String())
	}
}

func (m *migrator) bind(d *Directive) {
	for _, a := range d.Args {
		ip, err := netip.ParseAddr(a.Text)
		if err != nil {
			m.drop(a.Line, "bind %s: interface names are not carried; give the addresses (local-ip)", a.Text)
			continue
		}
		if !slices.Contains(m.binds, ip.String()) {
			m.binds = append(m.binds, ip.String())
		}
		if m.bindLine == 0 {
			m.bindLine = d.Line
		}
	}
	for _, o := range d.Block {
		m.drop(o.Line, "bind option %s: not carried", o.String())
	}
}

func (m *migrator) bufsize(d *Directive) {
	n, err := strconv.Atoi(firstArg(d.ArgTexts()))
	if d.Args == nil {
		n, err = 1232, nil
	}
	if err != nil || n < 512 || n > 4096 {
		m.drop(d.Line, "%s: want 512 to 4096", d.String())
		return
	}
	m.set("max-udp-size", n, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
}
