package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/pkg/metrics"
)

// Config is everything `nodedns serve` can be told, by flag or by the YAML
// file named with --config (keys are the flag names). Precedence: built-in
// defaults, then the file, then flags given on the command line.
type Config struct {
	Listen      List     `json:"listen"`
	Upstream    List     `json:"upstream"`
	Admin       string   `json:"admin"`
	AdminSocket string   `json:"admin-socket"`
	Policy      string   `json:"policy"`
	Stubs       StubsMap `json:"stub-domains"`

	CacheSize      int      `json:"cache-size"`
	MinTTL         Duration `json:"min-ttl"`
	MaxTTL         Duration `json:"max-ttl"`
	MaxNegativeTTL Duration `json:"max-negative-ttl"`
	ServeStale     Duration `json:"serve-stale"`
	Prefetch       int      `json:"prefetch"`

	MaxInflight int `json:"max-inflight"`
	// MaxClientInflight: 0 is the server's default share, negative none.
	MaxClientInflight int    `json:"max-client-inflight"`
	MaxTCPConns       int    `json:"max-tcp-conns"`
	MaxUDPSize        int    `json:"max-udp-size"`
	UDPReaders        string `json:"udp-readers"`
	UDPSockets        int    `json:"udp-sockets"`
	GoMaxProcs        int    `json:"gomaxprocs"`
	LoopCheck         bool   `json:"loop-check"`

	Kubeconfig string `json:"kubeconfig"`
	// ClusterDomain lists the cluster's zones, the primary first: a
	// string or a list in the file, a repeatable flag.
	ClusterDomain List     `json:"cluster-domain"`
	ClusterTTL    Duration `json:"cluster-ttl"`
	Pods          string   `json:"pods"`
	ClusterDNS    string   `json:"cluster-dns"`
	NodeName      string   `json:"node-name"`
	Autopath      bool     `json:"autopath"`
	// ClusterSyncWait bounds how long the listeners wait for the cluster
	// index at start when no other agent serves our addresses.
	ClusterSyncWait Duration `json:"cluster-sync-wait"`
	Search          List     `json:"search"`

	// Cluster zone options of CoreDNS's kubernetes plugin (pkg/k8s.Config).
	EndpointPodNames   bool   `json:"endpoint-pod-names"`
	IgnoreEmptyService bool   `json:"ignore-empty-service"`
	NoEndpoints        bool   `json:"no-endpoints"`
	Namespaces         List   `json:"namespaces"`
	NamespaceLabels    string `json:"namespace-labels"`
	// Fallthrough: an empty list (`--fallthrough=`, `fallthrough: []`)
	// means none; the default is the reverse zones.
	Fallthrough List `json:"fallthrough"`

	LocalIP        List     `json:"local-ip"`
	Interface      string   `json:"interface"`
	SetupInterface bool     `json:"setup-interface"`
	SetupIptables  bool     `json:"setup-iptables"`
	SyncInterval   Duration `json:"sync-interval"`
	Teardown       bool     `json:"teardown"`
	Lameduck       Duration `json:"lameduck"`

	LogLevel  string `json:"log-level"`
	LogFormat string `json:"log-format"`
	// Pprof serves /debug/pprof on the admin socket (never on --admin).
	Pprof      bool    `json:"pprof"`
	LogQueries float64 `json:"log-queries"`
	// LogQueriesClass limits the query log to these reply classes.
	LogQueriesClass List `json:"log-queries-class"`

	// path is the --config file, watched for live reload.
	path string
	// searchSet records whether --search was given, since an empty list
	// ("no extra domains") differs from "take them from resolv.conf".
	searchSet bool
}

// schedulerProcs is the GOMAXPROCS the agent runs with: --gomaxprocs when
// given; else $GOMAXPROCS when set (0: leave it); else one P for each UDP
// thread reader, which blocks holding its P (pkg/server/udpthread_linux.go),
// plus one for the rest of the agent. More Ps than that measured dearer per
// query: idle Ps spin threads up on every wake-up (bench/RESULTS.md).
func (c *Config) schedulerProcs() int {
	switch {
	case c.GoMaxProcs > 0:
		return c.GoMaxProcs
	case os.Getenv("GOMAXPROCS") != "":
		return 0
	case c.UDPReaders == "threads":
		return c.udpSockets()*len(listenAddrs(*c)) + 1
	}
	return 1
}

