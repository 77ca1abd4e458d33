package cache_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// replyExchanger hands back a fixed reply (a copy, with the query's ID).
type replyExchanger struct{ m *dns.Msg }

func (e replyExchanger) Exchange(_ context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	r := e.m.Copy()
	r.Id = q.Id
	return r, nil
}

// FuzzAppendHit stores fuzzed upstream replies (whatever miekg/dns
// unpacks) through both ways in, Put and a miss resolved by Resolve, and
// serves them through both ways out: the wire hit path AppendHit (behind
// bytes already in dst, as the server calls it) and Resolve. A stored
// entry must come back as a message that unpacks, with the question asked,
// and TTLs no higher than the entry's lifetime; nothing may panic.
func FuzzAppendHit(f *testing.F) {
	seed := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	pos := new(dns.Msg)
	pos.SetQuestion("www.example.test.", dns.TypeA)
	pos.Response = true
	pos.Answer = []dns.RR{fuzzRR(f, "www.example.test. 300 IN A 192.0.2.1"), fuzzRR(f, "www.example.test. 30 IN A 192.0.2.2")}
	pos.Extra = []dns.RR{fuzzRR(f, "ns.example.test. 300 IN A 192.0.2.53")}
	pos.SetEdns0(1232, true)
	seed(pos)
	nx := new(dns.Msg)
	nx.SetQuestion("Nx.Example.Test.", dns.TypeAAAA)
	nx.Response, nx.Rcode = true, dns.RcodeNameError
	nx.Ns = []dns.RR{fuzzRR(f, "example.test. 3600 IN SOA ns.example.test. h.example.test. 1 2 3 4 60")}
	seed(nx)
	cn := new(dns.Msg)
	cn.SetQuestion("alias.example.test.", dns.TypeA)
	cn.Response = true
	cn.Compress = true
	cn.Answer = []dns.RR{fuzzRR(f, "alias.example.test. 60 IN CNAME www.example.test."), fuzzRR(f, "www.example.test. 60 IN A 192.0.2.1")}
	seed(cn)
	sf := new(dns.Msg)
	sf.SetQuestion("fail.example.test.", dns.TypeMX)
	sf.Response, sf.Rcode = true, dns.RcodeServerFailure
	seed(sf)

	f.Fuzz(func(t *testing.T, wire []byte, viaResolve bool) {
		r := new(dns.Msg)
		if err := r.Unpack(wire); err != nil || len(r.Question) != 1 {
			return
		}
		c, err := cache.New(cache.Config{Size: 4, Logger: quiet, PrefetchHits: -1}, replyExchanger{r})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		q := new(dns.Msg)
		q.SetQuestion(r.Question[0].Name, r.Question[0].Qtype)
		q.Question[0].Qclass = r.Question[0].Qclass
		q.CheckingDisabled = r.CheckingDisabled
		do := false
		if o := r.IsEdns0(); o != nil && o.Do() {
			do = true
			q.SetEdns0(1232, true)
		}
		k := cache.KeyOf(q)
		if viaResolve {
			if _, _, _, err := resolveFor(c, context.Background(), q); err != nil {
				return
			}
		} else {
			c.Put(k, r)
		}
		prefix := []byte{0xde, 0xad, 0xbe, 0xef}
		out, rcode, ok := c.AppendHit(append([]byte(nil), prefix...), k.Name, k.Type, k.Class, do, k.CD)
		if !ok {
			if c.Len() != 0 {
				// Stored but not served fresh: only a zero lifetime can do
				// that, and zero lifetimes are not stored.
				t.Fatalf("entry stored but AppendHit missed")
			}
			return
		}
		if string(out[:len(prefix)]) != string(prefix) {
			t.Fatalf("AppendHit overwrote dst")
		}
		hit := out[len(prefix):]
		if binary.BigEndian.Uint16(hit) != 0 {
			t.Fatalf("stored reply has ID %d, want 0", binary.BigEndian.Uint16(hit))
		}
		m := new(dns.Msg)
		if err := m.Unpack(hit); err != nil {
			t.Fatalf("hit does not unpack: %v\n% x", err, hit)
		}
		if m.Rcode != rcode || rcode != r.Rcode {
			t.Fatalf("hit rcode %d (reported %d), stored %d", m.Rcode, rcode, r.Rcode)
		}
		if len(m.Question) != 1 || m.Question[0].Name != k.Name || m.Question[0].Qtype != k.Type || m.Question[0].Qclass != k.Class {
			t.Fatalf("hit question %v, key %+v", m.Question, k)
		}
		if m.IsEdns0() != nil {
			t.Fatalf("stored reply carries an OPT")
		}
		maxTTL := uint32(time.Hour / time.Second)
		for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range sec {
				if rr.Header().Ttl > maxTTL {
					t.Fatalf("TTL %d over the 1h clamp: %v", rr.Header().Ttl, rr)
				}
				if rr.Header().Name != strings.ToLower(rr.Header().Name) {
					t.Fatalf("stored owner name not lower-case: %v", rr)
				}
			}
		}
		// The slow way out agrees.
		res, fromCache, stale, err := resolveFor(c, context.Background(), q)
		if err != nil || !fromCache || stale {
			t.Fatalf("Resolve after a hit: fromCache %v stale %v err %v", fromCache, stale, err)
		}
		if res.Id != q.Id || len(res.Answer) != len(m.Answer) || len(res.Ns) != len(m.Ns) {
			t.Fatalf("Resolve reply differs from the hit:\n%v\n%v", res, m)
		}
	})
}

func fuzzRR(tb testing.TB, s string) dns.RR {
	tb.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		tb.Fatal(err)
	}
	return rr
}
