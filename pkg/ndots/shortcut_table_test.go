package ndots

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// tableEntry is an entry of t for name, with a decision alive until
// expires (unix nanoseconds) and a reply of size bytes.
func tableEntry(t *shortcutTable, name string, expires int64, size int) *scEntry {
	k := scKey{name: name, qtype: dns.TypeA}
	return &scEntry{h: t.hash(k), key: k, memo: &decision{expires: expires}, wire: make([]byte, size)}
}

// TestShortcutTable: an entry is found by its key only; a new entry of the
// same key replaces it; the byte count follows every change; past the
// budget the table sheds entries until it fits; a full bucket reuses its
// dead entries' slots first.
func TestShortcutTable(t *testing.T) {
	now := time.Now().UnixNano()
	live := now + int64(time.Hour)
	tb := newShortcutTable(64, 1<<20)
	a := tableEntry(tb, "a.example.", live, 100)
	tb.add(a, now)
	if got := tb.get(a.h, a.key); got != a {
		t.Fatalf("get = %p, want the entry added", got)
	}
	other := scKey{name: "a.example.", qtype: dns.TypeAAAA}
	if got := tb.get(tb.hash(other), other); got != nil {
		t.Fatalf("another type found %p", got)
	}
	a2 := tableEntry(tb, "a.example.", live, 300)
	tb.add(a2, now)
	if got := tb.get(a.h, a.key); got != a2 || tb.len() != 1 || tb.bytes.Load() != a2.cost() {
		t.Fatalf("after a replacement: get %p (want %p), %d entries, %d bytes (want %d)", got, a2, tb.len(), tb.bytes.Load(), a2.cost())
	}
	tb.remove(a)
	if tb.len() != 1 {
		t.Fatal("removing a replaced entry removed its successor")
	}
	tb.remove(a2)
	if tb.len() != 0 || tb.bytes.Load() != 0 {
		t.Fatalf("after remove: %d entries, %d bytes", tb.len(), tb.bytes.Load())
	}

	// The budget: 20 entries of about 10 KB in a 64 KB table.
	small := newShortcutTable(64, 64<<10)
	for i := range 20 {
		small.add(tableEntry(small, "n"+strconv.Itoa(i)+".example.", live, 10<<10), now)
		if b := small.bytes.Load(); b > 64<<10 {
			t.Fatalf("after %d entries: %d bytes, budget %d", i+1, b, 64<<10)
		}
	}
	n, sum := 0, int64(0)
	for i := range small.buckets {
		for j := range small.buckets[i].slots {
			if e := small.buckets[i].slots[j].Load(); e != nil {
				n++
				sum += e.cost()
			}
		}
	}
	if n == 0 || sum != small.bytes.Load() {
		t.Fatalf("%d entries of %d bytes, counted %d", n, sum, small.bytes.Load())
	}

	// One bucket full of dead decisions: a new entry takes a dead one's
	// slot, not a live one's.
	one := &shortcutTable{seed: tb.seed, buckets: make([]scBucket, 1), budget: 1 << 20}
	var kept []*scEntry
	for i := range scWays {
		exp := now - 1 // dead
		if i == 0 {
			exp = live
		}
		e := tableEntry(one, "d"+strconv.Itoa(i)+".example.", exp, 10)
		one.add(e, now)
		kept = append(kept, e)
	}
	one.add(tableEntry(one, "new.example.", live, 10), now)
	if one.get(kept[0].h, kept[0].key) != kept[0] {
		t.Fatal("a live entry made room while dead ones were there")
	}
}

// TestShortcutTableConcurrent: readers and writers at once (run with
// -race): every entry found is the one asked for, and the byte count
// matches what the table holds once they are done.
func TestShortcutTableConcurrent(t *testing.T) {
	now := time.Now().UnixNano()
	tb := newShortcutTable(256, 16<<10)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				name := "c" + strconv.Itoa((i*7+w)%300) + ".example."
				k := scKey{name: name, qtype: dns.TypeA}
				h := tb.hash(k)
				if e := tb.get(h, k); e != nil && e.key != k {
					t.Errorf("get %q found %q", name, e.key.name)
					return
				}
				switch i % 3 {
				case 0:
					tb.add(tableEntry(tb, name, now+int64(time.Hour), 100+i%500), now)
				case 1:
					if e := tb.get(h, k); e != nil {
						tb.remove(e)
					}
				}
			}
		}()
	}
	wg.Wait()
	var sum int64
	for i := range tb.buckets {
		for j := range tb.buckets[i].slots {
			sum += tb.buckets[i].slots[j].Load().cost()
		}
	}
	if sum != tb.bytes.Load() {
		t.Fatalf("the table holds %d bytes, counted %d", sum, tb.bytes.Load())
	}
}