// udpSockets is the number of UDP sockets (and readers) per listen address.
func (c *Config) udpSockets() int {
	if c.UDPSockets > 0 {
		return c.UDPSockets
	}
	return 1
}

func defaultConfig() Config {
	return Config{
		Admin:           "127.0.0.1:9253",
		Policy:          "random",
		CacheSize:       10000,
		MaxTTL:          Duration(time.Hour),
		MaxNegativeTTL:  Duration(30 * time.Minute),
		ServeStale:      Duration(time.Hour),
		Prefetch:        2,
		MaxInflight:     2000,
		MaxTCPConns:     1000,
		MaxUDPSize:      1232,
		UDPReaders:      "threads",
		LoopCheck:       true,
		ClusterDomain:   List{"cluster.local"},
		Fallthrough:     List{"in-addr.arpa", "ip6.arpa"},
		ClusterTTL:      Duration(5 * time.Second),
		Pods:            "insecure",
		NodeName:        os.Getenv("NODE_NAME"),
		Autopath:        true,
		ClusterSyncWait: Duration(5 * time.Second),
		Interface:       "nodelocaldns",
		SetupInterface:  true,
		SetupIptables:   true,
		SyncInterval:    Duration(60 * time.Second),
		Teardown:        true,
		Lameduck:        Duration(5 * time.Second),
		LogLevel:        "info",
		LogFormat:       "text",
	}
}

