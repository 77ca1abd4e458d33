// Package migrate turns a CoreDNS Corefile (and optionally the kube-dns
// ConfigMap) into an equivalent nodedns configuration file: `nodedns
// migrate`. It owns the Corefile parser (corefile.go), the reading of its
// server blocks (blocks.go), the mapping of each directive onto a typed
// configuration of pkg/config (directives.go, kubernetes.go, forward.go,
// cache.go, hosts.go), what depends on the whole file (finish.go), and the
// comments the file is written with (emit.go), through the writer `nodedns
// config print` uses.
//
// What cannot be carried (a plugin nodedns does not have, an option it
// cannot honour, a setting that would apply to only some zones where
// nodedns has one for all) is never silently lost: each is a Note naming
// the Corefile line and what the directive would have done. Where nodedns
// behaves differently by default, the output sets the Corefile's
// behaviour and says in a comment what nodedns would do otherwise.
//
// Limits: snippets and imports are not expanded (each is a note); one
// cluster index, one cache and one set of listen addresses serve every
// zone; the output uses this version's config keys (pkg/config), and an
// older agent warns about the keys it does not know and ignores them.
package migrate

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

// Note is one thing migrate says about a line of the Corefile (or, with
// File set, about a file of the kube-dns ConfigMap).
type Note struct {
	File string
	Line int
	Text string
}

// Options tune a migration.
type Options struct {
	// Env looks up environment variables ({$VAR} in the Corefile, and
	// KUBE_DNS_UPSTREAM_SERVICE_HOST for node-cache's
	// __PILLAR__CLUSTER__DNS__); nil: os.LookupEnv.
	Env func(string) (string, bool)
	// KubeDNS is the kube-dns ConfigMap (stubDomains,
	// upstreamNameservers) node-cache would have merged into the
	// Corefile; KubeDNSDir names where it was read, for messages.
	KubeDNS    *kubedns.Config
	KubeDNSDir string
	// NetworkMode is where the agent runs: "" or host as the Corefile's
	// binds say (a link and rules), pod behind a redirect (the manifest's
	// node-cache ran in the pod network: Manifest.NetworkMode), with
	// RedirectedIPs the redirect's frontends (node-cache's -localip) and
	// NetworkModeWhy, when set, what said so.
	NetworkMode    string
	RedirectedIPs  []string
	NetworkModeWhy string
	// ClusterDNS fills node-cache's __PILLAR__CLUSTER__DNS__ (the
	// kube-dns-upstream Service's ClusterIP), which node-cache fills at
	// start.
	ClusterDNS string
	// LocalIP is the agent's address when the Corefile binds none
	// (default 169.254.20.10, the node-local address).
	LocalIP string
	// Source names the Corefile in the output's header.
	Source string
	// ClusterDomain is the cluster's DNS domain (kubelet's
	// clusterDomain; `--cluster-domain`, or read from `--kubelet-config`)
	// and ClusterDomainFrom says where it came from, for the output's
	// comments. A Corefile without a kubernetes directive (NodeLocal
	// DNSCache's) does not name its cluster domain for sure, so it is
	// required then: Migrate fails with ErrNoClusterDomain rather than
	// assume cluster.local.
	ClusterDomain     string
	ClusterDomainFrom string
}

// ErrNoClusterDomain: the Corefile has no kubernetes directive and no
// cluster domain was given.
var ErrNoClusterDomain = errors.New("the Corefile has no kubernetes directive, so it does not say which zone is the cluster's: give --cluster-domain (kubelet's clusterDomain, as `kubectl get --raw /api/v1/nodes/NODE/proxy/configz` shows) or --kubelet-config FILE; migrate never assumes cluster.local")

// Result is a migration's outcome.
type Result struct {
	// Config is the configuration, the keys of Keys set (the others at
	// their defaults).
	Config config.Config
	// Keys are the settings the migration set, which YAML holds.
	Keys []string
	// YAML is the nodedns configuration file: Config's keys of Keys, each
	// with a comment on where it came from where that helps.
	YAML []byte
	// Dropped lists what could not be carried, by line.
	Dropped []Note
}

// DefaultLocalIP is the node-local address NodeLocal DNSCache and nodedns
// use.
const DefaultLocalIP = "169.254.20.10"

// Pillars of NodeLocal DNSCache's manifest that node-cache itself fills at
// start (the others the operator fills before applying it).
const (
	pillarClusterDNS = "__PILLAR__CLUSTER__DNS__"
	pillarUpstreams  = "__PILLAR__UPSTREAM__SERVERS__"
	resolvConf       = "/etc/resolv.conf"
)

