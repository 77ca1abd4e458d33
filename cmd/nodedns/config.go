package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
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
	// Upstream transport (upstreams.go): force-tcp and prefer-udp apply
	// to --upstream; upstream-ca verifies tls:// upstreams.
	ForceTCP   bool
	PreferUDP  bool
	UpstreamCA string
	// KubeDNSConfig is the mounted kube-dns ConfigMap, merged under the
	// upstream settings (kubedns.go).
	KubeDNSConfig string

	CacheSize      int
	CacheMaxBytes  Bytes
	MinTTL         Duration
	MaxTTL         Duration
	MaxNegativeTTL Duration
	ServeStale     Duration
	Prefetch       int

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
	// ClusterDomain lists the cluster's zones, the primary first: a
	// string or a list in the file, a repeatable flag.
	ClusterDomain List
	ClusterTTL    Duration
	Pods          string
	ClusterDNS    string
	// ClusterZone is local (answered from the API server) or forward
	// (sent to ClusterDNS, as NodeLocal DNSCache does); forward.go.
	ClusterZone        string
	ClusterDNSProtocol string
	NodeName           string
	Autopath           bool
	// Drop-in features of CoreDNS plugins (dropin.go). hosts and rewrite
	// are file keys only.
	Hosts       *HostsConfig
	Rewrite     []RewriteRule
	LoadBalance string
	// ClusterSyncWait bounds how long the listeners wait for the cluster
	// index at start when no other agent serves our addresses.
	ClusterSyncWait Duration
	Search          List

	// Cluster zone options of CoreDNS's kubernetes plugin (pkg/cluster/k8s.Config).
	EndpointPodNames   bool
	IgnoreEmptyService bool
	NoEndpoints        bool
	Namespaces         List
	NamespaceLabels    string
	// Fallthrough: an empty list (`--fallthrough=`, `fallthrough: []`)
	// means none; the default is the reverse zones.
	Fallthrough List

	LocalIP        List
	Interface      string
	SetupInterface bool
	SetupIptables  bool
	SyncInterval   Duration
	Teardown       bool
	Lameduck       Duration

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
	// fileBytes is the file's content as loaded.
	fileBytes []byte
}

// isGiven reports whether key was set by the file or a flag.
func (c *Config) isGiven(key string) bool { return c.given[key] }

// schedulerProcs is the GOMAXPROCS the agent runs with: --gomaxprocs when
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

// defaultConfig is the configuration before the file and the flags: every
// setting's default from the table.
func defaultConfig() Config {
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

// Config file header: optional, but when present it must name this schema.
const (
	configAPIGroup   = "nodedns.io"
	configAPIVersion = configAPIGroup + "/v1alpha1"
	configKind       = "Config"
)

// loadResult is what loading a configuration found besides the
// configuration itself: problems (the configuration must not be used)
// and warnings (it may, e.g. with an unknown key ignored).
type loadResult struct {
	problems []string
	warnings []string
	// incomplete: the configuration is valid but cannot serve as it is
	// (nothing to listen on); serve and validate count it as a problem.
	incomplete []string
}

func (r *loadResult) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *loadResult) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

// all is every problem, the configuration's incompleteness included.
func (r *loadResult) all() []string { return append(slices.Clip(r.problems), r.incomplete...) }

// err is nil without problems, else one line naming each of them.
func (r *loadResult) err() error {
	if all := r.all(); len(all) > 0 {
		return errors.New(strings.Join(all, "; "))
	}
	return nil
}

// loadConfig returns the configuration for args: defaults, then the
// --config file, then the flags in args. Warnings (unknown keys in the
// file) are written to warn, one line each; nil: dropped.
func loadConfig(args []string, warn io.Writer) (Config, error) {
	cfg, res, err := load(args, false, warn)
	if err != nil {
		return Config{}, err
	}
	if warn != nil {
		for _, w := range res.warnings {
			fmt.Fprintln(warn, "warning:", w)
		}
	}
	return cfg, res.err()
}

