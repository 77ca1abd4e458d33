package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/resolvconf"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Setting declares one setting of `nodedns serve`, once: its key in the
// --config file, its flag, default, help, value check, and whether a reload
// applies it (and how). Loading, flags, `nodedns config validate|print`,
// reload and the restart-only warning are all derived from this table, so
// they cannot drift apart. To add a setting: add a Config field and one
// entry here (and a row to docs/configuration.md). A field with a flag
// must be a string, int, bool, float64 or a flag.Value; a file-only key
// (flag: noFlag) may be any type encoding/json reads (a struct, a list of
// structs), decoded strictly (unknown fields are errors). A setting a
// reload applies names its Apply classes; pkg/agent carries them out.
type Setting struct {
	// key is the file key and the flag name.
	key string
	// flag is the flag's name when it differs from key; noFlag: the
	// setting exists only in the file (e.g. a map or a list of objects).
	flag string
	// def is the default, as flag text ("": the field's zero value); env,
	// when set and present, names an environment variable that replaces
	// def.
	def, env string
	help     string
	// field returns a pointer to the setting's field in c.
	field func(c *Config) any
	// repeat makes a List flag repeatable (the first use replaces the
	// value, later ones add to it).
	repeat bool
	// check returns an error naming the bad value; nil: any value of the
	// type is fine.
	check func(c *Config) error
	// apply lists what a reload does to put a changed value into effect,
	// in the running agent; empty: the setting is read only at start, and
	// a change is logged as needing a restart.
	apply []Apply
}

// Apply names one way a reload puts changed settings into effect in the
// running agent. The table says which settings each class covers; the
// agent owns what each class does (prepare what can fail, then commit), so
// this package needs nothing of the agent to say whether a key is live.
type Apply string

// The apply classes.
const (
	// ApplyCache reconfigures the cache in place (entries are kept).
	ApplyCache Apply = "cache"
	// ApplyUpstreams builds a new forwarder and swaps it in.
	ApplyUpstreams Apply = "upstreams"
	// ApplyHosts reads the static records again and swaps them in.
	ApplyHosts Apply = "hosts"
	// ApplyRewrite replaces the rewrite rules.
	ApplyRewrite Apply = "rewrite"
	// ApplyLoadBalance turns the rotation of A and AAAA records on or off.
	ApplyLoadBalance Apply = "loadbalance"
	// ApplyPlugins replaces the CoreDNS plugins around the stages (local,
	// chaos, acl, templates, header).
	ApplyPlugins Apply = "plugins"
	// ApplySearch replaces the search-path settings of the server.
	ApplySearch Apply = "search path"
	// ApplyLogLevel changes the log level.
	ApplyLogLevel Apply = "log level"
	// ApplyQueryLog changes the fraction of queries logged.
	ApplyQueryLog Apply = "query log"
	// ApplyAtExit: the setting is read when the agent stops (lameduck,
	// teardown), from the running configuration a reload replaces.
	ApplyAtExit Apply = "at exit"
	// ApplyFallback computes the DNS fallback's targets again and hands
	// them to the interception.
	ApplyFallback Apply = "fallback"
	// ApplyZoneFiles reads the zone files again and swaps the zones in.
	ApplyZoneFiles Apply = "zone files"
)

// noFlag marks a setting that has no flag.
const noFlag = "-"

func (s *Setting) flagName() string {
	switch s.flag {
	case "":
		return s.key
	case noFlag:
		return ""
	}
	return s.flag
}

// Key is the setting's key in the file (and, but for a few, its flag name).
func (s *Setting) Key() string { return s.key }

// Help is the setting's help text, as the flag's usage.
func (s *Setting) Help() string { return s.help }

// Live reports whether a reload applies the setting.
func (s *Setting) Live() bool { return len(s.apply) > 0 }

// Applies lists the classes of what a reload does to put a changed value
// into effect; none: the setting is read only at start.
func (s *Setting) Applies() []Apply { return s.apply }

// value returns the setting's field in c as a flag.Value.
func (s *Setting) value(c *Config) flag.Value {
	switch p := s.field(c).(type) {
	case *string:
		return (*stringValue)(p)
	case *int:
		return (*intValue)(p)
	case *bool:
		return (*boolValue)(p)
	case *float64:
		return (*floatValue)(p)
	case *List:
		if s.repeat {
			return &repeatList{l: p}
		}
		return p
	case flag.Value:
		return p
	default:
		panic(fmt.Sprintf("setting %s: field of type %T is not a flag.Value", s.key, p))
	}
}

// decode sets the field from the file's JSON value.
func (s *Setting) decode(c *Config, raw json.RawMessage) error {
	return decodeStrict(raw, s.field(c))
}

// Get returns the setting's value in c.
func (s *Setting) Get(c *Config) any { return reflect.ValueOf(s.field(c)).Elem().Interface() }

// CopyFrom sets the setting in c to its value in from.
func (s *Setting) CopyFrom(c, from *Config) {
	reflect.ValueOf(s.field(c)).Elem().Set(reflect.ValueOf(s.field(from)).Elem())
}

// Differs reports whether the setting has different values in a and b.
func (s *Setting) Differs(a, b *Config) bool { return !reflect.DeepEqual(s.Get(a), s.Get(b)) }

// OverriddenChange reports whether the file changed the setting from old
// to cfg while a command-line flag overrides it (so the change has no
// effect).
func (s *Setting) OverriddenChange(old, cfg *Config) bool {
	return cfg.fromFlags[s.key] && !bytes.Equal(old.file[s.key], cfg.file[s.key])
}

// Settings is the table, in the order `nodedns config print` shows it.
func Settings() []*Setting { return settings }

