package config

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
)

// Config is everything `nodedns serve` can be told, by flag or by the YAML
// file named with --config. Every field is declared once, in the settings
// table (keys.go): its key and flag, default, help, and whether and how a
// reload applies it. Precedence: built-in defaults, then the file, then
// flags given on the command line.
type Config struct {
	Listen      List
	Upstream    List
	ResolvConf  string
	Admin       string
	AdminSocket string
	Policy      string
	Stubs       StubsMap
	// Upstream transport: force-tcp and prefer-udp apply to --upstream;
	// upstream-ca verifies tls:// upstreams.
	ForceTCP   bool
	PreferUDP  bool
	UpstreamCA string
	// The default upstreams' forward options (upstreamopts.go).
	// UpstreamFailover: nil is nodedns's retry of SERVFAIL/REFUSED once,
	// empty none (`--upstream-failover=`, `upstream-failover: []`).
	UpstreamFailover          List
	UpstreamFailfast          bool
	UpstreamExcept            List
	UpstreamReadTimeout       Duration
	UpstreamMaxFails          int
	UpstreamHealthCheck       Duration
	UpstreamHealthCheckDomain string
	UpstreamHealthCheckNoRec  bool
	UpstreamExpire            Duration
	UpstreamDoHMethod         string
	UpstreamNext              *StubDomain
	// UpstreamResolver resolves servers given by names outside the cluster
	// zone; empty: the nameservers of ResolvConf.
	UpstreamResolver List
	// KubeDNSConfig is the mounted kube-dns ConfigMap, merged under the
	// upstream settings by the agent.
	KubeDNSConfig string

	CacheSize      int
	CacheMaxBytes  Bytes
	MinTTL         Duration
	MaxTTL         Duration
	MaxNegativeTTL Duration
	ServeStale     Duration
	Prefetch       int
	// CoreDNS's other cache options (cacheopts.go).
	MinNegativeTTL      Duration
	ServfailTTL         Duration
	CacheKeepTTL        bool
	ServeStaleMode      string
	ServeStaleTimeout   Duration
	ServeStaleTTL       Duration
	ServeStaleRecheck   Duration
	ServeStalePolicy    string
	PrefetchWindow      Duration
	PrefetchPercent     int
	CacheDisableSuccess List
	CacheDisableDenial  List

	MaxInflight int
	// MaxClientInflight: 0 is the server's default share, negative none.
	MaxClientInflight int
	MaxTCPConns       int
	MaxUDPSize        int
	UDPReaders        string
	UDPSockets        int
	GoMaxProcs        int
	LoopCheck         bool

	Kubeconfig string
	// KubeconfigContext is the kubeconfig's context used ("": its
	// current context).
	KubeconfigContext string
	// ClusterDomain lists the cluster's zones, the primary first: a
	// string or a list in the file, a repeatable flag.
	ClusterDomain List
	// MulticlusterDomain lists the zones answered from ServiceImports
	// (Multi-Cluster Services), as CoreDNS's `multicluster`.
	MulticlusterDomain List
	ClusterTTL         Duration
	Pods               string
	ClusterDNS         string
	// ClusterZone is local (answered from the API server) or forward
	// (sent to ClusterDNS, as NodeLocal DNSCache does).
	ClusterZone        string
	ClusterDNSProtocol string
	NodeName           string
	Autopath           bool
	// Drop-in features of CoreDNS plugins (dropin.go). hosts and rewrite
	// are file keys only.
	Hosts       *HostsConfig
	Rewrite     []RewriteRule
	LoadBalance string
	// CoreDNS plugins around the stages (plugins.go): acl, templates and
	// header are file keys only.
	Local                bool
	LocalLocalhostPrefix bool
	Chaos                bool
	ChaosVersion         string
	ChaosAuthors         List
	ACL                  []ACLRule
	Templates            []TemplateConfig
	Header               *HeaderConfig
	MinimalResponses     bool
	// CoreDNS's nsid and file (zonefile.go): nsid turns the NSID option
	// on, NSIDData is its payload (default the node's name); zone-files
	// is a file key only.
	NSID       bool
	NSIDData   string
	NSIDZones  List
	NSIDExcept List
	ZoneFiles  []ZoneFileConfig
	// dns64 and k8s_external (dns64.go); file keys only.
	DNS64Opts       *DNS64Config
	K8sExternalOpts *K8sExternalConfig
	// Dnstap are the dnstap collectors (dnstap.go); file key only.
	Dnstap []DnstapConfig
	// Views are CoreDNS view blocks with a forward (views.go); file key
	// only.
	Views []ViewConfig
	// ClusterSyncWait bounds how long the listeners wait for the cluster
	// index at start when no other agent serves our addresses.
	ClusterSyncWait Duration
	Search          List

	// Cluster zone options of CoreDNS's kubernetes plugin (pkg/k8s.Config).
	EndpointPodNames   bool
	IgnoreEmptyService bool
	NoEndpoints        bool
	Namespaces         List
	NamespaceLabels    string
	// Fallthrough: an empty list (`--fallthrough=`, `fallthrough: []`)
	// means none; the default is the reverse zones.
	Fallthrough List

	// NetworkMode is host (the link and rules on the node) or pod (the
	// pod network, behind a redirect: network.go); PodIPs are the pod's
	// addresses, listened on in pod mode.
	NetworkMode    string
	PodIPs         List
	LocalIP        List
	Interface      string
	SetupInterface bool
	SetupIptables  bool
	SyncInterval   Duration
	Teardown       bool
	Lameduck       Duration
	// Supervise runs the agent as a supervisor holding the sockets and a
	// serving process it replaces when it dies or hangs (pkg/supervisor);
	// HangTimeout is how long a serving process may stop before that.
	Supervise   bool
	HangTimeout Duration
	// TestHooks serves what only tests need on the admin socket
	// (/debug/alloc: memory held on purpose, to reach a memory limit).
	TestHooks bool
	// FallbackDNS: nil is the default (the cluster DNS Service), empty no
	// fallback (`--fallback-dns=`, `fallback-dns: []`).
	FallbackDNS List

	LogLevel  string
	LogFormat string
	// Pprof serves /debug/pprof on the admin socket (never on --admin).
	Pprof      bool
	LogQueries float64
	// LogQueriesClass limits the query log to these reply classes.
	LogQueriesClass List

	// MetricsCompat picks the compatibility series /metrics exports
	// besides nodedns_*: coredns (CoreDNS 1.15 and node-cache names) or
	// none.
	MetricsCompat string
	// MetricsNamespaces is how many namespaces are counted apart in the
	// per-namespace figures; 0 turns them off.
	MetricsNamespaces int

	// path is the --config file, watched for live reload.
	path string
	// given records the keys set by the file or a flag: some defaults are
	// "derived" (--search: "take them from resolv.conf"), which an empty
	// value given on purpose must not mean.
	given map[string]bool
	// fromFlags records the keys set on the command line (they win over
	// the file, on reload too); file holds the file's raw values by key.
	fromFlags map[string]bool
	file      map[string]json.RawMessage
	// fileSum is the digest of the file's content as loaded (the content
	// itself is not kept: a reload poll compares digests).
	fileSum FileSum
}

