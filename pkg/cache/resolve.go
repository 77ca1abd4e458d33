package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Resolve answers q from the cache, or from upstream on a miss, for o (the
// upstream keeps each client's share of its exchanges by it). The reply's
// question is q's (lower-cased) and its ID is q's. The Source is
// stage.SourceCache when no upstream exchange was awaited, SourceStale for
// a stale answer, else SourceUpstream.
//
// An expired entry that may still be served stale (StaleFor) is verified
// first: the query waits up to StaleAnswerAfter for the upstream and is
// answered stale if the upstream fails or is slow; right after a failed
// refresh (StaleRetry), and while a verify under way is out, stale answers
// go at once. With StaleImmediate the stale answer goes at once and the
// refresh runs in the background.
func (c *Cache) Resolve(ctx context.Context, o stage.Origin, q *dns.Msg) (stage.Result, error) {
	if len(q.Question) != 1 {
		return upstreamResult(nil, fmt.Errorf("cache: query has %d questions, want 1", len(q.Question)))
	}
	k := KeyOf(q)
	e, found := c.get(&k)
	now := c.now()
	cfg := c.conf()
	if found {
		if remain := e.expires() - now; remain > 0 {
			c.countHit(e)
			c.maybePrefetch(k, e, remain, now)
			r, err := e.msg(q.Id, c.hitTTL(e, remain))
			return stage.Result{Msg: r, Source: stage.SourceCache}, err
		}
		switch {
		case !c.usableStale(e, now):
			found = false
		case cfg.StaleImmediate:
			// At once, and one background refresh (not again within
			// StaleRetry of a failed one).
			if e.staleUntil.Load() <= now {
				c.refreshAsync(k, e)
			}
			return c.serveStale(e, q.Id)
		case e.staleUntil.Load() > now:
			// The upstream failed moments ago: answer stale at once and
			// let one background refresh find out whether it is back.
			c.refreshAsync(k, e)
			return c.serveStale(e, q.Id)
		case e.refreshing() && (cfg.StaleAnswerAfter > 0 || cfg.StaleRetry > 0):
			// A verify (or a refresh) is out: stale at once meanwhile.
			// Without a timer and a retry period every query verifies
			// (the upstream shares one exchange among them), as
			// CoreDNS's serve_stale verify does.
			return c.serveStale(e, q.Id)
		}
	}
	c.misses.Add(1)
	if !found {
		gen := c.gen.Load()
		r, _, err := c.fetchAt(ctx, o, k, q.Id, gen)
		if err != nil && ctx.Err() == nil {
			c.rememberFailure(k, err, gen)
		}
		return upstreamResult(r, err)
	}
	return c.verifyStale(ctx, o, k, e, q.Id)
}

// verifyStale asks the upstream about e, expired but servable stale:
// the answer when one comes in time that may replace it (NOERROR or
// NXDOMAIN; with StalePreferPositive an answer to the question only),
// else e stale. The fetch goes on in the background past the wait (it
// outlives this query, not the cache).
func (c *Cache) verifyStale(ctx context.Context, o stage.Origin, k Key, e *entry, id uint16) (stage.Result, error) {
	type result struct {
		r   *dns.Msg
		err error
	}
	ch := make(chan result, 1)
	// Marks the verify under way; a refresh already out is joined (the
	// upstream shares one exchange per question).
	mine := e.startRefresh()
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.bg, cancel)
	if !c.background("refreshing an expired entry", func() {
		defer cancel()
		defer stop()
		res := result{err: errors.New("cache: refresh did not finish")}
		stored := false
		// Sent however the fetch ends, a panic included: the query
		// waiting on it then answers stale at once.
		defer func() {
			if res.err != nil || c.rejects(k, res.r) {
				c.staleFor(e)
			}
			if mine && !stored {
				e.endRefresh()
			}
			ch <- res
		}()
		res.r, stored, res.err = c.fetch(fctx, o, k, id)
	}) {
		// Closed: no background work any more; ask in the foreground.
		cancel()
		stop()
		if mine {
			e.endRefresh()
		}
		if r, _, err := c.fetch(ctx, o, k, id); err == nil && !c.rejects(k, r) {
			return upstreamResult(r, nil)
		}
		return c.serveStale(e, id)
	}
	var timeout <-chan time.Time
	if d := c.conf().StaleAnswerAfter; d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case res := <-ch:
		if res.err == nil && !c.rejects(k, res.r) {
			return upstreamResult(res.r, nil)
		}
		return c.serveStale(e, id)
	case <-timeout:
		// The upstream is slow: the queries that follow get the stale
		// answer at once instead of each waiting out the timer (and each
		// leaving a fetch behind) until the fetch under way has landed.
		c.staleFor(e)
		return c.serveStale(e, id)
	case <-ctx.Done():
		// Out of time waiting for the upstream: the stale answer is what
		// serve-stale is for (RFC 8767 §5).
		return c.serveStale(e, id)
	}
}

