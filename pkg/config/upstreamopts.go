package config

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// The options of CoreDNS's forward for a group of servers: the default
// upstreams (the upstream-* keys, flags but for upstream-next) and each
// stub domain (the same names without "upstream-" in its map form), and
// the groups chained behind them (next). What each does:
// docs/upstreams.md; the forwarder's side: pkg/upstream
// (failover.go, health.go, doh.go, hostnames.go).

// Bounds of the forward options.
const (
	maxExcept        = 64
	minReadTimeout   = time.Millisecond
	maxReadTimeout   = 5 * time.Second // the budget of a whole query
	maxMaxFails      = 100
	minHealthCheck   = 10 * time.Millisecond
	maxHealthCheck   = time.Hour
	minExpire        = 100 * time.Millisecond
	maxExpire        = time.Hour
	maxNextDepth     = 8
	maxResolvers     = 15
	defaultMaxFails  = 2
	defaultHCDomain  = "."
	defaultDoHMethod = http.MethodPost
)

// NoData stands for next_on_nodata among the rcodes of a next's when list.
const NoData = "NODATA"

// ForwardOptions are a group's forward options as written in a stub
// domain's map form or a next; zero values are CoreDNS's defaults.
type ForwardOptions struct {
	// Failover: rcodes passed on to the next server; nil (absent):
	// nodedns's retry of SERVFAIL/REFUSED once; empty: none.
	Failover *List    `json:"failover,omitempty"`
	Failfast bool     `json:"failfast,omitempty"`
	Except   List     `json:"except,omitempty"`
	ReadTO   Duration `json:"read-timeout,omitempty"`
	// MaxFails: nil is 2.
	MaxFails    *int        `json:"max-fails,omitempty"`
	HealthCheck Duration    `json:"health-check,omitempty"`
	HCDomain    string      `json:"health-check-domain,omitempty"`
	HCNoRec     bool        `json:"health-check-no-rec,omitempty"`
	Expire      Duration    `json:"expire,omitempty"`
	DoHMethod   string      `json:"doh-method,omitempty"`
	Next        *StubDomain `json:"next,omitempty"`
}

// checkForward checks a group's options and its chain; what names the
// group in errors ("--upstream", `stub domain "a.example"`).
func checkForward(what string, sd *StubDomain, depth int) error {
	if len(sd.On) > 0 && depth == 0 {
		return fmt.Errorf("%s: when is for a next only", what)
	}
	if sd.Failover != nil {
		if _, err := upstream.ParseRcodes(*sd.Failover, false); err != nil {
			return fmt.Errorf("%s: failover: %w", what, err)
		}
	}
	if len(sd.Except) > maxExcept {
		return fmt.Errorf("%s: except: %d zones: want at most %d", what, len(sd.Except), maxExcept)
	}
	for _, z := range sd.Except {
		if _, err := canonDomain(z); err != nil {
			return fmt.Errorf("%s: except %q: %w", what, z, err)
		}
	}
	if depth > 0 && len(sd.Except) > 0 {
		return fmt.Errorf("%s: except is for the first servers of a zone, not a next", what)
	}
	if d := time.Duration(sd.ReadTO); d != 0 && (d < minReadTimeout || d > maxReadTimeout) {
		return fmt.Errorf("%s: read-timeout %s: want %s to %s", what, sd.ReadTO, Duration(minReadTimeout), Duration(maxReadTimeout))
	}
	if sd.MaxFails != nil && (*sd.MaxFails < 0 || *sd.MaxFails > maxMaxFails) {
		return fmt.Errorf("%s: max-fails %d: want 0 to %d", what, *sd.MaxFails, maxMaxFails)
	}
	if d := time.Duration(sd.HealthCheck); d != 0 && (d < minHealthCheck || d > maxHealthCheck) {
		return fmt.Errorf("%s: health-check %s: want %s to %s", what, sd.HealthCheck, Duration(minHealthCheck), Duration(maxHealthCheck))
	}
	if sd.HCDomain != "" {
		if _, err := canonHCDomain(sd.HCDomain); err != nil {
			return fmt.Errorf("%s: health-check-domain %q: %w", what, sd.HCDomain, err)
		}
	}
	if d := time.Duration(sd.Expire); d != 0 && (d < minExpire || d > maxExpire) {
		return fmt.Errorf("%s: expire %s: want %s to %s", what, sd.Expire, Duration(minExpire), Duration(maxExpire))
	}
	if err := checkDoHMethod(sd.DoHMethod); err != nil {
		return fmt.Errorf("%s: doh-method: %w", what, err)
	}
	if sd.Next == nil {
		return nil
	}
	n := sd.Next
	nwhat := what + " next"
	if depth+1 >= maxNextDepth {
		return fmt.Errorf("%s: more than %d servers chained by next", nwhat, maxNextDepth)
	}
	if len(n.On) == 0 {
		return fmt.Errorf("%s: when: want the rcodes (or %s) whose replies go to these servers", nwhat, NoData)
	}
	if _, _, err := parseOn(n.On); err != nil {
		return fmt.Errorf("%s: when: %w", nwhat, err)
	}
	if len(n.Servers) > maxStubServers {
		return fmt.Errorf("%s: %d servers: want at most %d", nwhat, len(n.Servers), maxStubServers)
	}
	if n.ForceTCP && n.PreferUDP {
		return fmt.Errorf("%s: force-tcp and prefer-udp: pick one", nwhat)
	}
	if err := checkPolicy(nwhat, n.Policy); err != nil {
		return err
	}
	return checkForward(nwhat, n, depth+1)
}

