package migrate

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
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

	// CoreDNS's forward options nodedns carries per group (chain.go).
	// failover is nil without the option.
	failover    config.List
	failfast    bool
	except      []string // lower-case FQDNs
	readTimeout time.Duration
	maxFails    *int
	hcInterval  time.Duration
	hcDomain    string
	hcNoRec     bool
	expire      time.Duration
	dohMethod   string
	next        []string // rcode names
	nextNoData  bool
	resolver    config.List
	// notes say where nodedns departs for a value given (a bound), for the
	// comments of the keys written.
	notes []string
}

func (m *migrator) forwardOptions(d *Directive) fwdOptions {
	var o fwdOptions
	for _, x := range d.Block {
		args := x.ArgTexts()
		dur := func() (time.Duration, bool) {
			v, err := time.ParseDuration(firstArg(args))
			if err != nil || len(args) == 0 {
				m.drop(x.Line, "forward %s: want a duration", x.String())
				return 0, false
			}
			return v, true
		}
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
		case "failover":
			if _, err := upstream.ParseRcodes(args, false); err != nil || len(args) == 0 {
				m.drop(x.Line, "forward %s: want error rcode names", x.String())
				continue
			}
			o.failover = upperAll(args)
		case "next":
			if _, err := upstream.ParseRcodes(args, true); err != nil || len(args) == 0 {
				m.drop(x.Line, "forward %s: want rcode names", x.String())
				continue
			}
			o.next = upperAll(args)
		case "next_on_nodata":
			o.nextNoData = true
		case "failfast_all_unhealthy_upstreams":
			o.failfast = true
		case "except":
			for _, z := range args {
				fq := dnsname.Canonical(z)
				if _, ok := dns.IsDomainName(fq); !ok || strings.Contains(fq, "..") {
					m.drop(x.Line, "forward except %s: not a domain name", z)
					continue
				}
				o.except = append(o.except, fq)
			}
		case "read_timeout":
			if v, ok := dur(); ok {
				o.readTimeout = v
				if v > 5*time.Second {
					o.readTimeout = 5 * time.Second
					o.notes = append(o.notes, fmt.Sprintf("line %d: %s; nodedns bounds a whole query to 5s, so one attempt to 5s too", x.Line, x.String()))
				} else if v <= 0 {
					m.drop(x.Line, "forward %s: must be positive", x.String())
					o.readTimeout = 0
				}
			}
		case "max_fails":
			n, err := strconv.Atoi(firstArg(args))
			if err != nil || n < 0 {
				m.drop(x.Line, "forward %s: want a count", x.String())
				continue
			}
			if n > 100 {
				o.notes = append(o.notes, fmt.Sprintf("line %d: %s; nodedns counts at most 100 failed probes (a server is then down after 101)", x.Line, x.String()))
				n = 100
			}
			o.maxFails = &n
		case "health_check":
			v, ok := dur()
			if !ok {
				continue
			}
			if v < 10*time.Millisecond {
				o.notes = append(o.notes, fmt.Sprintf("line %d: %s; nodedns pauses at least 10ms between probes", x.Line, x.String()))
				v = 10 * time.Millisecond
			}
			o.hcInterval, o.hcDomain = min(v, time.Hour), "."
			for i := 1; i < len(args); i++ {
				switch args[i] {
				case "no_rec":
					o.hcNoRec = true
				case "domain":
					if i+1 < len(args) {
						o.hcDomain = dnsname.Canonical(args[i+1])
						i++
						continue
					}
					fallthrough
				default:
					m.drop(x.Line, "forward health_check option %s: not known", args[i])
				}
			}
		case "expire":
			v, ok := dur()
			if !ok {
				continue
			}
			if v < 100*time.Millisecond {
				o.notes = append(o.notes, fmt.Sprintf("line %d: %s; nodedns keeps an idle connection at least 100ms", x.Line, x.String()))
				v = 100 * time.Millisecond
			}
			o.expire = min(v, time.Hour)
		case "doh_method":
			if a := firstArg(args); a == "GET" || a == "POST" {
				o.dohMethod = a
			} else {
				m.drop(x.Line, "forward %s: want GET or POST", x.String())
			}
		case "resolver":
			for _, a := range args {
				if _, err := upstream.NormalizeAddr(a); err != nil {
					m.drop(x.Line, "forward resolver %s: want ip[:port]", a)
					continue
				}
				o.resolver = append(o.resolver, a)
			}
		case "max_age", "max_idle_conns", "max_connect_attempts":
			m.drop(x.Line, "forward %s: not carried; nodedns bounds its upstream connections itself (8 per TCP, TLS or HTTPS server) and asks each server at most twice per query", x.String())
		case "source_address":
			m.drop(x.Line, "forward %s: not carried", x.String())
		default:
			m.drop(x.Line, "forward option %s: not known to nodedns", x.String())
		}
	}
	if o.forceTCP && o.preferUDP {
		// CoreDNS: force_tcp takes precedence.
		o.preferUDP = false
	}
	// CoreDNS's defaults, which nodedns's are: nothing to write.
	if o.readTimeout == 2*time.Second {
		o.readTimeout = 0
	}
	if o.maxFails != nil && *o.maxFails == 2 {
		o.maxFails = nil
	}
	if o.hcInterval == 500*time.Millisecond && !o.hcNoRec && (o.hcDomain == "" || o.hcDomain == ".") {
		o.hcInterval, o.hcDomain = 0, ""
	}
	if o.expire == 10*time.Second {
		o.expire = 0
	}
	if o.dohMethod == "POST" {
		o.dohMethod = ""
	}
	return o
}