// bind registers every serve flag on fs, writing into c; the current values
// of c are the flags' defaults.
func (c *Config) bind(fs *flag.FlagSet, configPath *string) {
	fs.StringVar(configPath, "config", *configPath, "YAML file with the same settings (keys are flag names) plus stub-domains; flags override it")
	fs.Var(&c.Listen, "listen", "comma-separated ip:port to serve DNS on, UDP and TCP (default: port 53 of each --local-ip)")
	fs.Var(&c.Upstream, "upstream", "comma-separated ip[:port] of upstream resolvers (default: nameservers in /etc/resolv.conf, minus our own addresses)")
	fs.StringVar(&c.Admin, "admin", c.Admin, "ip:port of the HTTP admin endpoint (/health, /ready, /metrics, /stats); empty disables it")
	fs.StringVar(&c.AdminSocket, "admin-socket", c.AdminSocket, "unix socket serving the admin endpoint too (the DaemonSet's probes use it)")
	fs.StringVar(&c.Policy, "policy", c.Policy, "upstream selection: random, round_robin or sequential")
	fs.Var(&c.Stubs, "stub-domain", "zone=ip[:port][,ip...]; repeat for several zones (longest zone wins)")
	fs.IntVar(&c.CacheSize, "cache-size", c.CacheSize, "maximum cached answers (external names)")
	fs.Var(&c.MinTTL, "min-ttl", "lower bound on the lifetime of cached positive answers")
	fs.Var(&c.MaxTTL, "max-ttl", "upper bound on the lifetime of cached positive answers")
	fs.Var(&c.MaxNegativeTTL, "max-negative-ttl", "upper bound on cached NXDOMAIN/NODATA")
	fs.Var(&c.ServeStale, "serve-stale", "how long past expiry an answer may be served when upstreams fail (0 disables)")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "hits that make an entry popular enough to refresh before it expires (0 disables)")
	fs.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "queries resolved at once off the readers; beyond it: SERVFAIL at once")
	fs.IntVar(&c.MaxClientInflight, "max-client-inflight", c.MaxClientInflight, "of those, at most this many for one client address (0: max-inflight/8, at least 16; -1: no per-client bound)")
	fs.IntVar(&c.MaxTCPConns, "max-tcp-conns", c.MaxTCPConns, "open TCP connections at most")
	fs.StringVar(&c.UDPReaders, "udp-readers", c.UDPReaders, "how UDP sockets are read: threads (an OS thread per socket blocking in recvmmsg) or poller (Go netpoller)")
	fs.IntVar(&c.UDPSockets, "udp-sockets", c.UDPSockets, "SO_REUSEPORT UDP sockets (each with its own reader) per listen address; 0: 1 (one reader serves about one core's worth of queries)")
	fs.IntVar(&c.GoMaxProcs, "gomaxprocs", c.GoMaxProcs, "Go scheduler Ps (GOMAXPROCS); 0: $GOMAXPROCS when set, else one per UDP thread reader (sockets x listen addresses) plus one, measured cheapest per query (bench/RESULTS.md)")
	fs.IntVar(&c.MaxUDPSize, "max-udp-size", c.MaxUDPSize, "largest UDP reply whatever the client advertises")
	fs.BoolVar(&c.LoopCheck, "loop-check", c.LoopCheck, "at start, send a probe through the upstream and exit if it comes back (forwarding loop)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file (default: in-cluster config inside a pod, else no cluster zone)")
	fs.Var(&repeatList{l: &c.ClusterDomain}, "cluster-domain", "the cluster's DNS domain; repeat (or separate by commas) to answer several zones from one index, the first primary (PTR targets, search-path walk)")
	fs.Var(&c.ClusterTTL, "cluster-ttl", "TTL of cluster answers (0s-3600s)")
	fs.StringVar(&c.Pods, "pods", c.Pods, "pod records: disabled, insecure or verified")
	fs.StringVar(&c.ClusterDNS, "cluster-dns", c.ClusterDNS, "ip[:port] of the central cluster DNS, asked for cluster names only until the informers have synced")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "this node's name (default $NODE_NAME); its pods are watched for the search-path walk")
	fs.BoolVar(&c.Autopath, "autopath", c.Autopath, "walk pods' search lists on the server (one round trip instead of several)")
	fs.Var(&c.ClusterSyncWait, "cluster-sync-wait", "at start, how long to wait for the cluster index before serving when no other agent answers on our addresses (one that does keeps serving until we synced)")
	fs.Var(&c.Search, "search", "comma-separated extra search domains pods inherit (default: those after the cluster's in /etc/resolv.conf)")
	fs.BoolVar(&c.EndpointPodNames, "endpoint-pod-names", c.EndpointPodNames, "name endpoints without a hostname after their pod (targetRef) instead of their address, as CoreDNS endpoint_pod_names")
	fs.BoolVar(&c.IgnoreEmptyService, "ignore-empty-service", c.IgnoreEmptyService, "NXDOMAIN for a ClusterIP Service without ready endpoints, as CoreDNS `ignore empty_service`")
	fs.BoolVar(&c.NoEndpoints, "no-endpoints", c.NoEndpoints, "do not watch EndpointSlices: headless and endpoint names are NXDOMAIN, as CoreDNS noendpoints")
	fs.Var(&c.Namespaces, "namespaces", "comma-separated namespaces whose names exist; names in others are NXDOMAIN (default: all), as CoreDNS namespaces")
	fs.StringVar(&c.NamespaceLabels, "namespace-labels", c.NamespaceLabels, "label selector (kubectl -l syntax): only namespaces it matches are exposed, as CoreDNS namespace_labels")
	fs.Var(&c.Fallthrough, "fallthrough", "comma-separated zones (or CIDRs) where a cluster NXDOMAIN goes on to cache and upstream instead; '.' is every zone, empty none; replaces the default, as CoreDNS fallthrough")
	fs.Var(&c.LocalIP, "local-ip", "comma-separated addresses to intercept (e.g. 169.254.20.10 and the kube-dns ClusterIP); enables the link and rules")
	fs.StringVar(&c.Interface, "interface", c.Interface, "link that holds the local IPs")
	fs.BoolVar(&c.SetupInterface, "setup-interface", c.SetupInterface, "create and maintain the link (with --local-ip)")
	fs.BoolVar(&c.SetupIptables, "setup-iptables", c.SetupIptables, "install and maintain NOTRACK/ACCEPT rules (with --local-ip)")
	fs.Var(&c.SyncInterval, "sync-interval", "how often the link and rules are checked and repaired (a Go duration)")
	fs.BoolVar(&c.Teardown, "teardown", c.Teardown, "remove rules and link on exit when no other agent serves the addresses")
	fs.Var(&c.Lameduck, "lameduck", "on SIGTERM: report not ready and keep answering this long before exiting")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json; client-go's messages use it too (restart to change)")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go's /debug/pprof on --admin-socket only, never on --admin (restart to change)")
	fs.Float64Var(&c.LogQueries, "log-queries", c.LogQueries, "fraction of queries to log (0 to 1); 0 with --log-queries-class: every query of those classes")
	fs.Var(&c.LogQueriesClass, "log-queries-class", "comma-separated reply classes the query log keeps, as CoreDNS's log plugin: all, success, denial (NXDOMAIN, NODATA), error (SERVFAIL, REFUSED, NOTIMP, FORMERR, ...)")
}