// settings is the table. Order: as `nodedns config print` shows them.
var settings = []*Setting{
	// Serving.
	{key: "listen", help: "comma-separated ip:port to serve DNS on, UDP and TCP (default: port 53 of each --local-ip); at most 16, none twice",
		field: func(c *Config) any { return &c.Listen }, check: func(c *Config) error {
			return checkList("listen", "addresses", c.Listen, maxListen, canonAddrPort)
		}},
	{key: "admin", def: "127.0.0.1:9253", help: "ip:port of the HTTP admin endpoint (/health, /ready, /metrics; /stats only on a loopback address); empty disables it",
		field: func(c *Config) any { return &c.Admin }, check: func(c *Config) error {
			if c.Admin == "" {
				return nil
			}
			if _, err := netip.ParseAddrPort(c.Admin); err != nil {
				return fmt.Errorf("--admin %q: want ip:port", c.Admin)
			}
			return nil
		}},
	{key: "admin-socket", help: "unix socket serving the admin endpoint too (the DaemonSet's probes use it)",
		field: func(c *Config) any { return &c.AdminSocket }},

	// Upstreams.
	{key: "upstream", help: "comma-separated upstream resolvers: ip[:port], tcp://ip[:port], tls://ip[:853][#server-name], https://ip[:443][#server-name], or names (of the cluster zone, or resolved through --upstream-resolver) in place of ip (default: nameservers in --resolv-conf, minus our own addresses); at most 15, none twice; checked together with the stub domains",
		field: func(c *Config) any { return &c.Upstream }, apply: on(ApplyUpstreams)},
	{key: "resolv-conf", def: resolvconf.DefaultPath, help: "resolver configuration whose nameservers are the default upstreams and whose search domains pods inherit",
		field: func(c *Config) any { return &c.ResolvConf }, apply: on(ApplyUpstreams, ApplySearch), check: func(c *Config) error {
			if c.ResolvConf == "" {
				return errors.New("--resolv-conf: want a file")
			}
			return nil
		}},
	{key: "policy", def: "random", help: "upstream selection: random, round_robin or sequential",
		field: func(c *Config) any { return &c.Policy }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			switch upstream.Policy(c.Policy) {
			case upstream.Random, upstream.RoundRobin, upstream.Sequential:
				return nil
			}
			return fmt.Errorf("--policy %q: want random, round_robin or sequential", c.Policy)
		}},
	{key: "stub-domains", flag: "stub-domain", help: "zone=server[,server...]; repeat for several zones (longest zone wins); servers as --upstream; in the file a map of zone to a list of servers or to {servers, force-tcp, prefer-udp, policy, and the upstream-* forward options without the prefix: failover, failfast, except, read-timeout, max-fails, health-check, health-check-domain, health-check-no-rec, expire, doh-method, next}; at most 1000 zones (with the kube-dns ConfigMap's) of at most 15 servers",
		field: func(c *Config) any { return &c.Stubs }, apply: on(ApplyUpstreams)},
	{key: "force-tcp", help: "ask the default upstreams over TCP only (pooled connections), as CoreDNS's force_tcp",
		field: func(c *Config) any { return &c.ForceTCP }, apply: on(ApplyUpstreams)},
	{key: "prefer-udp", help: "ask the default upstreams over UDP first, TCP only for truncated replies (what plain servers do unless TCP is forced), as CoreDNS's prefer_udp",
		field: func(c *Config) any { return &c.PreferUDP }, apply: on(ApplyUpstreams)},
	{key: "upstream-ca", help: "PEM bundle that tls:// and https:// upstreams' certificates are verified against, re-read when it changes (default: the system's roots)",
		field: func(c *Config) any { return &c.UpstreamCA }, apply: on(ApplyUpstreams)},
	// CoreDNS forward's options for the default upstreams (upstreamopts.go);
	// a stub domain's map form takes them without "upstream-".
	{key: "upstream-failover", help: "comma-separated rcodes (SERVFAIL, REFUSED, ...) whose reply goes on to the next upstream, each asked once, as CoreDNS's failover; empty: none (CoreDNS without failover); unset: a SERVFAIL or REFUSED is asked once more of another upstream",
		field: func(c *Config) any { return &c.UpstreamFailover }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return checkRcodes("upstream-failover", c.UpstreamFailover)
		}},
	{key: "upstream-failfast", help: "answer SERVFAIL at once while every upstream is marked down, instead of asking one anyway, as CoreDNS's failfast_all_unhealthy_upstreams",
		field: func(c *Config) any { return &c.UpstreamFailfast }, apply: on(ApplyUpstreams)},
	{key: "upstream-except", help: "comma-separated zones whose names the default upstreams never get (SERVFAIL unless a stub domain takes them), as CoreDNS's except; at most 64",
		field: func(c *Config) any { return &c.UpstreamExcept }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return checkList("upstream-except", "zones", c.UpstreamExcept, maxExcept, canonDomain)
		}},
	{key: "upstream-read-timeout", def: "2s", help: "how long one attempt waits for an upstream's reply (two attempts per upstream within the query's 5s), as CoreDNS's read_timeout; 1ms to 5s",
		field: func(c *Config) any { return &c.UpstreamReadTimeout }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return durationBetween("upstream-read-timeout", c.UpstreamReadTimeout, minReadTimeout, maxReadTimeout)
		}},
	{key: "upstream-max-fails", def: "2", help: "an upstream is marked down once more health probes than this failed in a row (probes start when an exchange fails); 0: never down, never probed; as CoreDNS's max_fails; 0 to 100",
		field: func(c *Config) any { return &c.UpstreamMaxFails }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return between("upstream-max-fails", c.UpstreamMaxFails, 0, maxMaxFails)
		}},
	{key: "upstream-health-check", def: "500ms", help: "pause between a failed health probe and the next, as CoreDNS's health_check; 10ms to 1h",
		field: func(c *Config) any { return &c.UpstreamHealthCheck }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return durationBetween("upstream-health-check", c.UpstreamHealthCheck, minHealthCheck, maxHealthCheck)
		}},
	{key: "upstream-health-check-domain", def: ".", help: "the health probe asks NS of this name, as CoreDNS's health_check ... domain",
		field: func(c *Config) any { return &c.UpstreamHealthCheckDomain }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			if _, err := canonHCDomain(c.UpstreamHealthCheckDomain); err != nil {
				return fmt.Errorf("--upstream-health-check-domain %q: %w", c.UpstreamHealthCheckDomain, err)
			}
			return nil
		}},
	{key: "upstream-health-check-no-rec", help: "health probes without the RD bit, as CoreDNS's health_check ... no_rec",
		field: func(c *Config) any { return &c.UpstreamHealthCheckNoRec }, apply: on(ApplyUpstreams)},
	{key: "upstream-expire", def: "10s", help: "pooled TCP, TLS and HTTPS connections idle this long are closed, as CoreDNS's expire (UDP never reuses a socket); 100ms to 1h",
		field: func(c *Config) any { return &c.UpstreamExpire }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return durationBetween("upstream-expire", c.UpstreamExpire, minExpire, maxExpire)
		}},
	{key: "upstream-doh-method", def: "POST", help: "POST or GET: how https:// upstreams are asked, as CoreDNS's doh_method",
		field: func(c *Config) any { return &c.UpstreamDoHMethod }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return oneOf("upstream-doh-method", c.UpstreamDoHMethod, "POST", "GET")
		}},
	{key: "upstream-next", flag: noFlag, help: "where a reply of the default upstreams goes on (a second forward of a CoreDNS block reached by next / next_on_nodata): {when: [NXDOMAIN, SERVFAIL, NODATA, ...], servers, and a stub domain's options, next included}; no servers: those replies are SERVFAIL",
		field: func(c *Config) any { return &c.UpstreamNext }, apply: on(ApplyUpstreams)},
	{key: "upstream-resolver", help: "comma-separated ip[:port] that resolve upstreams given by names outside the cluster zone, A and AAAA, again when their TTL runs out (default: the nameservers of --resolv-conf, minus our own addresses); at most 15",
		field: func(c *Config) any { return &c.UpstreamResolver }, apply: on(ApplyUpstreams), check: func(c *Config) error {
			return checkList("upstream-resolver", "addresses", c.UpstreamResolver, maxResolvers, upstream.NormalizeAddr)
		}},
	{key: "kube-dns-config", help: "directory of the mounted kube-dns ConfigMap (stubDomains, upstreamNameservers), merged under these settings and re-read when it changes",
		field: func(c *Config) any { return &c.KubeDNSConfig }},

	// Cache.
	{key: "cache-size", def: "10000", help: "maximum cached answers (external names); 1 to 1000000",
		field: func(c *Config) any { return &c.CacheSize }, apply: on(ApplyCache), check: func(c *Config) error {
			return between("cache-size", c.CacheSize, 1, maxCacheSize)
		}},
	{key: "cache-max-bytes", def: "32Mi", help: "maximum bytes held by cached answers (e.g. 32Mi), 64Ki to 1Gi; replies over 1/16 of it, or 16Ki, are answered but not cached",
		field: func(c *Config) any { return &c.CacheMaxBytes }, apply: on(ApplyCache), check: func(c *Config) error {
			if c.CacheMaxBytes < minCacheMaxBytes || c.CacheMaxBytes > maxCacheMaxBytes {
				return fmt.Errorf("--cache-max-bytes %s: want %s to %s", c.CacheMaxBytes, minCacheMaxBytes, maxCacheMaxBytes)
			}
			return nil
		}},
	{key: "min-ttl", def: "0s", help: "lower bound on the lifetime of cached positive answers; 0s to 1h",
		field: func(c *Config) any { return &c.MinTTL }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("min-ttl", c.MinTTL, 0, maxMinTTL)
		}},
	{key: "max-ttl", def: "1h", help: "upper bound on the lifetime of cached positive answers; 0s to 168h (7 days, RFC 8767)",
		field: func(c *Config) any { return &c.MaxTTL }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("max-ttl", c.MaxTTL, 0, maxMaxTTL)
		}},
	{key: "max-negative-ttl", def: "30m", help: "upper bound on cached NXDOMAIN/NODATA; 0s to 24h (RFC 2308)",
		field: func(c *Config) any { return &c.MaxNegativeTTL }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("max-negative-ttl", c.MaxNegativeTTL, 0, maxNegativeTTL)
		}},
	{key: "serve-stale", def: "1h", help: "how long past expiry an answer may be served when upstreams fail (0 disables); at most 72h (RFC 8767)",
		field: func(c *Config) any { return &c.ServeStale }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("serve-stale", c.ServeStale, 0, maxServeStale)
		}},
	{key: "prefetch", def: "2", help: "hits that make an entry popular enough to refresh before it expires (0 disables); at most 1000",
		field: func(c *Config) any { return &c.Prefetch }, apply: on(ApplyCache), check: func(c *Config) error {
			return between("prefetch", c.Prefetch, 0, maxPrefetch)
		}},
	// CoreDNS's other cache options (cacheopts.go).
	{key: "min-negative-ttl", def: "0s", help: "lower bound on cached NXDOMAIN/NODATA, at most max-negative-ttl (CoreDNS's denial MINTTL, 5s there)",
		field: func(c *Config) any { return &c.MinNegativeTTL }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("min-negative-ttl", c.MinNegativeTTL, 0, maxNegativeTTL)
		}},
	{key: "servfail-ttl", def: "5s", help: "how long a SERVFAIL or NOTIMP, or a failure of every upstream, is cached; 0s disables; at most 5m (RFC 2308)",
		field: func(c *Config) any { return &c.ServfailTTL }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("servfail-ttl", c.ServfailTTL, 0, maxServfailTTL)
		}},
	{key: "cache-keep-ttl", help: "cache hits carry the TTL the answer was stored with instead of counting it down (CoreDNS keepttl)",
		field: func(c *Config) any { return &c.CacheKeepTTL }, apply: on(ApplyCache)},
	{key: "serve-stale-mode", def: ServeStaleVerify, help: "verify: an expired answer is served stale only once the upstream failed (or was slower than serve-stale-timeout); immediate: at once, refreshed in the background",
		field: func(c *Config) any { return &c.ServeStaleMode }, apply: on(ApplyCache), check: func(c *Config) error {
			return oneOf("serve-stale-mode", c.ServeStaleMode, ServeStaleVerify, ServeStaleImmediate)
		}},
	{key: "serve-stale-timeout", def: "1.8s", help: "verify: how long a query waits for the upstream before the stale answer (0s: until the upstream fails); at most 1m",
		field: func(c *Config) any { return &c.ServeStaleTimeout }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("serve-stale-timeout", c.ServeStaleTimeout, 0, maxStaleTimeout)
		}},
	{key: "serve-stale-ttl", def: "30s", help: "TTL of stale answers, whole seconds (RFC 8767: 30s)",
		field: func(c *Config) any { return &c.ServeStaleTTL }, apply: on(ApplyCache), check: checkServeStaleTTL},
	{key: "serve-stale-recheck", def: "10s", help: "after a failed refresh, how long stale answers go at once before the upstream is asked again in the foreground (0s: every query); at most 5m",
		field: func(c *Config) any { return &c.ServeStaleRecheck }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("serve-stale-recheck", c.ServeStaleRecheck, 0, maxStaleRecheck)
		}},
	{key: "serve-stale-policy", help: "prefer_positive: an answer is kept over a denial or failure while it may be served stale (empty: none)",
		field: func(c *Config) any { return &c.ServeStalePolicy }, apply: on(ApplyCache), check: checkServeStalePolicy},
	{key: "prefetch-window", def: "1m", help: "hits count toward prefetch only within this of the previous hit; 1s to 24h",
		field: func(c *Config) any { return &c.PrefetchWindow }, apply: on(ApplyCache), check: func(c *Config) error {
			return durationBetween("prefetch-window", c.PrefetchWindow, minPrefetchWindow, maxPrefetchWindow)
		}},
	{key: "prefetch-percent", def: "10", help: "a popular entry is refreshed on the hit that sees its TTL at this percentage of the original or less; 10 to 90",
		field: func(c *Config) any { return &c.PrefetchPercent }, apply: on(ApplyCache), check: func(c *Config) error {
			return between("prefetch-percent", c.PrefetchPercent, 10, 90)
		}},
	{key: "cache-disable-success", help: "comma-separated zones whose answers are never cached ('.' every name), as CoreDNS's disable success; at most 64",
		field: func(c *Config) any { return &c.CacheDisableSuccess }, apply: on(ApplyCache), check: func(c *Config) error {
			return checkDisableZones("cache-disable-success", c.CacheDisableSuccess)
		}},
	{key: "cache-disable-denial", help: "comma-separated zones whose NXDOMAIN, NODATA and SERVFAIL are never cached ('.' every name), as CoreDNS's disable denial; at most 64",
		field: func(c *Config) any { return &c.CacheDisableDenial }, apply: on(ApplyCache), check: func(c *Config) error {
			return checkDisableZones("cache-disable-denial", c.CacheDisableDenial)
		}},

	// Bounds and readers.
	{key: "max-inflight", def: "2000", help: "queries resolved at once off the readers; beyond it: SERVFAIL at once; 1 to 10000",
		field: func(c *Config) any { return &c.MaxInflight }, check: func(c *Config) error {
			return between("max-inflight", c.MaxInflight, 1, maxInflight)
		}},
	{key: "max-client-inflight", def: "0", help: "of those, at most this many for one client address (0: max-inflight/8, at least 16; -1: no per-client bound; else 1 to max-inflight)",
		field: func(c *Config) any { return &c.MaxClientInflight }, check: func(c *Config) error {
			if v := c.MaxClientInflight; v < -1 || v > c.MaxInflight {
				return fmt.Errorf("--max-client-inflight %d: want -1 (no per-client bound), 0 (max-inflight/8) or 1 to max-inflight (%d)", v, c.MaxInflight)
			}
			return nil
		}},
	{key: "max-tcp-conns", def: "1000", help: "open TCP connections at most; 1 to 4096",
		field: func(c *Config) any { return &c.MaxTCPConns }, check: func(c *Config) error {
			return between("max-tcp-conns", c.MaxTCPConns, 1, maxTCPConns)
		}},
	{key: "max-udp-size", def: "1232", help: "largest UDP reply whatever the client advertises",
		field: func(c *Config) any { return &c.MaxUDPSize }, check: func(c *Config) error {
			if c.MaxUDPSize < 512 || c.MaxUDPSize > 65535 {
				return fmt.Errorf("--max-udp-size %d: want 512 to 65535", c.MaxUDPSize)
			}
			return nil
		}},
	{key: "udp-readers", def: "threads", help: "how UDP sockets are read: threads (an OS thread per socket blocking in recvmmsg) or poller (Go netpoller)",
		field: func(c *Config) any { return &c.UDPReaders }, check: func(c *Config) error {
			return oneOf("udp-readers", c.UDPReaders, "threads", "poller")
		}},
	{key: "udp-sockets", def: "0", help: "SO_REUSEPORT UDP sockets (each with its own reader) per listen address; 0: 1 (one reader serves about one core's worth of queries); at most 64, and 256 readers over all listen addresses",
		field: func(c *Config) any { return &c.UDPSockets }, check: func(c *Config) error {
			return between("udp-sockets", c.UDPSockets, 0, maxUDPSockets)
		}},
	{key: "gomaxprocs", def: "0", help: "Go scheduler Ps (GOMAXPROCS), at most 256; 0: $GOMAXPROCS when set, else one per UDP thread reader (sockets x listen addresses) plus one, also under a container CPU limit (bench/RESULTS.md, GOMAXPROCS)",
		field: func(c *Config) any { return &c.GoMaxProcs }, check: func(c *Config) error {
			return between("gomaxprocs", c.GoMaxProcs, 0, maxGoMaxProcs)
		}},
	{key: "loop-check", def: "true", help: "at start, send a probe through the upstream and exit if it comes back (forwarding loop)",
		field: func(c *Config) any { return &c.LoopCheck }},

	// Cluster zone.
	{key: "kubeconfig", help: "kubeconfig file (default: in-cluster config inside a pod, else no cluster zone)",
		field: func(c *Config) any { return &c.Kubeconfig }},
	{key: "kubeconfig-context", help: "context of --kubeconfig to use (default: the file's current context), as CoreDNS's kubeconfig FILE CONTEXT",
		field: func(c *Config) any { return &c.KubeconfigContext }, check: func(c *Config) error {
			if c.KubeconfigContext != "" && c.Kubeconfig == "" {
				return fmt.Errorf("--kubeconfig-context %q needs --kubeconfig: the in-cluster configuration has no contexts", c.KubeconfigContext)
			}
			return nil
		}},
	{key: "cluster-domain", def: "cluster.local", repeat: true, help: "the cluster's DNS domain; repeat (or separate by commas) to answer several zones from one index, the first primary (PTR targets, search-path walk); in the file a string or a list; at most 8, none twice",
		field: func(c *Config) any { return &c.ClusterDomain }, check: func(c *Config) error {
			if len(c.ClusterDomain) == 0 {
				return errors.New("--cluster-domain: want at least one domain")
			}
			return checkList("cluster-domain", "domains", c.ClusterDomain, maxClusterDomains, canonClusterDomain)
		}},
	{key: "multicluster-domain", repeat: true, help: "a zone answered from the ServiceImports of the Multi-Cluster Services API (multicluster.x-k8s.io/v1alpha1) and their EndpointSlices, e.g. clusterset.local, as CoreDNS's multicluster; repeat for several; not a --cluster-domain; at most 8",
		field: func(c *Config) any { return &c.MulticlusterDomain }, check: func(c *Config) error {
			return checkList("multicluster-domain", "domains", c.MulticlusterDomain, maxClusterDomains, canonClusterDomain)
		}},
	{key: "cluster-ttl", def: "5s", help: "TTL of cluster answers (0s-3600s)",
		field: func(c *Config) any { return &c.ClusterTTL }, check: func(c *Config) error {
			if c.ClusterTTL < 0 || time.Duration(c.ClusterTTL) > time.Hour {
				return fmt.Errorf("--cluster-ttl %s: want 0s to 1h", c.ClusterTTL)
			}
			return nil
		}},
	{key: "pods", def: "insecure", help: "pod records: disabled, insecure or verified",
		field: func(c *Config) any { return &c.Pods }, check: func(c *Config) error {
			return oneOf("pods", c.Pods, "disabled", "insecure", "verified")
		}},
	{key: "cluster-dns", help: "ip[:port] of the central cluster DNS: with --cluster-zone forward it answers the cluster and reverse zones; with local, cluster names only until the informers have synced",
		field: func(c *Config) any { return &c.ClusterDNS }, check: func(c *Config) error {
			if c.ClusterDNS == "" {
				return nil
			}
			if _, err := upstream.NormalizeAddr(c.ClusterDNS); err != nil {
				return fmt.Errorf("--cluster-dns %q: want an IP address with an optional :port", c.ClusterDNS)
			}
			return nil
		}},
	{key: "cluster-zone", def: ClusterZoneLocal, help: "local: answer the cluster zone from the API server; forward: send the cluster and reverse zones to --cluster-dns and cache them (NodeLocal DNSCache's arrangement, for central Corefiles that customize the zone)",
		field: func(c *Config) any { return &c.ClusterZone }, check: func(c *Config) error {
			return oneOf("cluster-zone", c.ClusterZone, ClusterZoneLocal, ClusterZoneForward)
		}},
	{key: "cluster-dns-protocol", def: ProtoTCP, help: "tcp or udp: how --cluster-dns is asked (udp retries over TCP when truncated)",
		field: func(c *Config) any { return &c.ClusterDNSProtocol }, check: func(c *Config) error {
			return oneOf("cluster-dns-protocol", c.ClusterDNSProtocol, ProtoTCP, ProtoUDP)
		}},
	{key: "node-name", env: "NODE_NAME", help: "this node's name (default $NODE_NAME); its pods are watched for the search-path walk",
		field: func(c *Config) any { return &c.NodeName }, check: func(c *Config) error {
			if c.NodeName == "" {
				return nil
			}
			if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
				return fmt.Errorf("--node-name %q: not a node name: %s", c.NodeName, errs[0])
			}
			return nil
		}},
	{key: "autopath", def: "true", help: "walk pods' search lists on the server (one round trip instead of several)",
		field: func(c *Config) any { return &c.Autopath }, apply: on(ApplySearch)},
	{key: "cluster-sync-wait", def: "5s", help: "at start, how long to wait for the cluster index before serving when no other agent answers on our addresses (one that does keeps serving until we synced); 0s to 5m",
		field: func(c *Config) any { return &c.ClusterSyncWait }, check: func(c *Config) error {
			return durationBetween("cluster-sync-wait", c.ClusterSyncWait, 0, maxClusterSyncWait)
		}},
	{key: "search", help: "comma-separated extra search domains pods inherit (default: those after the cluster's in --resolv-conf); kubelet's bounds: at most 32 domains and 2048 characters, none twice",
		field: func(c *Config) any { return &c.Search }, apply: on(ApplySearch), check: func(c *Config) error {
			return checkSearch("search", c.Search)
		}},
	{key: "endpoint-pod-names", help: "name endpoints without a hostname after their pod (targetRef) instead of their address, as CoreDNS endpoint_pod_names",
		field: func(c *Config) any { return &c.EndpointPodNames }},
	{key: "ignore-empty-service", help: "NXDOMAIN for a ClusterIP Service without ready endpoints, as CoreDNS's ignore empty_service",
		field: func(c *Config) any { return &c.IgnoreEmptyService }},
	{key: "no-endpoints", help: "do not watch EndpointSlices: headless and endpoint names are NXDOMAIN, as CoreDNS noendpoints",
		field: func(c *Config) any { return &c.NoEndpoints }},
	{key: "namespaces", help: "comma-separated namespaces whose names exist; names in others are NXDOMAIN (default: all), as CoreDNS namespaces; at most 1000, none twice",
		field: func(c *Config) any { return &c.Namespaces }, check: func(c *Config) error {
			return checkList("namespaces", "namespaces", c.Namespaces, maxNamespaces, canonNamespace)
		}},
	{key: "namespace-labels", help: "label selector (kubectl -l syntax): only namespaces it matches are exposed, as CoreDNS namespace_labels",
		field: func(c *Config) any { return &c.NamespaceLabels }},
	{key: "fallthrough", def: "in-addr.arpa,ip6.arpa", help: "comma-separated zones (or CIDRs) where a cluster NXDOMAIN goes on to cache and upstream instead; '.' is every zone, empty none; replaces the default, as CoreDNS fallthrough; at most 64, none twice",
		field: func(c *Config) any { return &c.Fallthrough }, check: func(c *Config) error {
			return checkList("fallthrough", "zones", c.Fallthrough, maxFallthrough, canonLower)
		}},

	// Interception.
	{key: "network-mode", def: NetworkHost, help: "host: the agent holds --local-ip on its link with NOTRACK/ACCEPT rules (a host-network pod); pod: the agent runs in the pod network as the backend of a CiliumLocalRedirectPolicy, with no link, no rules and no teardown, serving DNS on port 53 of --pod-ips; restart-only",
		field: func(c *Config) any { return &c.NetworkMode }, check: func(c *Config) error {
			return oneOf("network-mode", c.NetworkMode, NetworkHost, NetworkPod)
		}},
	{key: "pod-ips", env: "POD_IPS", help: "with --network-mode pod: comma-separated addresses of the pod (default $POD_IPS, the downward API's status.podIPs), one per family; DNS is served on port 53 of each (unless --listen); at most 2",
		field: func(c *Config) any { return &c.PodIPs }, check: checkPodIPs},
	{key: "local-ip", help: "comma-separated addresses pods send DNS to (e.g. 169.254.20.10 and the kube-dns ClusterIP): in host mode held on the link with rules; in pod mode the redirect's frontends, never bound, refused as upstreams (a loop); at most 8, none twice",
		field: func(c *Config) any { return &c.LocalIP }, check: func(c *Config) error {
			for _, a := range c.LocalIP {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					return fmt.Errorf("--local-ip %q: want an IP address", a)
				}
				if ip = ip.Unmap(); ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() {
					return fmt.Errorf("--local-ip %q: unspecified, loopback and multicast addresses cannot be intercepted", a)
				}
			}
			return checkList("local-ip", "addresses", c.LocalIP, maxLocalIPs, func(s string) (string, error) {
				return netip.MustParseAddr(s).Unmap().String(), nil // parsed above
			})
		}},
	{key: "interface", def: intercept.DefaultInterface, help: "link that holds the local IPs",
		field: func(c *Config) any { return &c.Interface }, check: func(c *Config) error {
			if intercept.ValidInterfaceName(c.Interface) != nil {
				return fmt.Errorf("--interface %q: want 1-15 characters, no '/', ':' or whitespace", c.Interface)
			}
			return nil
		}},
	{key: "setup-interface", def: "true", help: "create and maintain the link (with --local-ip)",
		field: func(c *Config) any { return &c.SetupInterface }},
	{key: "setup-iptables", def: "true", help: "install and maintain NOTRACK/ACCEPT rules (with --local-ip)",
		field: func(c *Config) any { return &c.SetupIptables }},
	{key: "sync-interval", def: "60s", help: "how often the link and rules are checked and repaired (a Go duration); 1s to 1h",
		field: func(c *Config) any { return &c.SyncInterval }, check: func(c *Config) error {
			return durationBetween("sync-interval", c.SyncInterval, minSyncInterval, maxSyncInterval)
		}},
	{key: "fallback-dns", help: "where queries to the local IPs go, by the kernel's NAT, while no process holds the agent's sockets (a crash, an OOM kill, a restart): comma-separated addresses (ip or ip:port, port 53 by default) and Services (namespace/name: their ready endpoints, and each endpoint's pod's own addresses when it runs on this node); unset: the cluster DNS Service (kube-system/kube-dns) when the cluster index runs, else none; empty: no fallback; not for host-network clients; at most 16, none twice",
		field: func(c *Config) any { return &c.FallbackDNS }, apply: on(ApplyFallback), check: checkFallbackDNS},
	{key: "teardown", def: "true", help: "remove rules and link on exit when no other agent serves the addresses",
		field: func(c *Config) any { return &c.Teardown }, apply: on(ApplyAtExit)},
	{key: "lameduck", def: "5s", help: "on SIGTERM: report not ready and keep answering this long before exiting (a second SIGTERM or SIGINT ends it); 0s to 5m, and under the pod's grace period",
		field: func(c *Config) any { return &c.Lameduck }, apply: on(ApplyAtExit), check: func(c *Config) error {
			return durationBetween("lameduck", c.Lameduck, 0, maxLameduck)
		}},

	{key: "supervise", def: "true", help: "run as two processes: a supervisor that holds the DNS sockets and a serving process it restarts at once on the same sockets when it dies (a crash, kill -9, an OOM kill) or hangs, so queries wait in the sockets instead of failing; restart-only",
		field: func(c *Config) any { return &c.Supervise }},
	{key: "hang-timeout", def: "1s", help: "with supervise: a serving process stopped (SIGSTOP, a tracer), or leaving a query unread, this long is killed and replaced; the sockets are held this long for a new one before the node's fallback gets the queries; 500ms to 1m; restart-only",
		field: func(c *Config) any { return &c.HangTimeout }, check: func(c *Config) error {
			return durationBetween("hang-timeout", c.HangTimeout, minHangTimeout, maxHangTimeout)
		}},

	// Logs.
	// Drop-in features of CoreDNS plugins (dropin.go).
	{key: "hosts", flag: noFlag, help: "static records as CoreDNS's hosts plugin: entries (hosts(5) lines), file (re-read when it changes), ttl, no-reverse, zones, fallthrough (at most 64 zones each), reload (0s, or 100ms to 1h)",
		field: func(c *Config) any { return &c.Hosts }, apply: on(ApplyHosts), check: func(c *Config) error {
			if err := c.checkHostsBounds(); err != nil {
				return err
			}
			return hosts.Check(c.HostsSettings())
		}},
	{key: "rewrite", flag: noFlag, help: "name rewrites as CoreDNS's rewrite plugin (answer auto): a list of {type: exact|prefix|suffix|substring|regex, from, to}; at most 64 rules",
		field: func(c *Config) any { return &c.Rewrite }, apply: on(ApplyRewrite), check: func(c *Config) error {
			if len(c.Rewrite) > maxRewriteRules {
				return fmt.Errorf("rewrite: %d rules: want at most %d (every rule is tried on every query)", len(c.Rewrite), maxRewriteRules)
			}
			_, err := c.Rewriter()
			return err
		}},
	// CoreDNS plugins around the stages (plugins.go).
	{key: "local", help: "answer localhost, names under it and the 0, 127 and 255.in-addr.arpa zones before anything else, as CoreDNS's local",
		field: func(c *Config) any { return &c.Local }, apply: on(ApplyPlugins)},
	{key: "local-localhost-prefix", def: "true", help: "with local: names starting localhost. are answered as localhost too (CoreDNS localhost_prefix)",
		field: func(c *Config) any { return &c.LocalLocalhostPrefix }, apply: on(ApplyPlugins)},
	{key: "chaos", help: "answer version.bind, version.server, authors.bind, hostname.bind and id.server in class CH, as CoreDNS's chaos",
		field: func(c *Config) any { return &c.Chaos }, apply: on(ApplyPlugins)},
	{key: "chaos-version", help: "with chaos: the version answered (default nodedns-VERSION)",
		field: func(c *Config) any { return &c.ChaosVersion }, apply: on(ApplyPlugins), check: checkChaos},
	{key: "chaos-authors", def: "nodedns", help: "with chaos: comma-separated authors answered for authors.bind; at most 64",
		field: func(c *Config) any { return &c.ChaosAuthors }, apply: on(ApplyPlugins)},
	{key: "acl", flag: noFlag, help: "access list as CoreDNS's acl: a list of {zones, policies: [{action: allow|block|filter|drop, types, nets}]}; at most 64 rules of 64 policies",
		field: func(c *Config) any { return &c.ACL }, apply: on(ApplyPlugins), check: checkACL},
	{key: "templates", flag: noFlag, help: "answers from templates as CoreDNS's template: a list of {class, type, zones, match, answer, additional, authority, rcode, ede: {code, reason}, fallthrough}; at most 64",
		field: func(c *Config) any { return &c.Templates }, apply: on(ApplyPlugins), check: checkTemplates},
	{key: "header", flag: noFlag, help: "header flags as CoreDNS's header: {query: {set, clear}, response: {set, clear}} of aa, ra, rd",
		field: func(c *Config) any { return &c.Header }, apply: on(ApplyPlugins, ApplyCache), check: func(c *Config) error {
			_, _, _, err := c.HeaderMasks()
			return err
		}},
	{key: "minimal-responses", help: "leave the authority and additional sections out of NOERROR answers, as CoreDNS's minimal (forwarded answers are always minimal); restart-only",
		field: func(c *Config) any { return &c.MinimalResponses }},
	{key: "dnstap", flag: noFlag, help: "dnstap logs as CoreDNS's dnstap: a list of {socket: unix:///path|tcp://host:port|tls://host:port, full, identity, version, extra, skip-verify, queue-messages, queue-bytes}; client queries and replies, and upstream exchanges; at most 4; restart-only",
		field: func(c *Config) any { return &c.Dnstap }, check: checkDnstap},
	{key: "views", flag: noFlag, help: "split horizon as CoreDNS's view blocks: a list of {name, expr: [EXPRESSION...], zones, forward: {servers, ...}}; the queries of the zones for which every expression holds go to the view's servers through a cache of its own; at most 16; restart-only",
		field: func(c *Config) any { return &c.Views }, check: checkViews},
	{key: "loadbalance", help: "round_robin: rotate the order of A and AAAA records in every reply, as CoreDNS's loadbalance (empty: off)",
		field: func(c *Config) any { return &c.LoadBalance }, apply: on(ApplyLoadBalance), check: func(c *Config) error {
			if c.LoadBalance != LoadBalanceOff && c.LoadBalance != LoadBalanceRoundRobin {
				return fmt.Errorf("--loadbalance %q: want round_robin (or empty for off)", c.LoadBalance)
			}
			return nil
		}},

	{key: "log-level", def: "info", help: "debug, info, warn or error",
		field: func(c *Config) any { return &c.LogLevel }, apply: on(ApplyLogLevel), check: func(c *Config) error {
			return oneOf("log-level", c.LogLevel, "debug", "info", "warn", "error")
		}},
	{key: "log-format", def: "text", help: "text or json; client-go's messages use it too",
		field: func(c *Config) any { return &c.LogFormat }, check: func(c *Config) error {
			return oneOf("log-format", c.LogFormat, "text", "json")
		}},
	{key: "pprof", help: "serve Go's /debug/pprof on --admin-socket only, never on --admin",
		field: func(c *Config) any { return &c.Pprof }},
	{key: "test-hooks", help: "for tests only: serve POST /debug/alloc?mib=N on --admin-socket, which makes the serving process hold N MiB more (a memory limit reached on purpose); restart-only",
		field: func(c *Config) any { return &c.TestHooks }},
	{key: "log-queries-class", help: "comma-separated reply classes the query log keeps, as CoreDNS's log plugin: all, success, denial (NXDOMAIN, NODATA), error (SERVFAIL, REFUSED, NOTIMP, FORMERR, ...); restart-only",
		field: func(c *Config) any { return &c.LogQueriesClass }, check: func(c *Config) error {
			if err := metrics.CheckLogClasses(c.LogQueriesClass); err != nil {
				return fmt.Errorf("--log-queries-class: %w", err)
			}
			return checkList("log-queries-class", "classes", c.LogQueriesClass, maxLogClasses, canonLower)
		}},
	{key: "log-queries", def: "0", help: "fraction of queries to log (0 to 1); 0 with --log-queries-class: every query of those classes",
		field: func(c *Config) any { return &c.LogQueries }, apply: on(ApplyQueryLog), check: func(c *Config) error {
			if !(c.LogQueries >= 0 && c.LogQueries <= 1) { // NaN too
				return fmt.Errorf("--log-queries %g: want 0 to 1", c.LogQueries)
			}
			return nil
		}},

	// Metrics.
	{key: "metrics-compat", def: "coredns", help: "series /metrics exports besides nodedns_*: coredns (CoreDNS 1.15 and NodeLocal DNSCache names, for their dashboards and alerts) or none",
		field: func(c *Config) any { return &c.MetricsCompat }, check: func(c *Config) error {
			return oneOf("metrics-compat", c.MetricsCompat, "coredns", "none")
		}},
	{key: "metrics-namespaces", def: "50", help: "namespaces of this node's pods counted apart in the nodedns_namespace_* series and /stats (the busiest, kept stable); the rest as namespace=\"other\", clients that are no pod of this node as \"_nonpod\"; 0 turns them off; 0 to 1000; restart-only",
		field: func(c *Config) any { return &c.MetricsNamespaces }, check: func(c *Config) error {
			return between("metrics-namespaces", c.MetricsNamespaces, 0, metrics.MaxNamespaces)
		}},

	// CoreDNS's nsid and file (zonefile.go).
	{key: "nsid", help: "answer the NSID EDNS option (RFC 5001) with --nsid-data, as CoreDNS's nsid",
		field: func(c *Config) any { return &c.NSID }, apply: on(ApplyPlugins)},
	{key: "nsid-data", help: "with nsid: the NSID payload (default the node's name, --node-name, else the host name); at most 128 bytes",
		field: func(c *Config) any { return &c.NSIDData }, apply: on(ApplyPlugins), check: checkNSID},
	{key: "nsid-zones", help: "with nsid: comma-separated zones whose names get it (default every name); the most specific of nsid-zones and nsid-except holding the name decides, as CoreDNS's server blocks with and without nsid; at most 64",
		field: func(c *Config) any { return &c.NSIDZones }, apply: on(ApplyPlugins), check: checkNSID},
	{key: "nsid-except", help: "with nsid: comma-separated zones whose names do not get it (server blocks without nsid); at most 64",
		field: func(c *Config) any { return &c.NSIDExcept }, apply: on(ApplyPlugins), check: checkNSID},
	{key: "zone-files", flag: noFlag, help: "zones served from RFC 1035 zone files as CoreDNS's file: a list of {file, zones, reload (default 1m; 0s: never), fallthrough}; at most 16 files of 32 MiB and 200000 records each",
		field: func(c *Config) any { return &c.ZoneFiles }, apply: on(ApplyZoneFiles), check: checkZoneFiles},
	// dns64 and k8s_external (dns64.go).
	{key: "dns64", flag: noFlag, help: "AAAA records synthesized from A records as CoreDNS's dns64: {prefix (default 64:ff9b::/96; length 32, 40, 48, 56, 64 or 96), translate-all, allow-ipv4}; absent: off",
		field: func(c *Config) any { return &c.DNS64Opts }, apply: on(ApplyPlugins), check: checkDNS64},
	{key: "k8s-external", flag: noFlag, help: "Services' external IPs and load-balancer ingress answered in external zones as CoreDNS's k8s_external: {zones, apex (default dns), ttl (default 5; 0 to 3600), headless, fallthrough}; needs the cluster zone; absent: off",
		field: func(c *Config) any { return &c.K8sExternalOpts }, apply: on(ApplyPlugins), check: checkK8sExternal},
}

