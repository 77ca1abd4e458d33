package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Route sends the names of some zones to a resolver of their own instead
// of Config.Resolver. It is how the cluster's zones and the reverse zones
// reach the central cluster DNS, through a cache of their own, when the
// cluster zone is forwarded (--cluster-zone forward), as NodeLocal
// DNSCache sends them to kube-dns-upstream.
type Route struct {
	// Zones are domain names, any case, with or without the trailing dot;
	// "." routes every name.
	Zones []string
	// Except are zones whose names go to Config.Resolver even inside a
	// routed zone: the stub domains, say, a stub domain more specific than
	// the routed zone keeping its own servers, as a more specific server
	// block wins in a Corefile. Only those inside a routed zone change
	// anything. SetRouteExcept replaces them.
	Except []string
	// Resolver answers the names in Zones but not in Except.
	Resolver stage.Resolver
}

// router picks the resolver of a name: a few suffix comparisons, nothing
// allocated, so cache hits on either side stay on the zero-allocation
// path.
type router struct {
	zones   []string
	zoned   stage.Resolver
	allRoot bool
	except  atomic.Pointer[[]string]
}

func newRouter(r Route) (*router, error) {
	zones, err := normalizeZones(r.Zones)
	if err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	rt := &router{zones: zones, zoned: r.Resolver, allRoot: slices.Contains(zones, ".")}
	if err := rt.setExcept(r.Except); err != nil {
		return nil, fmt.Errorf("route: except: %w", err)
	}
	return rt, nil
}

func normalizeZones(zones []string) ([]string, error) {
	out := make([]string, 0, len(zones))
	for _, z := range zones {
		n := strings.ToLower(dns.Fqdn(strings.TrimSpace(z)))
		if _, ok := dns.IsDomainName(n); !ok {
			return nil, fmt.Errorf("zone %q is not a domain name", z)
		}
		out = append(out, n)
	}
	return out, nil
}

// SetRouteExcept replaces Route.Except while the pipeline runs (a
// reload's stub domains); queries under way keep the old list. Without a
// Route it does nothing.
func (p *Pipeline) SetRouteExcept(zones []string) error {
	if p.route == nil {
		return nil
	}
	if err := p.route.setExcept(zones); err != nil {
		return err
	}
	// A cached winner may now be another resolver's name.
	p.Invalidate()
	return nil
}

func (r *router) setExcept(zones []string) error {
	n, err := normalizeZones(zones)
	if err != nil {
		return err
	}
	n = slices.DeleteFunc(n, func(z string) bool { return !r.routes(z) })
	r.except.Store(&n)
	return nil
}

// resolver returns the resolver of name, a lower-case FQDN, looked up for
// c: its view's, else Route's for a routed name, else the default.
func (p *Pipeline) resolver(c *call, name string) stage.Resolver {
	if r := p.viewResolver(c); r != nil {
		return r
	}
	if p.route == nil || !p.route.routes(name) {
		return p.cfg.Resolver
	}
	for _, z := range *p.route.except.Load() {
		if dnsname.InZone(name, z) {
			return p.cfg.Resolver
		}
	}
	return p.route.zoned
}

func (r *router) routes(name string) bool {
	if r.allRoot {
		return true
	}
	for _, z := range r.zones {
		if dnsname.InZone(name, z) {
			return true
		}
	}
	return false
}
