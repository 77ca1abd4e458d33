package cache_test

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cache"
)

// nx is an NXDOMAIN for name with an SOA (a storable denial).
func nx(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	m.Rcode = dns.RcodeNameError
	soa, err := dns.NewRR(". 300 IN SOA a. b. 1 2 3 4 60")
	if err != nil {
		panic(err)
	}
	m.Ns = []dns.RR{soa}
	return m
}

// Denials (CoreDNS's cache type "denial") are counted apart from answers
// in entries, hits and evictions, and follow replacement both ways.
func TestDenialFigures(t *testing.T) {
	c := newCache(t, cache.Config{Size: 4}, newClock(), nil)
	c.Put(key("ok.example."), a("ok.example."))
	c.Put(key("nx1.example."), nx("nx1.example."))
	c.Put(key("nx2.example."), nx("nx2.example."))
	if st := c.Stats(); st.Entries != 3 || st.DenialEntries != 2 {
		t.Fatalf("stats %+v: want 3 entries, 2 denials", st)
	}
	for _, n := range []string{"ok.example.", "nx1.example.", "nx1.example."} {
		if _, _, ok := c.AppendHit(nil, n, dns.TypeA, dns.ClassINET, false, false); !ok {
			t.Fatalf("%s not cached", n)
		}
	}
	if _, _, ok := c.AppendHit(nil, "nx2.example.", dns.TypeA, dns.ClassINET, false, false); !ok {
		t.Fatal("nx2 not cached")
	}
	if st := c.Stats(); st.Hits != 4 || st.DenialHits != 3 {
		t.Errorf("stats %+v: want 4 hits, 3 of them denials", st)
	}
	// A denial replaced by an answer and back.
	c.Put(key("nx1.example."), a("nx1.example."))
	if st := c.Stats(); st.Entries != 3 || st.DenialEntries != 1 {
		t.Errorf("after replacing a denial by an answer: %+v", st)
	}
	c.Put(key("ok.example."), nx("ok.example."))
	if st := c.Stats(); st.Entries != 3 || st.DenialEntries != 2 {
		t.Errorf("after replacing an answer by a denial: %+v", st)
	}
	// Fill with answers: the denials are evicted, and counted so.
	for i := range 8 {
		n := fmt.Sprintf("fill%d.example.", i)
		c.Put(key(n), a(n))
	}
	st := c.Stats()
	if st.Entries != 4 || st.DenialEntries != 0 || st.Evictions != 7 || st.DenialEvictions != 2 {
		t.Errorf("after filling with answers: %+v; want 4 entries, no denial, 7 evictions of which 2 denials", st)
	}
}

// Stores of one key racing with different kinds leave the denial count
// exact: it is kept per shard, under the lock that stores and evicts.
func TestDenialEntriesExactUnderRaces(t *testing.T) {
	c := newCache(t, cache.Config{Size: 64}, newClock(), nil)
	const keys, writers, rounds = 40, 8, 300
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range rounds {
				n := fmt.Sprintf("k%d.example.", (i*7+w)%keys)
				if (i+w)%2 == 0 {
					c.Put(key(n), nx(n))
				} else {
					c.Put(key(n), a(n))
				}
			}
		}()
	}
	for range writers {
		<-done
	}
	// (A shard may have evicted some keys: the hash seed is random.)
	present, denials := 0, 0
	for i := range keys {
		n := fmt.Sprintf("k%d.example.", i)
		_, rcode, ok := c.AppendHit(nil, n, dns.TypeA, dns.ClassINET, false, false)
		if !ok {
			continue
		}
		present++
		if rcode == dns.RcodeNameError {
			denials++
		}
	}
	if st := c.Stats(); st.DenialEntries != denials || st.Entries != present {
		t.Errorf("stats %+v: want %d entries, %d denials", st, present, denials)
	}
}
