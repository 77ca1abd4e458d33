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

// packedKey identifies one packed cluster reply: the stage's message, the
// question name and type. Holding the *dns.Msg keeps it alive, so its
// address cannot be reused by a newer message while the entry exists: a
// changed Service gets a new message from the index, hence a new key, and
// the old entry simply ages out.
type packedKey struct {
	m     *dns.Msg
	name  string
	qtype uint16
}

// packedCache keeps cluster replies in wire form (lower-case question, no
// OPT), so that a cluster answer on the reader is a copy and a patch, like a
// cache hit, instead of a pack. Bounded by entries.
type packedCache struct {
	seed   maphash.Seed
	shards [packedShards]*lru.Cache[packedKey, []byte]
}

func newPackedCache(entries int) *packedCache {
	p := &packedCache{seed: maphash.MakeSeed()}
	for i := range p.shards {
		c, err := lru.New[packedKey, []byte](max(entries/packedShards, 1))
		if err != nil {
			panic(err) // size >= 1 always
		}
		p.shards[i] = c
	}
	return p
}

func (p *packedCache) shard(name string) *lru.Cache[packedKey, []byte] {
	return p.shards[maphash.String(p.seed, name)%packedShards]
}

// sendCluster appends the reply to r for the cluster's message m.
func (s *Server) sendCluster(dst []byte, r *request, m *dns.Msg) []byte {
	start := len(dst)
	k := packedKey{m: m, name: r.q.Name, qtype: r.q.Type}
	sh := s.packed.shard(k.name)
	if b, ok := sh.Get(k); ok {
		dst = append(dst, b...)
	} else {
		var err error
		if dst, err = s.pack(dst, r, m); err != nil {
			s.log.Warn("packing cluster reply failed", "name", r.q.Name, "type", r.q.Type, "err", err)
			return s.reply(dst[:start], r, dns.RcodeServerFailure, SourceLocal)
		}
		// The query's name lives in a reused buffer; the key outlives it.
		k.name = strings.Clone(k.name)
		sh.Add(k, append([]byte(nil), dst[start:]...))
	}
	dst = s.finish(dst, start, r, m.Rcode)
	s.observe(r, SourceCluster, m.Rcode, 0, 0)
	return dst
}
