package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Resolve answers q from the cache, or from upstream on a miss, for o (the
// upstream keeps each client's share of its exchanges by it). The reply's
// question is q's (lower-cased) and its ID is q's. The Source is
// stage.SourceCache when no upstream exchange was awaited, SourceStale for
// a stale answer, else SourceUpstream.
func (c *Cache) Resolve(ctx context.Context, o stage.Origin, q *dns.Msg) (stage.Result, error) {
	if len(q.Question) != 1 {
		return upstreamResult(nil, fmt.Errorf("cache: query has %d questions, want 1", len(q.Question)))
	}
	k := KeyOf(q)
	e, found := c.get(&k)
	now := c.now()
	if found {
		if remain := e.expires() - now; remain > 0 {
			c.countHit(e)
			c.maybePrefetch(k, e, remain)
			r, err := e.msg(q.Id, ttlSeconds(remain))
			return stage.Result{Msg: r, Source: stage.SourceCache}, err
		}
		if !c.usableStale(e, now) {
			found = false
		} else if e.staleUntil.Load() > now {
			// The upstream failed moments ago: answer stale at once and
			// let one background refresh find out whether it is back.
			c.refreshAsync(k, e)
			return c.serveStale(e, q.Id)
		}
	}
	c.misses.Add(1)
	if !found {
		r, _, err := c.fetch(ctx, o, k, q.Id)
		return upstreamResult(r, err)
	}
	// An expired entry that may stand in: give the upstream
	// StaleAnswerAfter, then answer stale while the fetch goes on in the
	// background (it outlives this query, not the cache).
	type result struct {
		r   *dns.Msg
		err error
	}
	ch := make(chan result, 1)
	id := q.Id // q is the caller's: not to be touched once Resolve returns
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.bg, cancel)
	if !c.background("refreshing an expired entry", func() {
		defer cancel()
		defer stop()
		res := result{err: errors.New("cache: refresh did not finish")}
		// Sent however the fetch ends, a panic included: the query
		// waiting on it then answers stale at once.
		defer func() {
			if res.err != nil || failed(res.r) {
				c.staleFor(e)
			}
			ch <- res
		}()
		res.r, _, res.err = c.fetch(fctx, o, k, id)
	}) {
		// Closed: no background work any more; ask in the foreground.
		cancel()
		stop()
		if r, _, err := c.fetch(ctx, o, k, id); err == nil && !failed(r) {
			return upstreamResult(r, nil)
		}
		return c.serveStale(e, q.Id)
	}
	timer := time.NewTimer(c.conf().StaleAnswerAfter)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res.err == nil && !failed(res.r) {
			return upstreamResult(res.r, nil)
		}
		return c.serveStale(e, q.Id)
	case <-timer.C:
		// The upstream is slow: the queries that follow get the stale
		// answer at once instead of each waiting out the timer (and each
		// leaving a fetch behind) until the fetch under way has landed.
		c.staleFor(e)
		return c.serveStale(e, q.Id)
	case <-ctx.Done():
		return upstreamResult(nil, fmt.Errorf("cache: waiting for upstream: %w", ctx.Err()))
	}
}

// errTruncated: the exchanger handed back a truncated reply.
var errTruncated = errors.New("cache: upstream reply truncated")

func upstreamResult(r *dns.Msg, err error) (stage.Result, error) {
	return stage.Result{Msg: r, Source: stage.SourceUpstream}, err
}

// staleFor makes e answer stale at once for StaleRetry.
func (c *Cache) staleFor(e *entry) {
	e.staleUntil.Store(c.now() + int64(c.conf().StaleRetry))
}

func (c *Cache) usableStale(e *entry, now int64) bool {
	return c.conf().StaleFor > 0 && e.kind != kindServfail && now-e.expires() < int64(c.conf().StaleFor)
}

func (c *Cache) serveStale(e *entry, id uint16) (stage.Result, error) {
	c.stale.Add(1)
	r, err := e.msg(id, ttlSeconds(int64(c.conf().StaleTTL)))
	return stage.Result{Msg: r, Source: stage.SourceStale}, err
}

// failed reports whether a reply is one a stale answer should replace.
func failed(r *dns.Msg) bool {
	return r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeRefused
}

