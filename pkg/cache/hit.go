package cache

import (
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// AppendHit appends the cached reply for k to dst when a fresh entry exists,
// with every TTL counted down. The header's ID and flags and the question's
// case are the caller's to patch. It is the allocation-free hit path: it
// unpacks nothing. ok is false on a miss or an expired entry (Resolve then
// deals with it).
func (c *Cache) AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool) {
	e, remain, ok := c.hit(name, qtype, qclass, do, cd)
	if !ok {
		return dst, 0, false
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	e.putTTLs(dst[start:], c.hitTTL(e, remain))
	return dst, int(e.rcode), true
}

// AppendHitRef is AppendHit that also returns the stored reply that
// answered (a *StoredHit), for a caller that keeps a copy of the reply and
// takes its later hits through StoredHit.Hit. It allocates the StoredHit.
func (c *Cache) AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ref stage.StoredHit, ok bool) {
	e, remain, ok := c.hit(name, qtype, qclass, do, cd)
	if !ok {
		return dst, 0, nil, false
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	e.putTTLs(dst[start:], c.hitTTL(e, remain))
	k := Key{Name: strings.Clone(name), Type: qtype, Class: qclass, DO: do, CD: cd}
	return dst, int(e.rcode), &StoredHit{c: c, e: e, k: k}, true
}

// StoredHit is one stored reply, kept by a caller that copied it
// (pkg/ndots's search-path shortcuts build a reply around it). A stored
// reply never changes: a refresh stores a new one, and this one is gone.
type StoredHit struct {
	c *Cache
	e *entry
	k Key
}

// storedTouchEvery: one Hit in this many also marks the entry recently
// used, so that a reply served only through StoredHits is not evicted as
// unused (a lookup per hit would cost what the caller avoids).
const storedTouchEvery = 64

// Hit takes a hit on the stored reply as AppendHit would (counted; a
// popular entry prefetched) without looking it up or copying it: ok while
// it is still the cache's fresh answer for its key, with its TTL now.
func (h *StoredHit) Hit() (ttl uint32, ok bool) {
	e := h.e
	if e.gone() {
		return 0, false
	}
	now := h.c.now()
	remain := e.expires() - now
	if remain <= 0 {
		return 0, false
	}
	h.c.countHit(e)
	h.c.maybePrefetch(h.k, e, remain, now)
	if e.hits()%storedTouchEvery == 0 {
		h.c.get(&h.k)
	}
	return h.c.hitTTL(e, remain), true
}

// hit returns the fresh entry for the key and its remaining lifetime,
// counting the hit and prefetching a popular entry.
func (c *Cache) hit(name string, qtype, qclass uint16, do, cd bool) (*entry, int64, bool) {
	k := Key{Name: name, Type: qtype, Class: qclass, DO: do, CD: cd}
	e, found := c.get(&k)
	if !found {
		return nil, 0, false
	}
	now := c.now()
	remain := e.expires() - now
	if remain <= 0 {
		return nil, 0, false
	}
	c.countHit(e)
	c.maybePrefetch(k, e, remain, now)
	return e, remain, true
}

// hitTTL is the TTL a hit on e carries with remain nanoseconds left: the
// remaining whole seconds, or with KeepTTL the lifetime it was stored
// with.
func (c *Cache) hitTTL(e *entry, remain int64) uint32 {
	if c.conf().KeepTTL {
		return ttlSeconds(e.lifetime)
	}
	return ttlSeconds(remain)
}

func ttlSeconds(ns int64) uint32 {
	s := ns / int64(time.Second)
	if s > 1<<31-1 {
		s = 1<<31 - 1
	}
	return uint32(s)
}
