package pipeline

import (
	"fmt"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// View is a CoreDNS server block with a view (`view NAME { expr ... }`)
// as the pipeline carries it: the queries for names of its Zones whose
// Cond holds are resolved, past the stages before the cache (templates,
// static records, the cluster zone), by its own Resolver (the block's
// forward behind a cache of its own) instead of Config.Resolver.
type View struct {
	Name string
	// Zones are lower-case FQDNs; "." is every name.
	Zones    []string
	Cond     stage.Condition
	Resolver stage.Resolver
}

// views are the configured views and the zones no view takes.
type views struct {
	list []View
	// plain are the zones of blocks without a view (stub domains, the
	// routed zones): a name in one more specific than a view's zone is
	// not the view's, as CoreDNS picks the most specific block first.
	plain []string
}

func newViews(list []View, plain []string) (*views, error) {
	if len(list) == 0 {
		return nil, nil
	}
	v := &views{list: list}
	var err error
	if v.plain, err = normalizeZones(plain); err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	for i, vw := range list {
		if vw.Cond == nil || vw.Resolver == nil || len(vw.Zones) == 0 {
			return nil, fmt.Errorf("view %q: a condition, zones and a resolver are needed", vw.Name)
		}
		if v.list[i].Zones, err = normalizeZones(vw.Zones); err != nil {
			return nil, fmt.Errorf("view %q: %w", vw.Name, err)
		}
	}
	return v, nil
}

// viewResolver is the resolver of the view c is for, decided once per
// query by its question as asked and its client, as CoreDNS picks a
// server block before any plugin runs: the most specific zone holding
// the name, and of its blocks the first whose view holds. nil: no view's
// (Config.Resolver, or Route's, answer).
func (p *Pipeline) viewResolver(c *call) stage.Resolver {
	if p.views == nil {
		return nil
	}
	if !c.viewDone {
		c.viewDone = true
		c.view = p.views.pick(c)
	}
	return c.view
}

func (v *views) pick(c *call) stage.Resolver {
	name := c.q.Name
	var best stage.Resolver
	bestLen := -1
	for i := range v.list {
		vw := &v.list[i]
		for _, z := range vw.Zones {
			// Longer zones first; on a tie, the first view in order.
			if len(z) > bestLen && dnsname.InZone(name, z) && vw.Cond.Holds(c.req.Client, name, c.q.Type, c.q.Class, c.req.Proto == "tcp") {
				best, bestLen = vw.Resolver, len(z)
			}
		}
	}
	if best == nil {
		return nil
	}
	for _, z := range v.plain {
		if len(z) > bestLen && dnsname.InZone(name, z) {
			return nil
		}
	}
	return best
}