// fetch asks the upstream and stores what may be stored. A reply that was
// stored gets every TTL set to the entry's lifetime, so that the answer to
// the miss and the hits after it agree (clamps included). stored reports
// whether the reply replaced the entry for k. The reply's ID is id. o is
// who the query is for; the zero Origin for the cache's own refreshes.
func (c *Cache) fetch(ctx context.Context, o stage.Origin, k Key, id uint16) (r *dns.Msg, stored bool, err error) {
	out := upstreamQuery(k, id)
	r, err = c.up.Load().Exchange(ctx, o, out)
	if err != nil {
		return nil, false, err
	}
	if r.Truncated {
		// No answer (the exchanger's TCP retry was truncated too, or it
		// has none): a failure, so that a stale answer stands in.
		return nil, false, errTruncated
	}
	r.Id = id
	if len(r.Question) == 0 {
		r.Question = out.Question
	}
	if life, ok := c.store(k, r); ok {
		setTTLs(r, ttlSeconds(int64(life)))
		return r, true, nil
	}
	zeroHugeTTLs(r)
	return r, false, nil
}

// setTTLs sets the TTL of every record of r but the OPT.
func setTTLs(r *dns.Msg, ttl uint32) {
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype != dns.TypeOPT {
				rr.Header().Ttl = ttl
			}
		}
	}
}

// upstreamQuery is the query the cache sends for k: lower-case name, RD,
// the client's CD, EDNS0 with DO when the client set it.
func upstreamQuery(k Key, id uint16) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: id, RecursionDesired: true, CheckingDisabled: k.CD}}
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	m.SetEdns0(1232, k.DO)
	return m
}

// KeyOf returns the cache key of a query.
func KeyOf(q *dns.Msg) Key {
	k := Key{Name: strings.ToLower(q.Question[0].Name), Type: q.Question[0].Qtype, Class: q.Question[0].Qclass, CD: q.CheckingDisabled}
	if o := q.IsEdns0(); o != nil {
		k.DO = o.Do()
	}
	return k
}

// maybePrefetch refreshes a popular entry whose remaining lifetime has
// fallen to PrefetchPercent of its original, once at a time per entry.
func (c *Cache) maybePrefetch(k Key, e *entry, remain int64) {
	hits := e.hits.Add(1)
	if c.conf().PrefetchHits < 0 || int(hits) < c.conf().PrefetchHits || e.kind == kindServfail {
		return
	}
	if remain*100 > e.lifetime*int64(c.conf().PrefetchPercent) {
		return
	}
	if c.refreshAsync(k, e) {
		c.prefetches.Add(1)
	}
}

// refreshAsync starts one background fetch for k unless one is running for
// e, the refresh bound is reached or the cache is closed. It reports
// whether it started one.
func (c *Cache) refreshAsync(k Key, e *entry) bool {
	if !e.refreshing.CompareAndSwap(false, true) {
		return false
	}
	// The hit path may hand in a name that lives in the caller's reusable
	// buffer; the refresh outlives it.
	k.Name = strings.Clone(k.Name)
	select {
	case c.refreshSem <- struct{}{}:
	default:
		e.refreshing.Store(false)
		return false
	}
	started := c.background("refreshing a cached entry", func() {
		defer func() { <-c.refreshSem }()
		fetched := false
		defer func() {
			if !fetched {
				// The fetch panicked (background recovers it): leave e
				// so that a later query may refresh it again.
				c.staleFor(e)
				e.refreshing.Store(false)
			}
		}()
		r, stored, err := c.fetch(c.bg, stage.Origin{}, k, 0)
		fetched = true
		switch {
		case err != nil || failed(r):
			// Stale answers (once e expires) go out at once for
			// StaleRetry; the next query that finds e starts another
			// refresh, one at a time.
			c.staleFor(e)
			e.refreshing.Store(false)
			if err != nil && !errors.Is(err, context.Canceled) {
				c.log.Debug("background refresh failed", "name", k.Name, "type", k.Type, "err", err)
			}
		case !stored:
			// An answer that may not be cached (no SOA, truncated, ...):
			// e stays, and may be refreshed again.
			e.refreshing.Store(false)
		}
		// Stored: e has been replaced, and its flag stays set so that a
		// query still holding e does not refresh it a second time.
	})
	if !started {
		<-c.refreshSem
		e.refreshing.Store(false)
	}
	return started
}