// load is loadConfig with the findings returned. strict (`nodedns config
// validate`) makes unknown keys and an unknown schema version problems.
// err is a command-line error (-h, a bad flag); everything else is in the
// loadResult.
func load(args []string, strict bool, usage io.Writer) (Config, *loadResult, error) {
	res := &loadResult{}
	// First pass: only to find --config.
	var path string
	probe := flag.NewFlagSet("serve", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	tmp := defaultConfig()
	tmp.bind(probe, &path)
	if err := probe.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) && usage != nil {
			probe.SetOutput(usage)
			probe.PrintDefaults()
		}
		return Config{}, res, err // one line: the flag package names the bad value
	}
	if probe.NArg() > 0 {
		return Config{}, res, fmt.Errorf("unexpected argument %q", probe.Arg(0))
	}
	cfg := defaultConfig()
	cfg.given, cfg.fromFlags = map[string]bool{}, map[string]bool{}
	if path != "" {
		if !cfg.readFile(path, strict, res) {
			return cfg, res, nil
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.bind(fs, &path)
	if err := fs.Parse(args); err != nil {
		return Config{}, res, err
	}
	cfg.path = path
	cfg.Admin = normalizeHostPort(cfg.Admin)
	fs.Visit(func(f *flag.Flag) {
		if s := settingByFlag(f.Name); s != nil {
			cfg.given[s.key], cfg.fromFlags[s.key] = true, true
		}
	})
	cfg.validate(res)
	return cfg, res, nil
}

// readFile overlays the YAML file at path on c, recording what is wrong in
// res; false when the file could not be read or parsed at all. Each key is
// decoded on its own, so every bad key is reported, by name. An unknown key
// is a warning (a key of a newer version, kept in the ConfigMap while a
// rollback runs the older agent, must not crash-loop it) unless strict.
func (c *Config) readFile(path string, strict bool, res *loadResult) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		res.problem("reading config %s: %v", path, err)
		return false
	}
	c.fileBytes = b
	var doc any
	// Strict only about duplicate keys: which of two would win is a guess.
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		res.problem("config %s: %s", path, yamlError(err))
		return false
	}
	if _, ok := doc.(map[string]any); doc != nil && !ok {
		res.problem("config %s: want a map of settings (key: value), got %s", path, jsonKind(reflect.TypeOf(doc).Kind().String()))
		return false
	}
	var raw map[string]json.RawMessage
	if err := yaml.Unmarshal(b, &raw); err != nil {
		res.problem("config %s: %s", path, yamlError(err))
		return false
	}
	c.file = raw
	if v, ok := raw["apiVersion"]; ok {
		var s string
		switch {
		case json.Unmarshal(v, &s) != nil:
			res.problem("config %s: apiVersion %s: want the string %q", path, v, configAPIVersion)
		case s == configAPIVersion:
		case strings.HasPrefix(s, configAPIGroup+"/") && !strict:
			res.warn("config %s: apiVersion %q: this agent reads %s; reading the keys it knows", path, s, configAPIVersion)
		default:
			res.problem("config %s: apiVersion %q: want %q", path, s, configAPIVersion)
		}
	}
	if v, ok := raw["kind"]; ok {
		var s string
		if json.Unmarshal(v, &s) != nil || s != configKind {
			res.problem("config %s: kind %s: want %q", path, v, configKind)
		}
	}
	for _, k := range sortedKeys(raw) {
		if k == "apiVersion" || k == "kind" {
			continue
		}
		s := settingByKey(k)
		if s == nil {
			msg := fmt.Sprintf("config %s: unknown key %q", path, k)
			if near := nearestKey(k); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			if strict {
				res.problem("%s", msg)
			} else {
				res.warn("%s; ignored", msg)
			}
			continue
		}
		if err := s.decode(c, raw[k]); err != nil {
			res.problem("config %s: key %q: %v", path, k, err)
			continue
		}
		c.given[k] = true
	}
	return true
}

