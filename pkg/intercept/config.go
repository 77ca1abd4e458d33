package intercept

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// Defaults applied by New for zero Config fields.
const (
	DefaultInterface    = "nodelocaldns"
	DefaultSyncInterval = 60 * time.Second
)

// Backend names, as reported in Status.Backend and accepted in
// Config.Backend.
const (
	BackendAuto   = "auto"
	BackendNFT    = "nft"
	BackendLegacy = "legacy"
)

// Config says which addresses to intercept and what the agent may touch.
//
// Resolution order: zero fields take the defaults above; Backend "" or
// "auto" detects the iptables backend from the rules already on the node;
// a nil Logger means slog.Default(). Nothing is changed on the host unless
// SetupInterface or SetupIptables is set.
type Config struct {
	// LocalIPs are the addresses pods send DNS to. IPv4 addresses get
	// iptables rules and a /32 on the link; IPv6 ones ip6tables rules and
	// a /128. IPv4-mapped IPv6 addresses are treated as IPv4.
	LocalIPs []netip.Addr
	// Interface is the name of the link holding LocalIPs
	// (default "nodelocaldns").
	Interface string
	// SetupInterface creates and maintains the link.
	SetupInterface bool
	// SetupIptables creates and maintains the rules.
	SetupIptables bool
	// SyncInterval is how often everything is checked and repaired
	// (default 60s). Removals of the link or an address are also repaired
	// as soon as netlink reports them.
	SyncInterval time.Duration
	// AdminPort, when not 0, adds a raw OUTPUT NOTRACK pair (tcp, both
	// directions) for this port on every local IP: set it when the admin
	// endpoint is served on a local IP so kubelet's probes skip conntrack.
	AdminPort uint16
	// Backend forces the iptables backend: "nft" or "legacy". "" or "auto"
	// detects it (see detectBackend).
	Backend string
	// Fallback starts with the DNS fallback on (fallback.go): queries
	// from pods are untracked only while a local socket is bound to their
	// local IP, and go to the targets SetFallback sets while none is.
	// Until SetFallback is called, the nat rules and chains an earlier
	// agent left are kept as they are. SetFallback may turn it on or off
	// later. Every local IP must then have a listener bound to port 53 of
	// the IP itself: the socket match ignores wildcard listeners.
	Fallback bool
	// Logger receives the package's logs; a component attribute is added.
	Logger *slog.Logger
}

// normalized returns a copy of c with defaults applied and LocalIPs
// unmapped and de-duplicated, or an error saying what is wrong.
func (c Config) normalized() (Config, error) {
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Backend == "" {
		c.Backend = BackendAuto
	}
	var errs []error
	if err := ValidInterfaceName(c.Interface); err != nil {
		errs = append(errs, err)
	}
	if c.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("sync interval %v is negative", c.SyncInterval))
	}
	switch c.Backend {
	case BackendAuto, BackendNFT, BackendLegacy:
	default:
		errs = append(errs, fmt.Errorf("iptables backend %q: want auto, nft or legacy", c.Backend))
	}
	if (c.SetupInterface || c.SetupIptables) && len(c.LocalIPs) == 0 {
		errs = append(errs, errors.New("no local IPs to intercept"))
	}
	seen := make(map[netip.Addr]bool, len(c.LocalIPs))
	ips := make([]netip.Addr, 0, len(c.LocalIPs))
	for _, ip := range c.LocalIPs {
		ip = ip.Unmap().WithZone("")
		switch {
		case !ip.IsValid():
			errs = append(errs, errors.New("invalid local IP"))
			continue
		case ip.IsUnspecified(), ip.IsMulticast(), ip.IsLoopback():
			errs = append(errs, fmt.Errorf("local IP %s: unspecified, multicast and loopback addresses cannot be intercepted", ip))
			continue
		case seen[ip]:
			continue
		}
		seen[ip] = true
		ips = append(ips, ip)
	}
	c.LocalIPs = ips
	if len(errs) > 0 {
		return c, fmt.Errorf("intercept config: %w", errors.Join(errs...))
	}
	return c, nil
}