// loadConfig returns the configuration for args: defaults, then the
// --config file, then the flags in args.
func loadConfig(args []string, stderr io.Writer) (Config, error) {
	// First pass: only to find --config.
	var path string
	probe := flag.NewFlagSet("serve", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	tmp := defaultConfig()
	tmp.bind(probe, &path)
	if err := probe.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			probe.SetOutput(stderr)
			probe.PrintDefaults()
		}
		return Config{}, err // one line: the flag package names the bad value
	}
	if probe.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", probe.Arg(0))
	}
	cfg := defaultConfig()
	if path != "" {
		if err := cfg.readFile(path); err != nil {
			return Config{}, err
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.bind(fs, &path)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	cfg.path = path
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "search" {
			cfg.searchSet = true
		}
	})
	return cfg, cfg.validate()
}

// readFile overlays the YAML file at path on c. Unknown keys are errors: a
// typo must not silently leave a default in place.
func (c *Config) readFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading config %s: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		// Name the key: the decoder's own message often does not.
		for k, v := range raw {
			one, _ := json.Marshal(map[string]json.RawMessage{k: v})
			var probe Config
			if kerr := yaml.UnmarshalStrict(one, &probe); kerr != nil {
				return fmt.Errorf("config %s: key %q: %w", path, k, kerr)
			}
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	if _, ok := raw["search"]; ok {
		c.searchSet = true
	}
	return nil
}