// completeCheck reports a configuration that is valid but not enough to
// serve: `nodedns serve` and `config validate` refuse it, `config print`
// still shows it (the defaults alone are such a configuration).
func completeCheck(c *Config) error {
	if len(c.ListenAddrs()) == 0 {
		if c.PodMode() {
			return errors.New("nothing to listen on: with --network-mode pod give --pod-ips (the chart sets $POD_IPS from status.podIPs) or --listen")
		}
		return errors.New("nothing to listen on: give --listen or --local-ip")
	}
	return nil
}

// crossChecks are the checks that involve several settings.
var crossChecks = []func(c *Config) error{
	func(c *Config) error {
		if c.TestHooks && c.AdminSocket == "" {
			return errors.New("--test-hooks needs --admin-socket: they are served on the unix socket only")
		}
		return nil
	},
	func(c *Config) error {
		if c.Pprof && c.AdminSocket == "" {
			return errors.New("--pprof needs --admin-socket: profiles are served on the unix socket only, never on the TCP admin address")
		}
		return nil
	},
	// UDP readers over all listen addresses (bounds.go).
	func(c *Config) error { return c.checkReaders() },
	// Upstreams and stub domains: server forms, names in the cluster
	// zone, force-tcp against prefer-udp, bounds (upstreams.go).
	func(c *Config) error { return c.validateUpstreams() },
	// --cluster-zone forward needs --cluster-dns, which must not be ourselves.
	func(c *Config) error { return c.validateForward() },
	checkFallbackLoop,
	checkUpstreamLoop,
	// Pod mode: no upstream is an address the redirect sends here
	// (network.go).
	CheckPodNetwork,
	checkNetworkMode,
	checkMinNegativeTTL,
	func(c *Config) error {
		// (A min-ttl past its own bound is reported by its check.)
		if c.MinTTL > c.MaxTTL && time.Duration(c.MinTTL) <= maxMinTTL {
			return fmt.Errorf("--min-ttl %s is above --max-ttl %s", c.MinTTL, c.MaxTTL)
		}
		return nil
	},
}

