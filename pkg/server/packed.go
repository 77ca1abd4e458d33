package server

import (
	"hash/maphash"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"
)

// packedShards splits the packed-reply cache so that readers on several
// cores do not queue on one lock.
const packedShards = 16

// packedKey identifies one packed cluster reply by question.
type packedKey struct {
	name  string
	qtype uint16
}

// packedEntry is the reply packed from the index's message m. The entry is
// valid only while the index still returns that same message for the
// question: a changed Service gets a new message, the pointers differ and
// the entry is packed again in place. So each question keeps one version,
// and holding m (the current message, which the index holds too) keeps its
// address from being reused while the entry exists.
type packedEntry struct {
	m    *dns.Msg
	wire []byte
}

// maxPackedReply: larger replies (big headless Services over TCP) are
// packed per query rather than kept.
const maxPackedReply = 4096

// packedCache keeps cluster replies in wire form (lower-case question, no
// OPT), so that a cluster answer on the reader is a copy and a patch, like a
// cache hit, instead of a pack. Bounded by entries.
type packedCache struct {
	seed   maphash.Seed
	shards [packedShards]*lru.Cache[packedKey, packedEntry]
}

func newPackedCache(entries int) *packedCache {
	p := &packedCache{seed: maphash.MakeSeed()}
	for i := range p.shards {
		c, err := lru.New[packedKey, packedEntry](max(entries/packedShards, 1))
		if err != nil {
			panic(err) // size >= 1 always
		}
		p.shards[i] = c
	}
	return p
}

func (p *packedCache) shard(name string) *lru.Cache[packedKey, packedEntry] {
	return p.shards[maphash.String(p.seed, name)%packedShards]
}

// sendCluster appends the reply to r for the cluster's message m.
func (s *Server) sendCluster(dst []byte, r *request, m *dns.Msg) []byte {
	start := len(dst)
	k := packedKey{name: r.q.Name, qtype: r.q.Type}
	sh := s.packed.shard(k.name)
	if e, ok := sh.Get(k); ok && e.m == m {
		dst = append(dst, e.wire...)
	} else {
		var err error
		if dst, err = s.pack(dst, r, m); err != nil {
			s.log.Warn("packing cluster reply failed", "name", r.q.Name, "type", r.q.Type, "err", err)
			return s.reply(dst[:start], r, dns.RcodeServerFailure, SourceLocal)
		}
		if n := len(dst) - start; n <= maxPackedReply {
			// The query's name lives in a reused buffer; the key outlives it.
			k.name = strings.Clone(k.name)
			sh.Add(k, packedEntry{m: m, wire: append([]byte(nil), dst[start:]...)})
		}
	}
	dst = s.finish(dst, start, r, m.Rcode)
	s.observe(r, SourceCluster, m.Rcode, 0, 0)
	return dst
}
