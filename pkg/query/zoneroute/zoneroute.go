// Package zoneroute sends the queries for some zones to a resolver of their
// own and every other query to the default one. It is how the cluster's
// zones and the reverse zones reach the central cluster DNS, through a
// cache of their own, when the cluster zone is forwarded (--cluster-zone
// forward), as NodeLocal DNSCache sends them to kube-dns-upstream.
//
// A Router is what pkg/query/server asks of its resolver and hit cache: choosing
// the backend is a few suffix comparisons and allocates nothing, so cache
// hits on either side stay on the zero-allocation path.
package zoneroute

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"
)

// Backend resolves and answers hits: what pkg/query/cache.Cache offers.
type Backend interface {
	Resolve(ctx context.Context, q *dns.Msg) (reply *dns.Msg, fromCache, stale bool, err error)
	AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool)
	Peek(name string, qtype, qclass uint16, do, cd bool) (m *dns.Msg, ok bool)
}

// Router sends names in its zones to one backend, the rest to the default
// one; names in an excepted zone go to the default one even inside a
// routed zone (a stub domain more specific than the routed zone, as a more
// specific server block wins in a Corefile). It is safe for concurrent use
// when its backends are.
type Router struct {
	zones   []string
	zoned   Backend
	deflt   Backend
	allRoot bool
	except  atomic.Pointer[[]string]
}

// New returns a Router for zones (domain names, any case, with or without
// the trailing dot).
func New(zones []string, zoned, deflt Backend) (*Router, error) {
	r := &Router{zoned: zoned, deflt: deflt}
	var err error
	if r.zones, err = normalize(zones); err != nil {
		return nil, err
	}
	r.allRoot = slices.Contains(r.zones, ".")
	r.except.Store(&[]string{})
	return r, nil
}

func normalize(zones []string) ([]string, error) {
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

// SetExcept replaces the excepted zones (the stub domains, say; only those
// inside a routed zone change anything). Queries under way keep the old
// list.
func (r *Router) SetExcept(zones []string) error {
	n, err := normalize(zones)
	if err != nil {
		return err
	}
	n = slices.DeleteFunc(n, func(z string) bool { return !r.routes(z) })
	r.except.Store(&n)
	return nil
}

// For returns the backend for name, a lower-case FQDN.
func (r *Router) For(name string) Backend {
	if !r.routes(name) {
		return r.deflt
	}
	for _, z := range *r.except.Load() {
		if inZone(z, name) {
			return r.deflt
		}
	}
	return r.zoned
}

func (r *Router) routes(name string) bool {
	if r.allRoot {
		return true
	}
	for _, z := range r.zones {
		if inZone(z, name) {
			return true
		}
	}
	return false
}

func inZone(zone, name string) bool {
	if zone == "." || name == zone {
		return true
	}
	i := len(name) - len(zone)
	return i > 0 && name[i-1] == '.' && name[i:] == zone
}

// Resolve implements pkg/server's Resolver.
func (r *Router) Resolve(ctx context.Context, q *dns.Msg) (*dns.Msg, bool, bool, error) {
	if len(q.Question) != 1 {
		return r.deflt.Resolve(ctx, q) // the backend says what is wrong
	}
	return r.For(strings.ToLower(q.Question[0].Name)).Resolve(ctx, q)
}

// AppendHit implements pkg/server's HitCache.
func (r *Router) AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) ([]byte, int, bool) {
	return r.For(name).AppendHit(dst, name, qtype, qclass, do, cd)
}

// refHits is what pkg/query/cache.Cache offers beyond Backend for the
// search-path shortcuts of pkg/query/server: a hit that returns the stored reply.
type refHits interface {
	AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ref any, ok bool)
}

// AppendHitRef is the backend's AppendHitRef; a backend without it gives
// AppendHit's answer and a nil ref.
func (r *Router) AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) ([]byte, int, any, bool) {
	b := r.For(name)
	if h, ok := b.(refHits); ok {
		return h.AppendHitRef(dst, name, qtype, qclass, do, cd)
	}
	out, rcode, ok := b.AppendHit(dst, name, qtype, qclass, do, cd)
	return out, rcode, nil, ok
}

// Peek implements pkg/server's HitCache.
func (r *Router) Peek(name string, qtype, qclass uint16, do, cd bool) (*dns.Msg, bool) {
	return r.For(name).Peek(name, qtype, qclass, do, cd)
}
