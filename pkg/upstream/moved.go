package upstream

import (
	"reflect"
)

// Moved returns a predicate telling, for a name (lower-case FQDN), whether
// cur would ask other servers than old did, or ask them otherwise: the
// name falls to another group (a stub zone added, removed or excepting
// it), or its group's servers or options differ, or a setting every group
// shares does (the policy, force-TCP, the CA bundle, the resolvers of
// servers given by name, the timeouts and health settings). An answer old
// got for such a name is not one cur stands behind: a cache drops it when
// cur replaces old. The bounds on work in flight change no answer and are
// not compared. A nil old moves every name.
//
// Groups are compared as configured: a server given by name stays the
// same server while its addresses follow the name.
//
// The predicate is not safe for concurrent use: it remembers each pair of
// groups it compared.
func Moved(old, cur *Forwarder) func(name string) bool {
	if old == nil || !reflect.DeepEqual(old.shared(), cur.shared()) {
		return func(string) bool { return true }
	}
	same := map[[2]*group]bool{}
	return func(name string) bool {
		a, b := old.groupFor(name), cur.groupFor(name)
		if a == nil || b == nil {
			return a != b
		}
		if a.zone != b.zone {
			return true
		}
		k := [2]*group{a, b}
		s, ok := same[k]
		if !ok {
			s = reflect.DeepEqual(a.addrs, b.addrs) && reflect.DeepEqual(a.opts, b.opts)
			same[k] = s
		}
		return !s
	}
}

// shared is the part of f's Config every group's answers depend on: all
// of it but the groups themselves, the bounds on work in flight and what
// only reports (the logger, the panic counter). The Resolver is the
// cluster index, the same one for every forwarder of an agent.
func (f *Forwarder) shared() Config {
	c := f.cfg
	c.Servers, c.Stubs, c.StubOptions, c.Options = nil, nil, nil, GroupOptions{}
	c.MaxInflight, c.MaxClientInflight, c.MaxNamespaceInflight = 0, 0, 0
	c.Panics, c.Logger, c.Resolver = nil, nil, nil
	return c
}