// rememberFailure keeps a SERVFAIL for k, for ServfailTTL, after every
// upstream failed to answer it (CoreDNS 1.15 does so too): the queries
// that follow are answered at once instead of each waiting out the
// upstream's timeouts. Every server marked down (failfast) is such a
// failure too, as in CoreDNS. A query shed by a bound, or a name no
// server is configured for, is none (nor, the caller checks, a query
// whose client stopped waiting). gen is the generation the failed fetch
// began under: an old upstream's failure is not remembered.
func (c *Cache) rememberFailure(k Key, err error, gen uint64) {
	if errors.Is(err, stage.ErrOverloaded) || errors.Is(err, stage.ErrNoServer) || errors.Is(err, errTruncated) {
		return
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, RecursionDesired: true, RecursionAvailable: true, Rcode: dns.RcodeServerFailure}}
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	c.store(k, m, gen)
}

// errTruncated: the exchanger handed back a truncated reply.
var errTruncated = errors.New("cache: upstream reply truncated")

func upstreamResult(r *dns.Msg, err error) (stage.Result, error) {
	return stage.Result{Msg: r, Source: stage.SourceUpstream}, err
}

// staleFor makes e answer stale at once for StaleRetry.
func (c *Cache) staleFor(e *entry) {
	e.staleUntil.Store(c.now() + int64(max(c.conf().StaleRetry, 0)))
}

func (c *Cache) usableStale(e *entry, now int64) bool {
	return c.conf().StaleFor > 0 && e.kind != kindServfail && now-e.expires() < int64(c.conf().StaleFor)
}

func (c *Cache) serveStale(e *entry, id uint16) (stage.Result, error) {
	c.stale.Add(1)
	r, err := e.msg(id, ttlSeconds(int64(max(c.conf().StaleTTL, 0))))
	return stage.Result{Msg: r, Source: stage.SourceStale}, err
}

// rejects reports whether a refresh's reply for k leaves a stale answer
// standing (RFC 8767 §4: only NOERROR and NXDOMAIN replace it; a
// truncated reply is no answer either); with StalePreferPositive, anything
// but an answer to the question.
func (c *Cache) rejects(k Key, r *dns.Msg) bool {
	if r.Truncated || r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return true
	}
	return c.conf().StalePreferPositive && !answers(k, r)
}

// fetch asks the upstream and stores what may be stored. A reply that was
// stored gets every TTL set to the entry's lifetime, so that the answer to
// the miss and the hits after it agree (clamps included). stored reports
// whether the reply replaced the entry for k. The reply's ID is id. o is
// who the query is for; the zero Origin for the cache's own refreshes.
func (c *Cache) fetch(ctx context.Context, o stage.Origin, k Key, id uint16) (r *dns.Msg, stored bool, err error) {
	return c.fetchAt(ctx, o, k, id, c.gen.Load())
}