// checkUpstreamLoop refuses an --upstream that is one of the agent's own
// addresses (the kube-dns ClusterIP both in --local-ip and --upstream):
// the agent would forward its misses to itself. An upstream given by name
// or that does not parse is left to the other checks. pkg/agent applies
// the same test (IsOwnAddr) to the kube-dns ConfigMap's upstreams, which
// only the running agent reads.
func checkUpstreamLoop(c *Config) error {
	for _, u := range c.Upstream {
		sp, err := upstream.ParseServer(u)
		if err != nil || sp.ByName() {
			continue
		}
		if c.IsOwnAddr(sp.Addr) {
			own := fmt.Sprintf("--local-ip %s, on port 53", strings.Join(c.LocalIP, ","))
			if len(c.Listen) > 0 {
				own = fmt.Sprintf("--local-ip %s, --listen %s", strings.Join(c.LocalIP, ","), strings.Join(c.Listen, ","))
			}
			return fmt.Errorf("--upstream %s is one of this agent's own addresses (%s): that is a forwarding loop; name the central DNS by another address (a kube-dns-upstream Service) or the real resolvers", u, own)
		}
	}
	return nil
}

// clusterCheck validates the cluster zone settings together, as pkg/k8s
// will; it runs only when every setting passed its own check, since it
// would report some of them again.
func clusterCheck(c *Config) error { return c.ClusterSettings().Validate() }

func oneOf(key, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("--%s %q: want one of %v", key, v, allowed)
}

func on(a ...Apply) []Apply { return a }

var settingIndex = func() map[string]*Setting {
	m := make(map[string]*Setting, 2*len(settings))
	for _, s := range settings {
		m[s.key] = s
	}
	return m
}()

// SettingOf returns the setting whose field in c is at p, a pointer into
// c (&c.MaxTTL), or nil: code that builds a Config (`nodedns migrate`)
// names a setting by its field, not by a key string.
func SettingOf(c *Config, p any) *Setting {
	for _, s := range settings {
		if s.field(c) == p {
			return s
		}
	}
	return nil
}

// SettingByKey returns the setting of a file key, or nil.
func SettingByKey(key string) *Setting { return settingIndex[key] }

func settingByFlag(name string) *Setting {
	for _, s := range settings {
		if s.flagName() == name {
			return s
		}
	}
	return nil
}

// nearestKey returns the known key closest to k (at most two edits away),
// for "did you mean".
func nearestKey(k string) string {
	best, bestD := "", 3
	for _, s := range settings {
		if d := editDistance(k, s.key); d < bestD {
			best, bestD = s.key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
