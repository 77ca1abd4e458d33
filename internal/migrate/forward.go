package migrate

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/upstream"
)

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
	addrs      config.List
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
		if !dnsname.InZones(sp.Name, m.clusterZones) {
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
		set(m, &m.cfg.ForceTCP, true, d.Line)
	}
	if o.preferUDP {
		set(m, &m.cfg.PreferUDP, true, d.Line)
	}
	if o.policy != "" {
		set(m, &m.cfg.Policy, o.policy, d.Line)
	}
	if o.ca != "" {
		set(m, &m.cfg.UpstreamCA, o.ca, o.caLine)
	}
	if o.maxConcurrent > 0 {
		set(m, &m.cfg.MaxInflight, o.maxConcurrent, o.maxConcurrentLine,
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
	set(m, &m.cfg.ClusterZone, config.ClusterZoneForward, d.Line, fmt.Sprintf("line %d: the cluster zone is forwarded to the cluster DNS (NodeLocal DNSCache's arrangement); see the README on when to answer it locally instead", d.Line))
	cd := first
	if sp.Addr.Port() == 53 {
		cd = sp.Addr.Addr().String()
	}
	set(m, &m.cfg.ClusterDNS, cd, d.Line)
	proto := config.ProtoUDP
	if o.forceTCP {
		proto = config.ProtoTCP
	}
	set(m, &m.cfg.ClusterDNSProtocol, proto, d.Line)
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
	m.stubs[key] = &stub{StubDomain: config.StubDomain{Servers: srv.addrs, ForceTCP: o.forceTCP, PreferUDP: o.preferUDP, Policy: o.policy},
		line: d.Line, comments: []string{fmt.Sprintf("line %d: %s", d.Line, d.String())}}
	if o.ca != "" {
		set(m, &m.cfg.UpstreamCA, o.ca, o.caLine)
	}
	if o.maxConcurrent > 0 {
		m.drop(o.maxConcurrentLine, "forward max_concurrent %d for %s: not carried; nodedns bounds queries in flight for every zone together (max-inflight)", o.maxConcurrent, key)
	}
}
