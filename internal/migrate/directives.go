package migrate

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
)

// unsupported says what the plugins nodedns does not carry would have done.
var unsupported = map[string]string{
	"auto":        "served zones from zone files in a directory",
	"azure":       "served zones from Azure DNS",
	"clouddns":    "served zones from Google Cloud DNS",
	"debug":       "disabled panic recovery and printed debug output (nodedns: log-level: debug)",
	"dnssec":      "signed answers with DNSSEC on the fly",
	"dynupdate":   "accepted dynamic updates (RFC 2136)",
	"erratic":     "answered erratically for testing",
	"etcd":        "served records from etcd (SkyDNS)",
	"geoip":       "looked up the client's location",
	"grpc":        "forwarded queries over gRPC",
	"grpc_server": "served DNS over gRPC",
	"https":       "served DNS over HTTPS",
	"https3":      "served DNS over HTTP/3",
	"metadata":    "made request metadata available to other plugins",
	"multisocket": "served on several sockets per port",
	"nomad":       "served records from Nomad",
	"on":          "ran commands on startup or shutdown",
	"pprof":       "served Go profiling data",
	"proxyproto":  "accepted the PROXY protocol",
	"quic":        "served DNS over QUIC",
	"root":        "set the directory of relative file names",
	"route53":     "served zones from AWS Route 53",
	"secondary":   "served zones transferred from a primary",
	"shed":        "shed load above a CPU threshold",
	"sign":        "signed zone files with DNSSEC",
	"siit":        "translated IPv4 and IPv6 addresses (SIIT)",
	"timeouts":    "set the server's read, write and idle timeouts",
	"tls":         "configured TLS for the server's own DNS-over-TLS listeners",
	"trace":       "traced queries (OpenTracing)",
	"transfer":    "served zone transfers",
	"tsig":        "verified TSIG signatures",
	"whoami":      "answered with the client's address and port",
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
	case "template":
		m.template(b, d)
	case "acl":
		m.acl(b, d)
	case "local":
		m.local(d)
	case "chaos":
		m.chaos(d)
	case "minimal":
		m.minimal(d)
	case "header":
		m.headerFlags(d)
	case "dnstap":
		m.dnstap(b, d)
	case "view":
		// Never here: a block with a view is carried by viewBlock.
		m.drop(d.Line, "%s: not carried", d.String())
	case "autopath":
		m.autopath(d)
	case "health":
		m.health(d)
	case "ready":
		m.noteAdmin(d, "/ready", ":8181")
	case "prometheus":
		m.prometheus(d)
	case "reload":
		m.seen["reload"] = true
		m.noBlock(d)
	case "loop":
		m.seen["loop"] = true
		set(m, &m.cfg.LoopCheck, true, d.Line)
	case "errors":
		m.seen["errors"] = true
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
	case "file":
		m.file(b, d)
	case "nsid":
		m.nsid(d)
	case "dns64":
		m.dns64(b, d)
	case "k8s_external":
		m.k8sExternal(b, d)
	default:
		if what, ok := unsupported[d.Name]; ok {
			m.drop(d.Line, "%s: not carried; it %s", d.String(), what)
		} else {
			m.drop(d.Line, "%s: unknown directive, not carried", d.String())
		}
	}
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

// secs is n seconds as a setting's duration.
func secs(n int) config.Duration { return config.Duration(time.Duration(n) * time.Second) }

func trimDot(z string) string {
	if z == "." {
		return z
	}
	return strings.TrimSuffix(z, ".")
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func (m *migrator) loadbalance(d *Directive) {
	args := d.ArgTexts()
	if len(args) == 0 || args[0] == "round_robin" {
		set(m, &m.cfg.LoadBalance, config.LoadBalanceRoundRobin, d.Line)
		m.noBlock(d)
		return
	}
	m.drop(d.Line, "%s: not carried; nodedns rotates A and AAAA records (round_robin) only", d.String())
}

func (m *migrator) autopath(d *Directive) {
	m.seen["autopath"] = true
	args := d.ArgTexts()
	if len(args) > 0 && args[len(args)-1] == "@kubernetes" {
		set(m, &m.cfg.Autopath, true, d.Line, fmt.Sprintf("line %d: %s (nodedns walks the search path of this node's pods)", d.Line, d.String()))
		return
	}
	m.drop(d.Line, "%s: not carried; nodedns walks the search path of the cluster zone (autopath @kubernetes) only", d.String())
}

func (m *migrator) health(d *Directive) {
	m.noteAdmin(d, "/health", ":8080")
	for _, o := range d.Block {
		if o.Name == "lameduck" {
			if dur, err := time.ParseDuration(firstArg(o.ArgTexts())); err == nil && dur >= 0 {
				set(m, &m.cfg.Lameduck, config.Duration(dur), o.Line)
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
	set(m, &m.cfg.Admin, netip.AddrPortFrom(ip, uint16(p)).String(), d.Line,
		fmt.Sprintf("line %d: %s (nodedns serves /metrics, /health and /ready there)", d.Line, d.String()))
	m.noBlock(d)
}

func (m *migrator) logDirective(b *block, d *Directive) {
	set(m, &m.cfg.LogQueries, 1, d.Line, fmt.Sprintf("line %d: %s (every query logged, in nodedns's format)", d.Line, d.String()))
	if !b.root {
		m.comment(&m.cfg.LogQueries, "nodedns logs queries of every zone, not only "+strings.Join(trimAll(b.zones), " "))
	}
	if len(d.Args) > 0 && len(d.Args) < 3 {
		// NAMES or a format: nodedns logs every name in its own format.
		m.comment(&m.cfg.LogQueries, "the names and format given to log are not carried")
	}
	var classes config.List
	for _, o := range d.Block {
		if o.Name != "class" {
			m.drop(o.Line, "log option %s: not carried; nodedns logs every query (a fraction with log-queries)", o.String())
			continue
		}
		for _, c := range o.ArgTexts() {
			c = strings.ToLower(c)
			if c != "all" && c != "success" && c != "denial" && c != "error" {
				m.drop(o.Line, "log class %s: want all, success, denial or error", c)
				continue
			}
			if !slices.Contains(classes, c) {
				classes = append(classes, c)
			}
		}
	}
	if len(classes) > 0 && !slices.Contains(classes, "all") {
		set(m, &m.cfg.LogQueriesClass, classes, d.Line, fmt.Sprintf("line %d: log's class (only replies of these classes are logged)", d.Line))
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
	set(m, &m.cfg.MaxUDPSize, n, d.Line, fmt.Sprintf("line %d: %s", d.Line, d.String()))
}
