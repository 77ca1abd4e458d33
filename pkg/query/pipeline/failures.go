package pipeline

import (
	"context"
	"errors"
	"log/slog"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// FailureLimiter decides whether a failure line may be written now (see
// pkg/observe/errlog): a burst per reason, then a steady rate. When ok, suppressed
// is how many lines of that reason were held back since the last one.
// Implementations must be safe for concurrent use and allocate nothing:
// Allow is called on the reader for every SERVFAIL, cached ones included.
type FailureLimiter interface {
	Allow(reason string) (suppressed uint64, ok bool)
}

// Reasons a SERVFAIL is sent for. They key the failure log's rate limit, so
// each is a constant.
const (
	failPanic      = "panic answering the query"
	failOverloaded = "in-flight bound reached (max-inflight or max-client-inflight)"
	failPack       = "packing the reply failed"
	failUpstream   = "upstream failed"
	failNotSynced  = "cluster index not synced and no cluster DNS to ask"
	failClusterDNS = "cluster DNS failed"
	failUpstreamSF = "upstream answered SERVFAIL"
	failCached     = "cached SERVFAIL"
	failCluster    = "cluster zone answered SERVFAIL"
	failHosts      = "hosts: name in its zones has no entry and no fallthrough"
	failTemplate   = "template: name in its zones matched no template and no fallthrough, or its records did not render"
	failWalk       = "search-path walk answered SERVFAIL"
	failRewrite    = "rewrite produced an invalid name"
	failOther      = "SERVFAIL"
	failZone       = "file: zone not loaded, or a CNAME loop"
	// failDNS64Dropped: dns64's A lookup was dropped by the access list
	// (CoreDNS's dns64 answers SERVFAIL when its lookup gets no reply).
	failDNS64Dropped = "dns64: the access list drops the A question"
)

var (
	errNotSynced  = errors.New(failNotSynced)
	errClusterDNS = errors.New("asking the cluster DNS")
	// errTruncated: a stage handed back a message with TC set. The reply
	// to the client is written with TC clear (over TCP there is nothing
	// more to ask; over UDP TC is the pipeline's to set when the reply
	// does not fit), so such a message passed on would read as NOERROR
	// without records, "no such record": it is a failure instead.
	errTruncated = errors.New("stage reply truncated")
	// errZone: a file zone could not answer (zone.go).
	errZone = errors.New(failZone)
)

// failureReason names the reason for a resolution error.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errNotSynced):
		return failNotSynced
	case errors.Is(err, errClusterDNS):
		return failClusterDNS
	case errors.Is(err, errZone):
		return failZone
	}
	return failUpstream
}

// sourceReason names the reason for a SERVFAIL a stage answered with.
func sourceReason(src stage.Source) string {
	switch src {
	case stage.SourceCache, stage.SourceStale:
		return failCached
	case stage.SourceUpstream:
		return failUpstreamSF
	case stage.SourceCluster:
		return failCluster
	case stage.SourceHosts:
		return failHosts
	case stage.SourceTemplate:
		return failTemplate
	case stage.SourceAutopath:
		return failWalk
	}
	return failOther
}

// logFailure writes the warn line for a SERVFAIL sent to c, unless the
// limiter holds it back. Nothing is allocated when it does.
func (p *Pipeline) logFailure(c *call, src stage.Source) {
	if p.loop.probing(c.name) {
		return // the loop probe's own failure is expected
	}
	reason := c.fail
	if reason == "" {
		reason = sourceReason(src)
	}
	n, ok := p.cfg.Failures.Allow(reason)
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("reason", reason), slog.String("name", c.q.Name),
		slog.String("type", dns.Type(c.q.Type).String()), slog.String("client", c.req.Client.String()),
		slog.String("proto", c.req.Proto), slog.String("source", string(src))}
	if c.revert != nil {
		attrs = append(attrs, slog.String("rewritten", c.name))
	}
	if c.failErr != nil && c.failErr.Error() != reason {
		attrs = append(attrs, slog.String("err", c.failErr.Error()))
	}
	if n > 0 {
		attrs = append(attrs, slog.Uint64("suppressed", n))
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "SERVFAIL sent", attrs...)
}
