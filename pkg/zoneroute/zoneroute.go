// Package zoneroute sends the queries for some zones to a resolver of their
// own and every other query to the default one. It is how the cluster's
// zones and the reverse zones reach the central cluster DNS, through a
// cache of their own, when the cluster zone is forwarded (--cluster-zone
// forward), as NodeLocal DNSCache sends them to kube-dns-upstream.
//
// A Router is what pkg/server asks of its resolver and hit cache: choosing
// the backend is a few suffix comparisons and allocates nothing, so cache
// hits on either side stay on the zero-allocation path.
package zoneroute

import (
	"context"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// Backend resolves and answers hits: what pkg/cache.Cache offers.
type Backend interface {
	Resolve(ctx context.Context, q *dns.Msg) (reply *dns.Msg, fromCache, stale bool, err error)
	AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool)
	Peek(name string, qtype, qclass uint16, do, cd bool) (m *dns.Msg, ok bool)
}

// Router sends names in Zones to Zoned, the rest to Default. It is
// immutable and safe for concurrent use when its backends are.
type Router struct {
	zones   []string
	zoned   Backend
	deflt   Backend
	allRoot bool
}

// New returns a Router for zones (domain names, any case, with or without
// the trailing dot).
func New(zones []string, zoned, deflt Backend) (*Router, error) {
	r := &Router{zoned: zoned, deflt: deflt}
	for _, z := range zones {
		n := strings.ToLower(dns.Fqdn(strings.TrimSpace(z)))
		if _, ok := dns.IsDomainName(n); !ok {
			return nil, fmt.Errorf("zone %q is not a domain name", z)
		}
		if n == "." {
			r.allRoot = true
		}
		r.zones = append(r.zones, n)
	}
	return r, nil
}

// For returns the backend for name, a lower-case FQDN.
func (r *Router) For(name string) Backend {
	if r.allRoot {
		return r.zoned
	}
	for _, z := range r.zones {
		if name == z {
			return r.zoned
		}
		if i := len(name) - len(z); i > 0 && name[i-1] == '.' && name[i:] == z {
			return r.zoned
		}
	}
	return r.deflt
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

// Peek implements pkg/server's HitCache.
func (r *Router) Peek(name string, qtype, qclass uint16, do, cd bool) (*dns.Msg, bool) {
	return r.For(name).Peek(name, qtype, qclass, do, cd)
}
