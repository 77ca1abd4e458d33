package cache

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"unsafe"

	"github.com/miekg/dns"
)

func TestWireNameIs(t *testing.T) {
	packName := func(name string) []byte {
		buf := make([]byte, 300)
		n, err := dns.PackDomainName(name, buf, 0, nil, false)
		if err != nil {
			t.Fatalf("packing %q: %v", name, err)
		}
		return append(buf[:n:n], 0xAB, 0xCD) // what follows the name
	}
	cases := []struct {
		wire, name string
		want       bool
	}{
		{"www.example.test.", "www.example.test.", true},
		{".", ".", true},
		{"example.test.", "www.example.test.", false},
		{"www.example.test.", "example.test.", false},
		{"www.example.test.", "ww.example.test.", false},
		{"www.example.test.", "www.example.tesu.", false},
		{"www.example.test.", "www.example.test.x.", false},
		{"a.b.", "ab.", false},
		{"ab.", "a.b.", false},
		{`a\.b.example.`, `a\.b.example.`, true}, // a dot inside a label
		{`a\.b.example.`, "a.b.example.", false},
		{"a.b.example.", `a\.b.example.`, false},
		{`sp\032ace.example.`, `sp\032ace.example.`, true},
	}
	for _, c := range cases {
		m := packName(c.wire)
		end, ok := wireNameIs(m, 0, c.name)
		if ok != c.want {
			t.Errorf("wire %q, name %q: %v, want %v", c.wire, c.name, ok, c.want)
		}
		if ok && end != len(m)-2 {
			t.Errorf("wire %q: name ends at %d, want %d", c.wire, end, len(m)-2)
		}
	}
	// Truncated or malformed wire never matches and never panics.
	full := packName("www.example.test.")
	for i := 0; i < len(full)-2; i++ {
		if _, ok := wireNameIs(full[:i], 0, "www.example.test."); ok {
			t.Errorf("matched a name cut at %d bytes", i)
		}
	}
	if _, ok := wireNameIs([]byte{0xC0, 0x0C}, 0, "x."); ok {
		t.Error("matched a compression pointer")
	}
}

// TestHashCollisionIsAMiss: an entry found under a key's hash but stored
// for another key (a 64-bit collision) is a miss, never the other key's
// answer.
func TestHashCollisionIsAMiss(t *testing.T) {
	c, err := New(Config{Size: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := new(dns.Msg)
	r.SetQuestion("a.example.test.", dns.TypeA)
	r.Response = true
	rr, _ := dns.NewRR("a.example.test. 60 IN A 192.0.2.1")
	r.Answer = []dns.RR{rr}
	ka := Key{Name: "a.example.test.", Type: dns.TypeA, Class: dns.ClassINET}
	c.Put(ka, r)
	if _, ok := c.get(&ka); !ok {
		t.Fatal("stored entry not found")
	}
	e, _ := c.get(&ka)
	for _, kb := range []Key{
		{Name: "b.example.test.", Type: dns.TypeA, Class: dns.ClassINET},
		{Name: "a.example.test.", Type: dns.TypeAAAA, Class: dns.ClassINET},
		{Name: "a.example.test.", Type: dns.TypeA, Class: dns.ClassCHAOS},
		{Name: "a.example.test.", Type: dns.TypeA, Class: dns.ClassINET, DO: true},
		{Name: "a.example.test.", Type: dns.TypeA, Class: dns.ClassINET, CD: true},
	} {
		// Plant a's entry where kb hashes, as a collision would.
		sh, h := c.slot(&kb)
		sh.add(h, e, &c.gen, c.gen.Load())
		if got, ok := c.get(&kb); ok {
			t.Errorf("key %+v found the entry stored for %+v (%p)", kb, ka, got)
		}
		if out, _, ok := c.AppendHit(nil, kb.Name, kb.Type, kb.Class, kb.DO, kb.CD); ok {
			t.Errorf("key %+v: AppendHit answered with a's reply (%d bytes)", kb, len(out))
		}
		sh.mu.Lock()
		sh.lru.Remove(h)
		sh.mu.Unlock()
	}
}

// TestEntrySize: the entry fits the 64-byte size class (a full cache of
// 100k entries pays this per entry).
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 64 {
		t.Fatalf("entry is %d bytes, want at most 64", n)
	}
}

// TestTTLOffsetsInSpareCapacity: the offsets kept after the packed reply
// point at every TTL, and a hit's copy gets the TTL at each.
func TestTTLOffsetsInSpareCapacity(t *testing.T) {
	r := new(dns.Msg)
	r.SetQuestion("multi.example.test.", dns.TypeA)
	r.Response = true
	for _, s := range []string{"multi.example.test. 60 IN A 192.0.2.1", "multi.example.test. 60 IN A 192.0.2.2"} {
		rr, _ := dns.NewRR(s)
		r.Answer = append(r.Answer, rr)
	}
	soa, _ := dns.NewRR("example.test. 60 IN SOA ns.example.test. host.example.test. 1 2 3 4 5")
	r.Ns = []dns.RR{soa}
	k := Key{Name: "multi.example.test.", Type: dns.TypeA, Class: dns.ClassINET}
	wire, err := pack(k, r, DefaultMaxEntryBytes)
	if err != nil {
		t.Fatal(err)
	}
	e := &entry{wire: wire}
	if n := len(e.ttlOffsets()); n != 6 {
		t.Fatalf("%d bytes of offsets, want 3 TTLs x 2", n)
	}
	b := append([]byte(nil), e.wire...)
	e.putTTLs(b, 4242)
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatal(err)
	}
	for _, rr := range append(m.Answer, m.Ns...) {
		if rr.Header().Ttl != 4242 {
			t.Fatalf("TTL of %v not patched", rr)
		}
	}
}

// TestByteCountConcurrentReplace: concurrent stores of the same keys with
// replies of different sizes (a popular name refreshed by several queries
// at once) leave each shard's byte count equal to the cost of what it
// holds. Run with -race.
func TestByteCountConcurrentReplace(t *testing.T) {
	c, err := New(Config{Size: 1000, MaxBytes: 1 << 20, Logger: quietLog()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := []string{"a.example.test.", "b.example.test.", "c.example.test."}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				name := names[(g+i)%len(names)]
				r := new(dns.Msg)
				r.SetQuestion(name, dns.TypeA)
				r.Response = true
				for j := 0; j <= (g*7+i)%20; j++ {
					rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A 192.0.2.%d", name, j+1))
					r.Answer = append(r.Answer, rr)
				}
				c.Put(KeyOf(r), r)
			}
		}()
	}
	wg.Wait()
	var held int64
	for _, sh := range c.shards {
		sh.mu.Lock()
		for _, h := range sh.lru.Keys() {
			e, _ := sh.lru.Peek(h)
			held += e.cost()
		}
		sh.mu.Unlock()
	}
	if st := c.Stats(); st.Bytes != held || st.Entries != len(names) {
		t.Fatalf("stats %+v: want %d entries costing %d bytes", st, len(names), held)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
