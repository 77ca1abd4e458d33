package pipeline

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestPackedCacheBudget: whatever is added, the entries' cost stays within
// the byte budget, and the accounting follows replacements and evictions.
func TestPackedCacheBudget(t *testing.T) {
	const budget = 64 << 10
	p := newPackedCache(100000, budget)
	now := time.Now().UnixNano()
	m := new(dns.Msg)
	wire := make([]byte, 1000)
	for i := 0; i < 5000; i++ {
		k := packedKey{name: fmt.Sprintf("svc-%d.ns.svc.cluster.local.", i), qtype: dns.TypeA}
		p.shard(k.name).add(k, m, wire, now, p.shardCost)
	}
	if b := p.bytes(); b > budget || b <= 0 {
		t.Fatalf("cost %d after 5000 adds of 1000 bytes, want in (0, %d]", b, budget)
	}
	if n := p.len(); n >= 5000 || n < budget/2/1200 {
		t.Fatalf("%d entries, want about budget/entry size", n)
	}

	// One name replaced many times costs one entry.
	q := newPackedCache(100, budget)
	k := packedKey{name: "web.team-a.svc.cluster.local.", qtype: dns.TypeA}
	for i := 0; i < 50; i++ {
		q.shard(k.name).add(k, new(dns.Msg), wire, now, q.shardCost)
	}
	one := (&packedEntry{wire: wire}).cost(k)
	if q.len() != 1 || q.bytes() != one {
		t.Fatalf("after 50 replacements: %d entries costing %d, want 1 costing %d", q.len(), q.bytes(), one)
	}
}

// TestPackedCacheIdle: entries nobody asked for within packedIdle leave as
// new ones arrive (the names of deleted Services under churn), while
// entries in use stay.
func TestPackedCacheIdle(t *testing.T) {
	p := newPackedCache(16384, 8<<20)
	m := new(dns.Msg)
	wire := make([]byte, 100)
	t0 := time.Now().UnixNano()
	key := func(prefix string, i int) packedKey {
		return packedKey{name: fmt.Sprintf("%s-%d.ns.svc.cluster.local.", prefix, i), qtype: dns.TypeA}
	}
	for i := 0; i < 200; i++ {
		k := key("old", i)
		p.shard(k.name).add(k, m, wire, t0, p.shardCost)
	}
	hot := key("old", 7)
	later := t0 + int64(packedIdle) + int64(time.Second)
	if _, ok := p.shard(hot.name).get(hot, m, later-int64(time.Second)); !ok {
		t.Fatal("entry just added is missing")
	}
	for i := 0; i < 200; i++ {
		k := key("new", i)
		p.shard(k.name).add(k, m, wire, later, p.shardCost)
	}
	if _, ok := p.shard(hot.name).get(hot, m, later); !ok {
		t.Fatal("an entry in use was dropped as idle")
	}
	if n := p.len(); n != 201 {
		t.Fatalf("%d entries, want the 200 new ones and the one in use", n)
	}
	if b, want := p.bytes(), 201*(&packedEntry{wire: wire}).cost(key("new", 100)); b < want-201*4 || b > want+201*4 {
		t.Fatalf("cost %d, want about %d", b, want)
	}
}

// len is the number of entries, for tests.
func (p *packedCache) len() int {
	n := 0
	for i := range p.shards {
		p.shards[i].mu.Lock()
		n += p.shards[i].lru.Len()
		p.shards[i].mu.Unlock()
	}
	return n
}

// bytes is the cost of all entries, for tests.
func (p *packedCache) bytes() int64 {
	var n int64
	for i := range p.shards {
		p.shards[i].mu.Lock()
		n += p.shards[i].bytes
		p.shards[i].mu.Unlock()
	}
	return n
}

// TestPackedCacheConcurrentReplace: readers on several cores replace the
// entry of one question at once (a Service that changed, asked from every
// reader). The shard's byte count must stay the cost of what it holds;
// when it drifted upward (Remove and Add under different locks), the shard
// ended up over its budget with a handful of entries and evicted itself
// empty on every add.
func TestPackedCacheConcurrentReplace(t *testing.T) {
	const budget = 1 << 20
	p := newPackedCache(1024, budget)
	now := time.Now().UnixNano()
	keys := []packedKey{
		{name: "web.team-a.svc.cluster.local.", qtype: dns.TypeA},
		{name: "web.team-a.svc.cluster.local.", qtype: dns.TypeAAAA},
		{name: "db.team-b.svc.cluster.local.", qtype: dns.TypeA},
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				k := keys[(g+i)%len(keys)]
				wire := make([]byte, 50+(g*131+i*17)%900)
				p.shard(k.name).add(k, new(dns.Msg), wire, now, p.shardCost)
			}
		}()
	}
	wg.Wait()
	var want int64
	for _, k := range keys {
		if e, ok := p.shard(k.name).peekEntry(k); ok {
			want += e.cost(k)
		}
	}
	if got := p.bytes(); got != want {
		t.Fatalf("byte count %d after concurrent replacements, want %d (the cost of the %d entries held)", got, want, p.len())
	}
	if n := p.len(); n != len(keys) {
		t.Fatalf("%d entries after concurrent replacements, want %d", n, len(keys))
	}
}

// peekEntry returns k's entry without touching it, for tests.
func (sh *packedShard) peekEntry(k packedKey) (*packedEntry, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lru.Peek(k)
}