// IsGiven reports whether key was set by the file or a flag.
func (c *Config) IsGiven(key string) bool { return c.given[key] }

// Path is the --config file ("" when none): the file a reload reads.
func (c *Config) Path() string { return c.path }

// FileSum is the digest of the --config file's content as loaded.
func (c *Config) FileSum() FileSum { return c.fileSum }

// SchedulerProcs is the GOMAXPROCS the agent runs with: --gomaxprocs when
// given; else $GOMAXPROCS when set (0: leave it); else one P for each UDP
// thread reader, which blocks holding its P (pkg/query/server/udpthread_linux.go),
// plus one for the rest of the agent, whatever the machine's cores and the
// container's CPU limit. bench/RESULTS.md ("GOMAXPROCS") has the
// comparison on the pod workload, plain, under an informer event storm and
// under a 1-CPU limit, on 2 cores: this policy (3 Ps with two listen
// addresses) was within the runs' noise (about 15 %) of 2 and 4 Ps per
// query and as good or better at p99, and 1 P (what the runtime picks
// itself under a 1-CPU limit) cost 14-44 % more CPU per query and 1.5-6x
// the p99 in every case. A blocked reader's P uses no
// CPU, so a limit below the Ps is no reason to drop the readers' Ps; the
// kernel enforces the limit all the same. More Ps than this on large nodes
// are not measured and not taken.
func (c *Config) SchedulerProcs() int {
	switch {
	case c.GoMaxProcs > 0:
		return c.GoMaxProcs
	case os.Getenv("GOMAXPROCS") != "":
		return 0
	case c.UDPReaders == "threads":
		return c.SocketsPerAddr()*len(c.ListenAddrs()) + 1
	}
	return 1
}