func checkPolicy(what, p string) error {
	switch upstream.Policy(p) {
	case "", upstream.Random, upstream.RoundRobin, upstream.Sequential:
		return nil
	}
	return fmt.Errorf("%s: policy %q: want random, round_robin or sequential", what, p)
}

func checkDoHMethod(m string) error {
	switch m {
	case "", http.MethodPost, http.MethodGet:
		return nil
	}
	return fmt.Errorf("%q: want POST or GET", m)
}

// canonHCDomain accepts the health check's domain: "." or a domain name.
func canonHCDomain(s string) (string, error) {
	if strings.TrimSpace(s) == "." {
		return ".", nil
	}
	return canonDomain(s)
}

// parseOn reads a next's when list: rcode names and NODATA.
func parseOn(on List) (rcodes []int, nodata bool, err error) {
	var names []string
	for _, o := range on {
		if strings.EqualFold(strings.TrimSpace(o), NoData) {
			nodata = true
			continue
		}
		names = append(names, o)
	}
	rcodes, err = upstream.ParseRcodes(names, true)
	return rcodes, nodata, err
}

// checkUpstreamOptions checks upstream-next (the other upstream-* keys
// have checks of their own).
func (c *Config) checkUpstreamOptions() error {
	if err := checkForward("upstream-next", &StubDomain{ForwardOptions: ForwardOptions{Next: c.UpstreamNext}}, 0); err != nil {
		return err
	}
	for n := c.UpstreamNext; n != nil; n = n.Next {
		if err := checkServers("upstream-next", n.Servers, func(what, s string) error {
			if _, err := upstream.ParseServer(s); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// checkRcodes checks a list of rcode names a reply is passed on for.
func checkRcodes(key string, l List) error {
	if _, err := upstream.ParseRcodes(l, false); err != nil {
		return fmt.Errorf("--%s: %w", key, err)
	}
	return checkList(key, "rcodes", l, 24, func(s string) (string, error) { return strings.ToUpper(strings.TrimSpace(s)), nil })
}

// defaultGroup is the default upstreams' options in the stub domains'
// form.
func (c *Config) defaultGroup() StubDomain {
	mf := c.UpstreamMaxFails
	var fo *List
	if c.UpstreamFailover != nil {
		fo = &c.UpstreamFailover
	}
	return StubDomain{Servers: c.Upstream, ForceTCP: c.ForceTCP, PreferUDP: c.PreferUDP, Policy: c.Policy,
		ForwardOptions: ForwardOptions{Failover: fo, Failfast: c.UpstreamFailfast, Except: c.UpstreamExcept,
			ReadTO: c.UpstreamReadTimeout, MaxFails: &mf, HealthCheck: c.UpstreamHealthCheck, HCDomain: c.UpstreamHealthCheckDomain,
			HCNoRec: c.UpstreamHealthCheckNoRec, Expire: c.UpstreamExpire, DoHMethod: c.UpstreamDoHMethod, Next: c.UpstreamNext}}
}

// DefaultGroupOptions are the forwarder's options of the default
// upstreams.
func (c *Config) DefaultGroupOptions() upstream.GroupOptions {
	sd := c.defaultGroup()
	return sd.GroupOptions("")
}

// GroupOptions are the forwarder's options of a stub domain (or next);
// policy names the group's own policy when it has one ("" keeps the
// forwarder's).
func (sd StubDomain) GroupOptions(policy string) upstream.GroupOptions {
	if policy == "" {
		policy = sd.Policy
	}
	o := upstream.GroupOptions{ForceTCP: sd.ForceTCP, PreferUDP: sd.PreferUDP, Policy: upstream.Policy(policy),
		Failfast: sd.Failfast, ReadTimeout: time.Duration(sd.ReadTO), Expire: time.Duration(sd.Expire), DoHMethod: sd.DoHMethod}
	if sd.Failover != nil {
		o.Failover, _ = upstream.ParseRcodes(*sd.Failover, false) // checked
		if o.Failover == nil {
			o.Failover = []int{}
		}
	}
	for _, z := range sd.Except {
		o.Except = append(o.Except, dnsname.Canonical(z))
	}
	h := upstream.Health{MaxFails: defaultMaxFails, Interval: time.Duration(sd.HealthCheck), Domain: sd.HCDomain, NoRec: sd.HCNoRec}
	if sd.MaxFails != nil {
		h.MaxFails = *sd.MaxFails
	}
	if h.Domain == "" {
		h.Domain = defaultHCDomain
	}
	o.Health = &h
	if n := sd.Next; n != nil {
		on, nodata, _ := parseOn(n.On) // checked
		o.Next = &upstream.Next{On: on, OnNoData: nodata, Servers: n.Servers, Options: n.GroupOptions("")}
	}
	return o
}

// NamedServers lists the servers of every group (stubs, chains, the
// default upstreams) given by a name outside zones: they need resolvers.
func (c *Config) NamedServers(zones []string) []string { return c.namedServers(zones, false) }

// ClusterNamedServers lists the servers of every group given by a name
// inside zones (the cluster zones): they are resolved from the cluster
// index, and need it.
func (c *Config) ClusterNamedServers(zones []string) []string { return c.namedServers(zones, true) }

func (c *Config) namedServers(zones []string, inZones bool) []string {
	var out []string
	add := func(servers []string) {
		for _, s := range servers {
			if sp, err := upstream.ParseServer(s); err == nil && sp.ByName() && dnsname.InZones(sp.Name, zones) == inZones && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	walk := func(sd *StubDomain) {
		for ; sd != nil; sd = sd.Next {
			add(sd.Servers)
		}
	}
	add(c.Upstream)
	walk(c.UpstreamNext)
	for _, z := range c.Stubs.SortedZones() {
		sd := c.Stubs[z]
		walk(&sd)
	}
	return out
}