// validate checks values the packages would otherwise reject later, with a
// message naming the bad value.
func (c *Config) validate() error {
	for _, a := range c.Listen {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return fmt.Errorf("--listen %q: want ip:port", a)
		}
	}
	for _, a := range c.LocalIP {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("--local-ip %q: want an IP address", a)
		}
	}
	if c.Admin != "" {
		if _, err := netip.ParseAddrPort(c.Admin); err != nil {
			return fmt.Errorf("--admin %q: want ip:port", c.Admin)
		}
	}
	switch {
	case c.CacheSize < 1:
		return fmt.Errorf("--cache-size %d: want at least 1", c.CacheSize)
	case c.MaxInflight < 1:
		return fmt.Errorf("--max-inflight %d: want at least 1", c.MaxInflight)
	case c.MaxTCPConns < 1:
		return fmt.Errorf("--max-tcp-conns %d: want at least 1", c.MaxTCPConns)
	case c.GoMaxProcs < 0 || c.UDPSockets < 0:
		return fmt.Errorf("--gomaxprocs %d / --udp-sockets %d: want >= 0", c.GoMaxProcs, c.UDPSockets)
	case c.MaxUDPSize < 512 || c.MaxUDPSize > 65535:
		return fmt.Errorf("--max-udp-size %d: want 512 to 65535", c.MaxUDPSize)
	case c.ClusterTTL < 0 || time.Duration(c.ClusterTTL) > time.Hour:
		return fmt.Errorf("--cluster-ttl %s: want 0s to 1h", c.ClusterTTL)
	case c.SyncInterval <= 0:
		return fmt.Errorf("--sync-interval %s: want a positive duration", c.SyncInterval)
	case c.ClusterSyncWait < 0:
		return fmt.Errorf("--cluster-sync-wait %s: want a duration >= 0", c.ClusterSyncWait)
	case c.Lameduck < 0:
		return fmt.Errorf("--lameduck %s: want a duration >= 0", c.Lameduck)
	case c.LogQueries < 0 || c.LogQueries > 1:
		return fmt.Errorf("--log-queries %g: want 0 to 1", c.LogQueries)
	}
	if err := metrics.CheckLogClasses(c.LogQueriesClass); err != nil {
		return fmt.Errorf("--log-queries-class: %w", err)
	}
	switch c.UDPReaders {
	case "threads", "poller":
	default:
		return fmt.Errorf("--udp-readers %q: want threads or poller", c.UDPReaders)
	}
	switch c.Pods {
	case "disabled", "insecure", "verified":
	default:
		return fmt.Errorf("--pods %q: want disabled, insecure or verified", c.Pods)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	if len(c.ClusterDomain) == 0 {
		return errors.New("--cluster-domain: want at least one domain")
	}
	if err := clusterConfig(*c).Validate(); err != nil {
		return err
	}
	if c.Pprof && c.AdminSocket == "" {
		return errors.New("--pprof needs --admin-socket: profiles are served on the unix socket only, never on the TCP admin address")
	}
	if len(c.Listen) == 0 && len(c.LocalIP) == 0 {
		return errors.New("nothing to listen on: give --listen or --local-ip")
	}
	return nil
}

// List is a comma-separated flag, or a YAML list (or comma-separated
// string) in the config file. Setting it replaces the value.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *List) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// UnmarshalJSON accepts a list of strings or one comma-separated string.
func (l *List) UnmarshalJSON(b []byte) error {
	var ss []string
	if err := json.Unmarshal(b, &ss); err == nil {
		*l = nil
		for _, s := range ss {
			if err := l.append(s); err != nil {
				return err
			}
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a list of strings or a comma-separated string, got %s", b)
	}
	return l.Set(s)
}

func (l *List) append(s string) error {
	var one List
	if err := one.Set(s); err != nil {
		return err
	}
	*l = append(*l, one...)
	return nil
}

// repeatList is a List flag that may be repeated: its first use on a
// command line replaces the value (the default, or the file's), later uses
// add to it. Each use may also hold a comma-separated list.
type repeatList struct {
	l    *List
	used bool
}

func (r *repeatList) String() string {
	if r.l == nil {
		return ""
	}
	return r.l.String()
}

// Set implements flag.Value.
func (r *repeatList) Set(s string) error {
	if !r.used {
		*r.l, r.used = nil, true
	}
	return r.l.append(s)
}

// Duration is a time.Duration written as a Go duration string ("60s") in
// flags and in the file. A bare number in the file is an error rather than
// a guess at its unit (node-cache's -syncinterval trap).
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a Go duration such as 5s or 1m30s", s)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"5s\"", b)
	}
	return d.Set(s)
}

// StubsMap maps a zone to its servers. As a flag, each use adds
// zone=ip[,ip...].
type StubsMap map[string][]string

func (m *StubsMap) String() string {
	var parts []string
	for z, s := range *m {
		parts = append(parts, z+"="+strings.Join(s, ","))
	}
	return strings.Join(parts, " ")
}

// Set implements flag.Value.
func (m *StubsMap) Set(s string) error {
	zone, servers, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(zone) == "" || strings.TrimSpace(servers) == "" {
		return fmt.Errorf("%q: want zone=ip[:port][,ip...]", s)
	}
	if *m == nil {
		*m = StubsMap{}
	}
	var l List
	_ = l.Set(servers)
	(*m)[strings.TrimSpace(zone)] = l
	return nil
}
