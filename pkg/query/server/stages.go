package server

import (
	"context"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// The interfaces below are what the request pipeline needs from the other
// stages. They are defined here, by their consumer; the packages that
// implement them (pkg/cluster/k8s, pkg/query/cache, pkg/query/upstream) never import this one,
// and cmd/nodedns wires them together.
//
// Conventions shared by every stage:
//   - Names are fully qualified and lower-case. The server restores the
//     client's spelling when it writes the reply (it overwrites the question
//     bytes, and owner names compressed against the question follow).
//   - Messages handed back are read-only for the caller: a stage may return
//     a *dns.Msg (and RRs) that it shares between requests.

// ClusterResult is the local answer for a name in the cluster's zones.
type ClusterResult struct {
	// Msg carries Rcode, Authoritative and the Answer, Ns and Extra sections
	// (Question is ignored). It is shared: never modify it.
	Msg *dns.Msg
	// ExternalTarget, when set, is an out-of-zone name (lower-case FQDN) that
	// Msg's answer ends in a CNAME to (an ExternalName service). The caller
	// resolves it through cache and upstream and appends that answer.
	ExternalTarget string
	// NotSynced means the name belongs to the cluster's zones but the index
	// has not synced yet: the caller must not answer NXDOMAIN from it and
	// forwards to the configured cluster DNS, or answers SERVFAIL.
	NotSynced bool
}

// Cluster is the local authority for the cluster zone (and for the reverse
// names of cluster IPs it knows). Implementations must be safe for
// concurrent use and cheap: Lookup is called on the query path and must be
// a map lookup, never a scan.
type Cluster interface {
	// Lookup answers (name, qtype). ok is false when the name is not one the
	// cluster answers (outside the zone, or a reverse name of an IP it does
	// not know): the query then goes to cache and upstream.
	Lookup(name string, qtype uint16) (res ClusterResult, ok bool)
	// Zone is the cluster domain, lower-case and fully qualified
	// ("cluster.local.").
	Zone() string
}

// Hosts answers names from static records (pkg/query/hosts), before the cluster
// zone and the cache, as CoreDNS's hosts plugin sits before kubernetes and
// forward. Implementations must be safe for concurrent use and cheap:
// Lookup is called on the reader for every query and must allocate nothing
// for a name it does not answer.
type Hosts interface {
	// Lookup answers (name, qtype), name lower-case and fully qualified.
	// ok false means the next stage answers. The message (Rcode,
	// Authoritative, Answer) is shared: never modify it; a stage returns
	// the same message for a question until its records change.
	Lookup(name string, qtype uint16) (m *dns.Msg, ok bool)
}

// Pods maps a client address to the namespace of the pod that owns it. Only
// pods on this node are known; host-network pods are never returned.
// Implementations must be safe for concurrent use and cheap.
type Pods interface {
	PodNamespace(ip netip.Addr) (namespace string, ok bool)
}

// Resolver answers external names: cache first, upstream on a miss.
// Implementations must be safe for concurrent use.
type Resolver interface {
	// Resolve answers q (one question, lower-case name). The reply's
	// question is not meaningful to the caller. fromCache is true when no
	// upstream exchange was awaited, stale when the answer is past its
	// lifetime (served because the upstream failed). A nil reply with a nil
	// error never happens: failure is an error, and the caller answers
	// SERVFAIL.
	Resolve(ctx context.Context, q *dns.Msg) (reply *dns.Msg, fromCache, stale bool, err error)
}

// HitCache is the optional allocation-free path for cache hits, tried on
// the socket's reader before anything else. It appends the stored reply
// (ID zero, lower-case question, TTLs counted down, no OPT) to dst. The
// server patches ID, flags, the question's case and EDNS.
type HitCache interface {
	AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool)
	// Peek returns a fresh cached answer as a message (TTLs counted down)
	// without waiting for anything; ok is false on a miss or an expired
	// entry. The search-path walk uses it to answer on the reader.
	Peek(name string, qtype, qclass uint16, do, cd bool) (m *dns.Msg, ok bool)
}

// RefHitCache is what a HitCache may offer for the search-path shortcuts
// (pkg/query/cache.Cache does): a hit that also returns the stored reply, as a
// StoredHit. A shortcut built on a cached winner then takes each later hit
// through it, without a lookup, a copy or a comparison; without it the
// shortcut takes the hit with AppendHit and compares bytes.
type RefHitCache interface {
	// AppendHitRef is AppendHit plus the stored reply that answered: a
	// StoredHit, or nil.
	AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ref any, ok bool)
}

// StoredHit is one stored reply of a RefHitCache. Hit takes a hit on it,
// counted as AppendHit's are: ok while it is still the cache's fresh
// answer for its question (a stored reply never changes; a new answer is
// another one), with its TTL now.
type StoredHit interface {
	Hit() (ttl uint32, ok bool)
}

// Exchanger forwards a query as it is (used for --cluster-dns before the
// cluster index has synced).
type Exchanger interface {
	Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
}

// Observer is told about every answered request. It must be cheap and safe
// for concurrent use; it is called on the serving path.
type Observer interface {
	Observe(ev Event)
}

// Event describes one answered request.
type Event struct {
	Source Source
	Rcode  int
	Proto  string // "udp" or "tcp"
	Client netip.Addr
	// Name is the lower-case question name. It may share memory with a
	// buffer the server reuses for the next query: copy it
	// (strings.Clone) to keep it beyond the call.
	Name     string
	Qtype    uint16
	Duration time.Duration
	// AutopathSteps is, for a shortcut taken, how many search-path steps the
	// agent walked for the client; AutopathSaved how many client queries the
	// shortcut saved.
	AutopathSteps, AutopathSaved int
	// Listener is the index in Config.Listen of the address the request
	// came in on.
	Listener int
	// RequestSize and ResponseSize are the request's and the reply's
	// length in bytes (DNS message only: without TCP's length prefix).
	RequestSize, ResponseSize int
	// DO is the request's DNSSEC OK bit.
	DO bool
	// Answers is the reply's answer count (ANCOUNT) and Truncated its TC
	// bit, as sent: with Rcode they tell an answer from NODATA (NOERROR
	// without answers), as the query log classes need.
	Answers   int
	Truncated bool
}

// Source says which stage produced an answer; it labels metrics and stats.
type Source string

// Sources of answers.
const (
	SourceCluster  Source = "cluster"
	SourceCache    Source = "cache"
	SourceStale    Source = "stale"
	SourceUpstream Source = "upstream"
	SourceAutopath Source = "autopath"
	SourceLocal    Source = "local" // answered by the server itself (errors, ANY, ...)
	SourceHosts    Source = "hosts" // static records (Config.Hosts)
)
