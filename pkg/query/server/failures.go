package server

import (
	"errors"
	"log/slog"

	"github.com/miekg/dns"
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
	failWalk       = "search-path walk answered SERVFAIL"
	failRewrite    = "rewrite produced an invalid name"
	failOther      = "SERVFAIL"
)

var (
	errNotSynced  = errors.New(failNotSynced)
	errClusterDNS = errors.New("asking the cluster DNS")
)

// failureReason names the reason for a resolution error.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errNotSynced):
		return failNotSynced
	case errors.Is(err, errClusterDNS):
		return failClusterDNS
	}
	return failUpstream
}

// sourceReason names the reason for a SERVFAIL a stage answered with.
func sourceReason(src Source) string {
	switch src {
	case SourceCache, SourceStale:
		return failCached
	case SourceUpstream:
		return failUpstreamSF
	case SourceCluster:
		return failCluster
	case SourceHosts:
		return failHosts
	case SourceAutopath:
		return failWalk
	}
	return failOther
}

// logFailure writes the warn line for a SERVFAIL sent to r, unless the
// limiter holds it back. Nothing is allocated when it does.
func (s *Server) logFailure(r *request, src Source) {
	if loop := s.loopName.Load().(string); loop != "" && r.q.Name == loop {
		return // the loop probe's own failure is expected
	}
	reason := r.fail
	if reason == "" {
		reason = sourceReason(src)
	}
	n, ok := s.cfg.Failures.Allow(reason)
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("reason", reason), slog.String("name", r.askedName()),
		slog.String("type", dns.Type(r.q.Type).String()), slog.String("client", r.client.String()),
		slog.String("proto", r.proto), slog.String("source", string(src))}
	if r.asked != "" {
		attrs = append(attrs, slog.String("rewritten", r.q.Name))
	}
	if r.failErr != nil && r.failErr.Error() != reason {
		attrs = append(attrs, slog.String("err", r.failErr.Error()))
	}
	if n > 0 {
		attrs = append(attrs, slog.Uint64("suppressed", n))
	}
	s.log.LogAttrs(s.ctx, slog.LevelWarn, "SERVFAIL sent", attrs...)
}