// Migrate maps a Corefile onto a nodedns configuration. The error is a
// *SyntaxError when the Corefile does not parse.
func Migrate(src []byte, opts Options) (*Result, error) {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.LocalIP == "" {
		opts.LocalIP = DefaultLocalIP
	}
	f, err := Parse(src, opts.Env)
	if err != nil {
		return nil, err
	}
	m := newMigrator(opts)
	m.dropped = append(m.dropped, f.Skipped...)
	if err := m.run(f); err != nil {
		return nil, err
	}
	out, err := m.emit()
	if err != nil {
		return nil, err
	}
	sort.SliceStable(m.dropped, func(i, j int) bool { return m.dropped[i].Line < m.dropped[j].Line })
	res := &Result{Config: m.cfg, YAML: out, Dropped: m.dropped}
	for _, s := range config.Settings() {
		if m.origins[s.Key()] != nil {
			res.Keys = append(res.Keys, s.Key())
		}
	}
	return res, nil
}

// origin is where a setting of the output came from: the line that set it
// first, and the comments written above it.
type origin struct {
	line     int
	comments []string
}

// stub is one stub domain of the output, with where it came from.
type stub struct {
	config.StubDomain
	line     int
	file     string // set for the ConfigMap's stub domains
	comments []string
}

type migrator struct {
	opts Options
	// cfg is the configuration built; origins holds the settings set,
	// by key, and stubs the stub domains until emit puts them in cfg.
	cfg      config.Config
	origins  map[string]*origin
	stubs    map[string]*stub
	seen     map[string]bool // directives met, by name
	dropped  []Note
	header   []string
	port     int
	portLine int

	clusterZones []string // lower-case FQDNs, primary first
	mcZones      []string // the kubernetes directive's multicluster zones, as clusterZones
	kubeLine     int      // line of the kubernetes directive taken
	clusterFwd   bool     // a cluster zone block forwards (node-cache)
	rootForward  *Directive
	rootServers  fwdServers
	reverseFwds  []pendingFwd
	binds        []string
	otherBlocks  int // server blocks besides the root's
	bindLine     int
	adminNotes   []string
	// hostNames say how servers given by host names are resolved;
	// unreached are the forwards CoreDNS never gets to (chain.go).
	hostNames []string
	unreached []string
	// forwards holds each block's forward directives until the block's
	// directives have all been read (chain.go).
	forwards map[*block][]*Directive
	// servfailZones are excepted from every group once all blocks are
	// read (chain.go).
	servfailZones []servfailZone
	// clusterCache is cluster-ttl from the cache of a forwarded cluster
	// zone's block, set once that block's forward is carried.
	clusterCache *pendingTTL
}

// pendingTTL is a cluster-ttl waiting for finish.
type pendingTTL struct {
	ttl     time.Duration
	line    int
	comment string
}

func newMigrator(opts Options) *migrator {
	return &migrator{opts: opts, cfg: config.Default(), origins: map[string]*origin{}, stubs: map[string]*stub{}, seen: map[string]bool{}}
}

// drop records something that is not carried.
func (m *migrator) drop(line int, format string, args ...any) {
	m.dropped = append(m.dropped, Note{Line: line, Text: fmt.Sprintf(format, args...)})
}

// set sets the setting at field, a field of m.cfg, to v. The first setting
// wins: a different later value is dropped with a note naming both lines,
// since nodedns has one value for every zone.
func set[T any](m *migrator, field *T, v T, line int, comments ...string) {
	key := m.key(field)
	if o, ok := m.origins[key]; ok {
		if fmt.Sprint(*field) != fmt.Sprint(v) {
			m.drop(line, "%s %v: line %d already set %s to %v, and nodedns has one value for every zone; kept the first", key, v, o.line, key, *field)
		}
		return
	}
	*field = v
	m.origins[key] = &origin{line: line, comments: comments}
}

// key is the key of the setting at field (a field of m.cfg).
func (m *migrator) key(field any) string {
	s := config.SettingOf(&m.cfg, field)
	if s == nil {
		panic(fmt.Sprintf("migrate: a %T that is no setting of the configuration", field))
	}
	return s.Key()
}

// isSet reports whether the migration set the setting at field.
func (m *migrator) isSet(field any) bool { return m.origins[m.key(field)] != nil }

// unset puts the setting at field back to its default, as if never set.
func (m *migrator) unset(field any) {
	s := config.SettingOf(&m.cfg, field)
	def := config.Default()
	s.CopyFrom(&m.cfg, &def)
	delete(m.origins, s.Key())
}

// comment adds a comment above the setting at field, when it is set.
func (m *migrator) comment(field any, text string) {
	if o := m.origins[m.key(field)]; o != nil {
		o.comments = append(o.comments, text)
	}
}