// SocketsPerAddr is the number of UDP sockets (and readers) per listen
// address.
func (c *Config) SocketsPerAddr() int {
	if c.UDPSockets > 0 {
		return c.UDPSockets
	}
	return 1
}

// ListenAddrs is --listen, or port 53 of every --local-ip (host mode) or
// of every --pod-ips address (pod mode). An address that does not parse is
// left out (its setting's check reports it; the checks that count listen
// addresses run on a configuration that may hold one).
func (c *Config) ListenAddrs() []string {
	if len(c.Listen) > 0 {
		return c.Listen
	}
	ips := c.LocalIP
	if c.PodMode() {
		ips = c.PodIPs
	}
	var out []string
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, netip.AddrPortFrom(a, 53).String())
		}
	}
	return out
}

// IsOwnAddr reports whether ap is one of this agent's own DNS addresses:
// a --listen address, or port 53 of a --local-ip (the addresses pods and
// the interception send to) or, in pod mode, of a redirected address. An upstream there is a forwarding loop.
func (c *Config) IsOwnAddr(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap()
	for _, l := range c.ListenAddrs() {
		if lp, err := netip.ParseAddrPort(l); err == nil && lp.Addr().Unmap() == a && lp.Port() == ap.Port() {
			return true
		}
	}
	for _, ip := range c.LocalIP {
		if la, err := netip.ParseAddr(ip); err == nil && la.Unmap() == a && ap.Port() == 53 {
			return true
		}
	}
	// Pod mode: the redirect's frontends (169.254.20.10 whatever local-ip
	// says) lead back here.
	for _, r := range c.RedirectedAddrs() {
		if r == a && ap.Port() == 53 {
			return true
		}
	}
	return false
}

// Default is the configuration before the file and the flags: every
// setting's default from the table.
func Default() Config {
	var c Config
	for _, s := range settings {
		def := s.def
		if s.env != "" {
			if v, ok := os.LookupEnv(s.env); ok {
				def = v
			}
		}
		if def == "" {
			continue
		}
		if err := s.value(&c).Set(def); err != nil {
			panic(fmt.Sprintf("setting %s: default %q: %v", s.key, def, err)) // a bad table entry: TestSettingsTable catches it
		}
	}
	return c
}

// bind registers every serve flag on fs, writing into c; the current values
// of c are the flags' defaults.
func (c *Config) bind(fs *flag.FlagSet, configPath *string) {
	fs.StringVar(configPath, "config", *configPath, "YAML file with the same settings (keys are flag names) plus stub-domains; flags override it; re-read when it changes")
	for _, s := range settings {
		if s.flagName() == "" {
			continue
		}
		fs.Var(s.value(c), s.flagName(), s.help)
	}
}