// ValidInterfaceName applies the kernel's rules for link names
// (dev_valid_name), so a bad name is refused before anything is touched.
func ValidInterfaceName(name string) error {
	if len(name) == 0 || len(name) > 15 || name == "." || name == ".." ||
		strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("interface name %q: want 1-15 characters, no '/', ':' or whitespace", name)
	}
	return nil
}

// Status is a snapshot of the interception state, for /stats and metrics.
// pkg/observe/metrics reports it as it is: the JSON names are the /stats
// document's intercept section (read by `nodedns stats --json`), so fields
// are added, never renamed.
type Status struct {
	// Enabled is true in every Status an Interceptor reports: the zero
	// Status stands for an agent that manages neither link nor rules.
	Enabled bool `json:"enabled"`
	// Link is the interface name; LinkType its kind as found on the host
	// ("dummy", "bridge"), empty while the link is absent or not managed.
	Link     string `json:"link,omitempty"`
	LinkType string `json:"link_type,omitempty"`
	// LinkOwned: the link was created by nodedns (it carries its mark) and
	// is removed at teardown; false for a link found in place, which is
	// used but left. Not in /stats.
	LinkOwned bool `json:"-"`
	// IPs are the local IPs being intercepted.
	IPs []string `json:"ips,omitempty"`
	// Backend is the iptables backend in use ("nft", "legacy"), empty when
	// rules are not managed.
	Backend string `json:"backend,omitempty"`
	// RulesPresent of RulesWanted rules were in place after the last pass.
	RulesPresent int `json:"rules_present"`
	RulesWanted  int `json:"rules_wanted"`
	// Repairs counts the things put back by reconcile passes (a link
	// created, an address added, a link set up, a rule inserted, a
	// duplicate removed) since New; LastRepair is when the last one was.
	Repairs    uint64    `json:"repairs"`
	LastRepair time.Time `json:"last_repair,omitzero"`
	// Passes counts the reconcile passes done since New (periodic, and on
	// a netlink event): a pass that repaired nothing leaves no other trace.
	Passes uint64 `json:"passes"`
	// LastError is the error of the last pass, empty when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Errors counts the failures met while putting the link and rules in
	// place (at start and in every reconcile pass), by kind: ErrIptables,
	// ErrIptablesLock, ErrInterfaceAdd, ErrInterfaceCheck (the error types
	// of node-cache's coredns_nodecache_setup_errors_total). nil until the
	// first failure.
	Errors map[string]uint64 `json:"errors,omitempty"`

	// Fallback is the DNS fallback's state: FallbackOff,
	// FallbackUnavailable (FallbackError says why), FallbackWaiting or
	// FallbackOn.
	Fallback      string `json:"fallback,omitempty"`
	FallbackError string `json:"fallback_error,omitempty"`
	// FallbackTargets4 and FallbackTargets6 are the targets in the
	// chains ("ip:port"), while FallbackOn; FallbackClusterIPs the local
	// IPs left to kube-proxy's DNAT.
	FallbackTargets4   []string `json:"fallback_targets_ipv4,omitempty"`
	FallbackTargets6   []string `json:"fallback_targets_ipv6,omitempty"`
	FallbackClusterIPs []string `json:"fallback_cluster_ips,omitempty"`
	// FallbackUpdates counts the changes SetFallback made.
	FallbackUpdates uint64 `json:"fallback_updates"`
	// FallbackFlows4 and FallbackFlows6 count the flows the fallback
	// chains redirected (their first packets, as the kernel counted
	// them), read and zeroed at every pass: a pass counts what happened
	// since the last one, so the flows of a time when no agent ran are
	// counted by the next agent.
	FallbackFlows4 uint64 `json:"fallback_flows_ipv4"`
	FallbackFlows6 uint64 `json:"fallback_flows_ipv6"`
}

// Kinds of Status.Errors.
const (
	// ErrIptables: listing, checking, inserting or deduplicating a rule.
	ErrIptables = "iptables"
	// ErrIptablesLock: iptables gave up waiting for the xtables lock.
	ErrIptablesLock = "iptables_lock"
	// ErrInterfaceAdd: creating the link, adding an address, setting it up.
	ErrInterfaceAdd = "interface_add"
	// ErrInterfaceCheck: looking the link or its addresses up.
	ErrInterfaceCheck = "interface_check"
)
