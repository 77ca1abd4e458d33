package config

import (
	"fmt"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/query/view"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Bounds of the views key: each view holds a forwarder and a cache of
// its own, and its condition is tried on queries on the reader.
const (
	maxViews     = 16
	maxViewExprs = 8
	maxViewZones = 64
)

// ViewConfig is one entry of the `views:` key: a CoreDNS server block
// with `view NAME { expr EXPRESSION }` and a `forward` (pkg/query/view,
// pkg/query/pipeline's View). The queries for names of its zones for
// which every expression holds are forwarded to its servers, through a
// cache of its own, instead of the upstreams (or stub domains) of the
// rest of the configuration.
type ViewConfig struct {
	// Name names the view in logs and errors.
	Name string `json:"name"`
	// Expr are expressions in the simple forms of CoreDNS's view
	// (pkg/query/view); all must hold.
	Expr []string `json:"expr"`
	// Zones the view takes names of; default every name.
	Zones List `json:"zones,omitempty"`
	// Forward is where its queries go: a stub domain's form (servers and
	// the forward options).
	Forward StubDomain `json:"forward"`
}

// allOf is a condition made of several: all must hold.
type allOf []*view.Expr

func (a allOf) Holds(client netip.Addr, name string, qtype, qclass uint16, tcp bool) bool {
	for _, e := range a {
		if !e.Holds(client, name, qtype, qclass, tcp) {
			return false
		}
	}
	return true
}

// ViewCondition reads the expressions of view v into one condition.
func (v ViewConfig) ViewCondition() (stage.Condition, error) {
	if len(v.Expr) == 1 {
		return view.Parse(v.Expr[0])
	}
	var out allOf
	for _, s := range v.Expr {
		e, err := view.Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// ViewZones are the view's zones as lower-case FQDNs ("." for every
// name).
func (v ViewConfig) ViewZones() []string {
	if len(v.Zones) == 0 {
		return []string{"."}
	}
	out := make([]string, 0, len(v.Zones))
	for _, z := range v.Zones {
		out = append(out, dnsname.Canonical(z))
	}
	return out
}

func checkViews(c *Config) error {
	if len(c.Views) > maxViews {
		return fmt.Errorf("views: %d views: want at most %d (each has a forwarder and a cache of its own)", len(c.Views), maxViews)
	}
	names := map[string]bool{}
	for i, v := range c.Views {
		if v.Name == "" {
			return fmt.Errorf("view %d: no name", i+1)
		}
		if names[v.Name] {
			return fmt.Errorf("view %d: name %q given twice", i+1, v.Name)
		}
		names[v.Name] = true
		if len(v.Expr) == 0 || len(v.Expr) > maxViewExprs {
			return fmt.Errorf("view %q: %d expressions: want 1 to %d", v.Name, len(v.Expr), maxViewExprs)
		}
		if _, err := v.ViewCondition(); err != nil {
			return fmt.Errorf("view %q: expr: %w", v.Name, err)
		}
		if len(v.Zones) > maxViewZones {
			return fmt.Errorf("view %q: %d zones: want at most %d", v.Name, len(v.Zones), maxViewZones)
		}
		for _, z := range v.ViewZones() {
			if _, ok := dns.IsDomainName(z); !ok {
				return fmt.Errorf("view %q: zone %q is not a domain name", v.Name, z)
			}
		}
		if len(v.Forward.Servers) == 0 {
			return fmt.Errorf("view %q: forward: no servers", v.Name)
		}
		what := fmt.Sprintf("view %q: forward", v.Name)
		if len(v.Forward.Servers) > maxStubServers {
			return fmt.Errorf("%s: %d servers: want at most %d", what, len(v.Forward.Servers), maxStubServers)
		}
		if err := checkServers(what, v.Forward.Servers, func(what, s string) error {
			if _, err := upstream.ParseServer(s); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}); err != nil {
			return err
		}
		if v.Forward.Next != nil || len(v.Forward.On) > 0 {
			return fmt.Errorf("%s: next and when are not carried in a view", what)
		}
		if v.Forward.ForceTCP && v.Forward.PreferUDP {
			return fmt.Errorf("%s: force-tcp and prefer-udp: pick one", what)
		}
		if err := checkPolicy(what, v.Forward.Policy); err != nil {
			return err
		}
		if err := checkForward(what, &v.Forward, 0); err != nil {
			return err
		}
	}
	return nil
}
