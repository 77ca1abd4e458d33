package upstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// The exchange loop is CoreDNS's forward ServeDNS (1.15), step for step,
// inside nodedns's budget:
//
//   - servers are taken in policy order, wrapping around; a down server
//     is skipped while another is not; when every one is down, the group
//     fails fast (ErrAllDown, nothing sent) or tries one at random, once;
//   - a failed exchange (timeout, network error) counts as an attempt (at
//     most two per server) and starts the server's health probes;
//   - a reply whose rcode the group fails over on goes on to the next
//     server, at most as many replies as there are servers, and the last
//     one is returned; replies do not count as attempts;
//   - the reply is then passed on to the chained group (next) when its
//     rcode, or NODATA, says so; that group runs the same loop with its
//     own servers and options.
//
// Without a failover list (GroupOptions.Failover nil) a SERVFAIL or
// REFUSED is asked once more of another live server, then returned:
// nodedns's default, kept from before the option existed.

// ParseRcodes turns rcode names (NXDOMAIN, servfail, ...) into rcodes,
// as CoreDNS's failover and next read them. NOERROR is refused when
// noError is false.
func ParseRcodes(names []string, noError bool) ([]int, error) {
	out := make([]int, 0, len(names))
	for _, n := range names {
		rc, ok := dns.StringToRcode[strings.ToUpper(strings.TrimSpace(n))]
		if !ok || rc > maxRcode {
			return nil, fmt.Errorf("%q is not an rcode name (NXDOMAIN, SERVFAIL, REFUSED, ...)", n)
		}
		if rc == dns.RcodeSuccess && !noError {
			return nil, fmt.Errorf("%q: NOERROR is an answer, not an rcode to pass on", n)
		}
		if !slices.Contains(out, rc) {
			out = append(out, rc)
		}
	}
	return out, nil
}

// excepts reports whether the group leaves name (lower-case) to others.
func (g *group) excepts(name string) bool {
	if len(g.except) == 0 || name == g.zone {
		return false
	}
	return dnsname.InZones(name, g.except)
}

// passesOn reports whether r goes on to the group's next group.
func (g *group) passesOn(r *dns.Msg) bool {
	if g.next == nil {
		return false
	}
	if r.Rcode >= 0 && r.Rcode < 32 && g.nextOn&(1<<r.Rcode) != 0 {
		return true
	}
	return g.nextNoData && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0
}

// external reports whether a server's name (lower-case FQDN) is resolved
// by asking NameServers: it is outside ClusterZones, or there are none and
// no Resolver.
func (f *Forwarder) external(name string) bool {
	if len(f.cfg.ClusterZones) == 0 {
		return f.cfg.Resolver == nil
	}
	return !dnsname.InZones(name, f.cfg.ClusterZones)
}

// exchange answers q from the group of its name and the groups chained
// behind it, within ctx's deadline.
func (f *Forwarder) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	g := f.groupFor(strings.ToLower(q.Question[0].Name))
	if g == nil {
		return nil, ErrNoUpstream
	}
	for {
		r, err := f.exchangeGroup(ctx, g, q)
		if err != nil {
			return nil, err
		}
		if !g.passesOn(r) {
			return minimal(q, r), nil
		}
		g = g.next
	}
}

// exchangeGroup runs the exchange loop over g's servers.
func (f *Forwarder) exchangeGroup(ctx context.Context, g *group, q *dns.Msg) (*dns.Msg, error) {
	order := f.order(g)
	n := len(order)
	if n == 0 {
		return nil, ErrNoUpstream
	}
	var errs []error
	attempts, down, failovers := 0, 0, 0
	brokenCounted := false
	for i := 0; ctx.Err() == nil && attempts < 2*n; {
		if i >= n {
			i, down = 0, 0
		}
		s := order[i]
		i++
		if s.Down() {
			down++
			if down < n {
				continue
			}
			if !brokenCounted {
				f.allDown.Add(1)
				brokenCounted = true
			}
			if g.failfast {
				return nil, ErrAllDown
			}
			// Health checking has given up on every server: it may be
			// wrong, so one of them is asked anyway, at random.
			s = order[rand.IntN(n)]
		}
		reply, err := s.exchange(ctx, q, g.readTimeout)
		if err != nil {
			if healthError(err) {
				s.fail(err)
				f.healthcheck(s)
			}
			errs = append(errs, err)
			attempts++
			if down < n {
				continue
			}
			break
		}
		if g.failover == nil {
			return f.retryOnce(ctx, g, order, slices.Index(order, s), q, reply), nil
		}
		if slices.Contains(g.failover, reply.Rcode) {
			failovers++
			if failovers < n {
				continue
			}
		}
		return reply, nil
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return nil, fmt.Errorf("%w: %w", ErrAllFailed, errors.Join(errs...))
}

// retryOnce is nodedns's default for a group without a failover list: a
// SERVFAIL or REFUSED from order[i] is asked once more of another live
// server (a DNSSEC-broken name answers SERVFAIL from every validating
// resolver, but a REFUSED is often one server's policy for the name),
// whose reply wins unless the exchange fails.
func (f *Forwarder) retryOnce(ctx context.Context, g *group, order []*Server, i int, q, reply *dns.Msg) *dns.Msg {
	if reply.Rcode != dns.RcodeServerFailure && reply.Rcode != dns.RcodeRefused {
		return reply
	}
	alt := another(order, i)
	if alt == nil || ctx.Err() != nil {
		return reply
	}
	r2, err := alt.exchange(ctx, q, g.readTimeout)
	if err != nil {
		if healthError(err) {
			alt.fail(err)
			f.healthcheck(alt)
		}
		return reply
	}
	return r2
}

// another is the first server after order[i], in order, that is neither
// order[i] (a server may be listed twice) nor down; nil if none.
func another(order []*Server, i int) *Server {
	for j := 1; j < len(order); j++ {
		s := order[(i+j)%len(order)]
		if s != order[i] && !s.Down() {
			return s
		}
	}
	return nil
}
