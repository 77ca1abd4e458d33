// Package stage is the contract between the query pipeline
// (pkg/query/pipeline) and its stages: the one Result every stage lookup
// returns, the Source that labels an answer, the Origin of a query (who it
// is resolved for), and the interfaces the pipeline asks of each stage,
// including what its serving path needs of them (a cache's stored reply,
// the cluster's generation), so that no wrapper can silently take a slower
// path by forgetting a method.
//
// It holds types only. The stages (pkg/cache, pkg/upstream,
// pkg/query/hosts, pkg/query/rewrite, pkg/query/builtin, pkg/query/acl,
// pkg/query/template, pkg/k8s) may import it; they
// never import each other or the pipeline, and the agent wires them.
//
// Conventions shared by every stage:
//   - Names are fully qualified and lower-case. The pipeline restores the
//     client's spelling when it writes the reply.
//   - Messages handed back are read-only for the caller: a stage may
//     return a *dns.Msg (and RRs) that it shares between requests.
//   - Implementations are safe for concurrent use, and the methods marked
//     as on the reader are cheap: they run on a socket's reader for every
//     query, and allocate nothing when they do not answer.
package stage

import (
	"context"
	"errors"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Source says which stage produced an answer; it labels metrics and stats.
type Source string

// Sources of answers.
const (
	SourceCluster  Source = "cluster"
	SourceCache    Source = "cache"
	SourceStale    Source = "stale"
	SourceUpstream Source = "upstream"
	SourceAutopath Source = "autopath"
	SourceLocal    Source = "local"    // answered by the pipeline itself (errors, ANY, ...)
	SourceHosts    Source = "hosts"    // static records
	SourceTemplate Source = "template" // answered by a template
	SourceFile     Source = "file"     // a zone served from a zone file
)

// Result is a stage's answer to one question.
type Result struct {
	// Msg carries Rcode, Authoritative and the Answer, Ns and Extra
	// sections; its Question is not meaningful. It may be shared between
	// requests: never modify it.
	Msg *dns.Msg
	// Source is where the answer came from: a Resolver says which of its
	// sources; Hosts and Cluster leave it empty (the pipeline knows which
	// stage it asked).
	Source Source
	// ExternalTarget, when set, is an out-of-zone name (lower-case FQDN)
	// that Msg's answer ends in a CNAME to (an ExternalName Service): the
	// pipeline resolves it through cache and upstream and appends that
	// answer. Cluster only.
	ExternalTarget string
	// NotSynced means the name belongs to the cluster's zones but the
	// cluster has not synced yet: the pipeline must not answer NXDOMAIN
	// from it, and asks the configured cluster DNS instead, or answers
	// SERVFAIL. Msg is then a SERVFAIL. Cluster only.
	NotSynced bool
	// TargetAnswerOnly: of ExternalTarget's answer only the answer
	// section is appended, never its authority when it has no records
	// (the external zones, as CoreDNS's k8s_external).
	TargetAnswerOnly bool
	// TargetTimes, when over 1, is how many times the target's answer is
	// appended (the external zones: CoreDNS's k8s_external looks a
	// hostname up again for each port of the Service, and appends each
	// answer).
	TargetTimes int
}

// Classes of failure a stage's errors match (errors.Is), so that the
// pipeline can say why a query failed (the Extended DNS Error of its
// SERVFAIL) without importing the stage.
var (
	// ErrOverloaded: a bound on work in flight refused the query; no
	// server failed.
	ErrOverloaded = errors.New("bound on work in flight reached")
	// ErrNoServer: no server is configured for the name.
	ErrNoServer = errors.New("no server for the name")
	// ErrAllDown: every server for the name is marked down and none was
	// asked (failfast). Unlike ErrNoServer it is a failure of the
	// upstreams, remembered as one (CoreDNS's cache keeps such a
	// SERVFAIL too).
	ErrAllDown = errors.New("every server for the name is down")
)

// Key is a question's identity for what is kept or shared per question:
// the cache's entries and the forwarder's coalesced exchanges. Name is
// lower-case and fully qualified; DO and CD change the answer.
type Key struct {
	Name   string
	Type   uint16
	Class  uint16
	DO, CD bool
}

// KeyOf returns the Key of q's first question (q must have one).
func KeyOf(q *dns.Msg) Key {
	k := Key{Name: strings.ToLower(q.Question[0].Name), Type: q.Question[0].Qtype, Class: q.Question[0].Qclass, CD: q.CheckingDisabled}
	if o := q.IsEdns0(); o != nil {
		k.DO = o.Do()
	}
	return k
}

// Origin is who a query is resolved for: the client's address and, when
// the client is a pod the agent knows, its namespace. Stages that share a
// bounded resource among clients (the forwarder's in-flight slots) keep
// each one's share by it. The zero Origin is work done on no client's
// behalf (prefetch, refreshes, probes).
type Origin struct {
	Client    netip.Addr
	Namespace string
}

// IsZero reports whether o names no client.
func (o Origin) IsZero() bool { return !o.Client.IsValid() }

// Hosts answers names from static records (pkg/query/hosts), before the
// cluster zone and the cache, as CoreDNS's hosts plugin sits before
// kubernetes and forward.
type Hosts interface {
	// Lookup answers (name, qtype), on the reader. ok false means the
	// next stage answers. The message is the same for a question until
	// the records change (the pipeline keeps it packed by identity).
	Lookup(name string, qtype uint16) (res Result, ok bool)
	// Generation is a counter that moves after every change of the
	// records (a reload, the file re-read), as Cluster's does: what was
	// built from answers of the stages after it (the search-path
	// decisions and shortcuts) is current only while it has not moved.
	// On the reader.
	Generation() uint64
}

// Cluster is the local authority for the cluster zone and for the reverse
// names of the cluster IPs it knows (pkg/k8s).
type Cluster interface {
	// Lookup answers (name, qtype), on the reader: a map lookup, never a
	// scan. ok is false when the name is not one the cluster answers
	// (outside the zone, or a reverse name of an IP it does not know): the
	// query then goes to cache and upstream. The message is the same for
	// a question until something in the cluster changes.
	Lookup(name string, qtype uint16) (res Result, ok bool)
	// Zone is the cluster domain, lower-case and fully qualified
	// ("cluster.local.").
	Zone() string
	// Generation is a counter that moves after every change that may
	// change an answer, so that what was built from answers (the
	// search-path shortcuts) is known current while it has not moved.
	// An implementation that cannot tell returns 0: every use then asks
	// again.
	Generation() uint64
}

// Pods maps a client address to the namespace of the pod that owns it,
// on the reader. Only pods on this node are known; host-network pods are
// never returned.
type Pods interface {
	PodNamespace(ip netip.Addr) (namespace string, ok bool)
}

// Resolver answers external names: a cache in front of the upstreams
// (pkg/cache).
type Resolver interface {
	// AppendHit appends the cached reply for the question to dst when a
	// fresh one exists, on the reader: ID zero, lower-case question,
	// TTLs counted down, no OPT but, as its last record, one holding the
	// upstream's Extended DNS Error options when it gave any. The
	// pipeline patches ID, flags, the question's case and EDNS. ok is false on a miss or an expired entry
	// (Resolve deals with those).
	AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool)
	// AppendHitRef is AppendHit that also returns the stored reply that
	// answered, for a caller that keeps a reply built from it (a
	// search-path shortcut) and takes each later hit through it instead
	// of a lookup. It may allocate.
	AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ref StoredHit, ok bool)
	// Resolve answers q (one question, lower-case name) for o: from the
	// cache, or from upstream on a miss, waiting as long as ctx allows.
	// Result.Source is SourceCache (no exchange awaited), SourceStale (an
	// answer past its lifetime, served because the upstream failed) or
	// SourceUpstream. Failure is an error, never a nil message: the
	// pipeline answers SERVFAIL.
	Resolve(ctx context.Context, o Origin, q *dns.Msg) (Result, error)
}

// StoredHit is one stored reply of a Resolver's cache. A stored reply never
// changes: a new answer is another one.
type StoredHit interface {
	// Hit takes a hit on it, counted as AppendHit's are: ok while it is
	// still the cache's fresh answer for its question, with its TTL now.
	Hit() (ttl uint32, ok bool)
}

// Exchanger forwards a query as it is, for o (pkg/upstream): what
// the cache asks of the upstreams, and what the pipeline asks of the
// cluster DNS before the cluster has synced.
type Exchanger interface {
	Exchange(ctx context.Context, o Origin, q *dns.Msg) (*dns.Msg, error)
}

// Rewriter rewrites query names before everything else (pkg/query/rewrite),
// as CoreDNS's rewrite plugin comes first.
type Rewriter interface {
	// Rewrite is asked about every query, on the reader. It returns the
	// name to resolve instead of name (both lower-case FQDNs) and revert,
	// which returns a copy of a reply for it with the names mapped back
	// to those the client asked (it must not modify the message it is
	// given). ok is false when no rule applies; err means the rewrite gave
	// an invalid name (the client gets SERVFAIL).
	Rewrite(name string) (to string, revert func(*dns.Msg) *dns.Msg, ok bool, err error)
}