// validate records every value the packages would reject later, each with
// a message naming the bad value.
func (c *Config) validate(res *loadResult) {
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if err := s.check(c); err != nil {
			if c.given[s.key] && !c.fromFlags[s.key] && c.path != "" {
				// Name the file and the key as written there.
				res.problem("config %s: %s", c.path, strings.TrimPrefix(err.Error(), "--"))
				continue
			}
			res.problem("%v", err)
		}
	}
	clean := len(res.problems) == 0
	if err := completeCheck(c); err != nil {
		res.incomplete = append(res.incomplete, err.Error())
	}
	for _, check := range crossChecks {
		if err := check(c); err != nil {
			res.problem("%v", err)
		}
	}
	if clean {
		if err := clusterCheck(c); err != nil {
			res.problem("%v", err)
		}
	}
}

// yamlError is the YAML decoder's error on one line, without the
// conversion step it names ("error converting YAML to JSON: yaml: ...").
func yamlError(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	for _, p := range []string{"error converting YAML to JSON: ", "yaml: ", "unmarshal errors: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// List is a comma-separated flag, or a YAML list (or comma-separated
// string) in the config file. Setting it replaces the value.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *List) Set(s string) error {
	*l = List{}
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
		*l = List{}
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
		*r.l, r.used = List{}, true
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

// MarshalJSON writes the duration string UnmarshalJSON reads.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Bytes is a size in bytes: a plain number, or one with a binary (Ki, Mi,
// Gi) or decimal (k, M, G) suffix and an optional trailing B ("32Mi",
// "64MiB", "1G"), in flags and in the file.
type Bytes int64

func (b Bytes) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGi", b>>30)
	case b != 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMi", b>>20)
	case b != 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKi", b>>10)
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements flag.Value.
func (b *Bytes) Set(s string) error {
	t := strings.TrimSuffix(strings.TrimSpace(s), "B")
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size such as 33554432, 32Mi or 64MiB", s)
	}
	*b = Bytes(n * mult)
	return nil
}

// MarshalJSON writes the size string Set reads.
func (b Bytes) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads a number or a size string.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		return b.Set(strconv.FormatInt(n, 10))
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size %s: want a number of bytes or a string such as \"32Mi\"", data)
	}
	return b.Set(s)
}

// StubsMap maps a zone to its servers and their options. As a flag, each
// use adds zone=server[,server...].
type StubsMap map[string]StubDomain

func (m *StubsMap) String() string {
	var parts []string
	for _, z := range m.sortedZones() {
		l := (*m)[z].Servers
		parts = append(parts, z+"="+l.String())
	}
	return strings.Join(parts, " ")
}

// Set implements flag.Value.
func (m *StubsMap) Set(s string) error {
	zone, servers, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(zone) == "" || strings.TrimSpace(servers) == "" {
		return fmt.Errorf("%q: want zone=server[,server...]", s)
	}
	if *m == nil {
		*m = StubsMap{}
	}
	var l List
	_ = l.Set(servers)
	(*m)[strings.TrimSpace(zone)] = StubDomain{Servers: l}
	return nil
}

// Values for the plain Go types of Config fields, as flag.Value.

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

// decodeStrict decodes one key's JSON value into p, refusing fields p does
// not have (in keys whose values are objects) and trailing data.
func decodeStrict(b []byte, p any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("want %s, got %s", jsonKind(te.Type.Kind().String()), b)
		}
		return err
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "uint", "uint64", "uint32", "uint16":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "map", "struct":
		return "a map"
	}
	return "a " + goKind
}

// normalizeHostPort rewrites "[v4]:port" as "v4:port", so that one form,
// "[$(HOST_IP)]:9253" in a manifest, works whether the node's address is
// IPv4 or IPv6; anything else is returned as it is (validate judges it).
func normalizeHostPort(s string) string {
	if !strings.HasPrefix(s, "[") {
		return s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return net.JoinHostPort(host, port)
	}
	return s
}