func upperAll(ss []string) config.List {
	out := make(config.List, 0, len(ss))
	for _, s := range ss {
		if u := strings.ToUpper(s); !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// hasChainOptions reports whether o holds options a group of the
// cluster DNS (one fixed server) cannot take.
func (o fwdOptions) hasChainOptions() bool {
	return o.failover != nil || o.failfast || len(o.except) > 0 || o.readTimeout > 0 || o.maxFails != nil || o.hcInterval > 0 ||
		o.expire > 0 || o.dohMethod != "" || len(o.next) > 0 || o.nextNoData || len(o.resolver) > 0
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
	case "dns", "tls", "https":
	default:
		m.drop(t.Line, "forward to %s: DNS over %s is not carried (nodedns speaks plain DNS, DNS over TLS and DNS over HTTPS)", to, strings.ToUpper(scheme))
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
		if scheme == "dns" {
			m.drop(t.Line, "forward to %s: addresses with a zone are not carried", to)
			return "", false
		}
	}
	if scheme != "dns" && name == "" {
		name = o.tlsName
	}
	out := host
	if scheme != "dns" {
		out = scheme + "://" + host
		if name != "" {
			out += "#" + name
		}
	}
	sp, err := upstream.ParseServer(out)
	if err != nil {
		m.drop(t.Line, "forward to %s: %v", to, err)
		return "", false
	}
	if sp.ByName() && !dnsname.InZones(sp.Name, m.clusterZones) {
		m.hostNames = append(m.hostNames, fmt.Sprintf("line %d: %s is resolved (A and AAAA) through upstream-resolver, else the node's resolvers; unlike CoreDNS, which resolves it once at start and does not start when it does not resolve, nodedns resolves it again when its TTL runs out and answers SERVFAIL for it meanwhile if it does not resolve", t.Line, to))
	}
	return out, true
}

// forward maps a forward directive of the cluster zone's block in forward
// mode (node-cache's) or of a reverse zone's block; the forwards of other
// blocks are carried together, once the block is read (chain.go).
func (m *migrator) forward(b *block, d *Directive, clusterFwd, reverseOnly bool) {
	if !clusterFwd && !reverseOnly {
		m.queueForward(b, d)
		return
	}
	f, ok := m.readForward(d)
	if !ok {
		return
	}
	m.hostNames = append(m.hostNames, f.hostNames...)
	switch {
	case clusterFwd && f.from == ".":
		m.clusterForward(d, f.srv, f.o)
	case reverseOnly && f.from == ".":
		m.reverseFwds = append(m.reverseFwds, pendingFwd{b: b, d: d, srv: f.srv, o: f.o})
	default:
		m.queueForward(b, d)
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
	if o.failover != nil {
		set(m, &m.cfg.UpstreamFailover, o.failover, d.Line)
	} else {
		set(m, &m.cfg.UpstreamFailover, config.List{}, d.Line, fmt.Sprintf("line %d: no failover, so a SERVFAIL or REFUSED is the answer, as CoreDNS (without this key nodedns asks another upstream once)", d.Line))
	}
	if o.failfast {
		set(m, &m.cfg.UpstreamFailfast, true, d.Line)
	}
	if o.readTimeout > 0 {
		set(m, &m.cfg.UpstreamReadTimeout, config.Duration(o.readTimeout), d.Line)
	}
	if o.maxFails != nil {
		set(m, &m.cfg.UpstreamMaxFails, *o.maxFails, d.Line)
	}
	if o.hcInterval > 0 {
		set(m, &m.cfg.UpstreamHealthCheck, config.Duration(o.hcInterval), d.Line)
		if o.hcDomain != "" && o.hcDomain != "." {
			set(m, &m.cfg.UpstreamHealthCheckDomain, trimDot(o.hcDomain), d.Line)
		}
		if o.hcNoRec {
			set(m, &m.cfg.UpstreamHealthCheckNoRec, true, d.Line)
		}
	}
	if o.expire > 0 {
		set(m, &m.cfg.UpstreamExpire, config.Duration(o.expire), d.Line,
			"nodedns closes idle TCP, TLS and HTTPS connections after it; UDP exchanges never reuse a socket (a fresh source port each), where CoreDNS pools UDP sockets too")
	}
	if o.dohMethod != "" {
		set(m, &m.cfg.UpstreamDoHMethod, o.dohMethod, d.Line)
	}
	m.header = append(m.header, o.notes...)
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
	if o.hasChainOptions() {
		m.drop(d.Line, "forward options failover, next, failfast, except, read_timeout, max_fails, health_check, expire, doh_method, resolver for the cluster DNS: not carried (nodedns asks it with the defaults)")
	}
}

// stubDomain carries a single forward (a reverse zone's block) as the
// stub domain of zone.
func (m *migrator) stubDomain(d *Directive, zone string, srv fwdServers, o fwdOptions) {
	f := &fwd{d: d, from: zone, srv: srv, o: o}
	sd := m.groupOf(f)
	sd.Except = trimAll(o.except)
	m.stubChain(d, zone, srv, o, sd, []string{fmt.Sprintf("line %d: %s", d.Line, d.String())})
}

// stubChain writes the stub domain of zone: sd, the group (and its chain)
// of the forward d.
func (m *migrator) stubChain(d *Directive, zone string, srv fwdServers, o fwdOptions, sd config.StubDomain, comments []string) {
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
	comments = append(comments, o.notes...)
	if o.failover == nil {
		comments = append(comments, "failover: [] (no failover: a SERVFAIL or REFUSED is the answer, as CoreDNS)")
	}
	m.stubs[key] = &stub{StubDomain: sd, line: d.Line, comments: comments}
	if o.ca != "" {
		set(m, &m.cfg.UpstreamCA, o.ca, o.caLine)
	}
	if o.maxConcurrent > 0 {
		m.drop(o.maxConcurrentLine, "forward max_concurrent %d for %s: not carried; nodedns bounds queries in flight for every zone together (max-inflight)", o.maxConcurrent, key)
	}
}