// fetchAt is fetch under generation gen, read before the call: the reply
// is stored only while gen is still the cache's (store).
func (c *Cache) fetchAt(ctx context.Context, o stage.Origin, k Key, id uint16, gen uint64) (r *dns.Msg, stored bool, err error) {
	out := upstreamQuery(k, id, c.conf().ClearRD)
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
	if life, ok := c.store(k, r, gen); ok {
		setTTLs(r, ttlSeconds(int64(life)))
		return r, true, nil
	}
	// Not kept (its zone is not cached, an entry is kept over it, it is
	// too large): it still carries the TTL it would have been kept for,
	// clamped as CoreDNS's cache writes every reply it passes on.
	if life, kd, ok := lifetime(c.conf(), k, r); ok && life > 0 && kd != kindServfail {
		setTTLs(r, ttlSeconds(int64(life)))
		return r, false, nil
	}
	// Else it goes with the TTLs it came with, those of 2^31 or more made
	// the 0 they read as. Behind the forwarder this finds none (minimal
	// zeroed them), but the cache does not count on its exchanger for it.
	dnswire.ZeroHugeTTLs(r)
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

// upstreamQuery is the query the cache sends for k: lower-case name, RD
// (unless clearRD), the client's CD, EDNS0 with DO when the client set it.
func upstreamQuery(k Key, id uint16, clearRD bool) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: id, RecursionDesired: !clearRD, CheckingDisabled: k.CD}}
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	m.SetEdns0(1232, k.DO)
	return m
}

// KeyOf returns the cache key of a query.
func KeyOf(q *dns.Msg) Key { return stage.KeyOf(q) }

// maybePrefetch counts a hit on e at now (Clock nanoseconds, remain of its
// lifetime left) and refreshes a popular entry, once at a time: at least
// PrefetchHits hits (within PrefetchWindow of each other) and its TTL, in
// whole seconds rounded up, at most PrefetchPercent of its original
// lifetime rounded up, as CoreDNS's prefetch decides.
func (c *Cache) maybePrefetch(k Key, e *entry, remain, now int64) {
	cfg := c.conf()
	hits := e.hit(now, cfg.PrefetchWindow)
	if cfg.PrefetchHits < 0 || int(hits) < cfg.PrefetchHits || e.kind == kindServfail {
		return
	}
	const sec = int64(time.Second)
	if ttl, threshold := (remain+sec-1)/sec, (e.lifetime/sec*int64(cfg.PrefetchPercent)+99)/100; ttl > threshold {
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
	if !e.startRefresh() {
		return false
	}
	// The hit path may hand in a name that lives in the caller's reusable
	// buffer; the refresh outlives it.
	k.Name = strings.Clone(k.Name)
	select {
	case c.refreshSem <- struct{}{}:
	default:
		e.endRefresh()
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
				e.endRefresh()
			}
		}()
		r, stored, err := c.fetch(c.bg, stage.Origin{}, k, 0)
		fetched = true
		switch {
		case stored:
			// The new entry keeps the count of the one it replaces, so
			// that a popular name stays popular (CoreDNS too).
			if ne, ok := c.peek(&k); ok && ne != e {
				ne.freq.Store(e.freq.Load())
			}
		case err != nil || c.rejects(k, r):
			// Stale answers (once e expires) go out at once for
			// StaleRetry; the next query that finds e starts another
			// refresh, one at a time.
			c.staleFor(e)
			e.endRefresh()
			c.refreshFailed.Add(1)
			if err != nil && !errors.Is(err, context.Canceled) {
				c.log.Debug("background refresh failed", "name", k.Name, "type", k.Type, "err", err)
			}
		case !stored:
			// An answer that may not be cached (no SOA, truncated, ...):
			// e stays, and may be refreshed again.
			e.endRefresh()
		}
		// Stored: e has been replaced, and its flag stays set so that a
		// query still holding e does not refresh it a second time.
	})
	if !started {
		<-c.refreshSem
		e.endRefresh()
		return false
	}
	c.refreshes.Add(1)
	return true
}
