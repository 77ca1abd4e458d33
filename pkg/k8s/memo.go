package k8s

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/miekg/dns"
)

// Answers assembled per query — pod records and PTR records — are kept in
// a small memo so that a name asked again gets the same shared message:
// the server keeps replies packed by message identity, so a repeated pod
// or PTR query is then a copy of stored wire bytes with no allocation,
// like a bare Service name.
//
// The memo is bounded by its slot count, not by traffic: pod names can be
// any address in insecure mode, and PTR queries any address of the
// cluster. It is a two-way set-associative table of atomic pointers, so a
// lookup takes no lock; an insert replaces the stale or the older of its
// two candidate slots. A name that loses its slot is assembled again on
// its next query: the cost of a miss is what every query cost before.

// answerMemoSlots bounds the memo: about 350 bytes a slot when full
// (message, record, owner name), some 700 KB.
const answerMemoSlots = 2048

// anyGen marks an answer that stays valid whatever changes in the index:
// a pod record's content depends only on its name, and whether it exists
// is decided per query before the memo is read.
const anyGen = ^uint64(0)

type memoAnswer struct {
	name  string // lower-case FQDN, owned
	qtype uint16
	gen   uint64 // Index.Generation the answer was built at, or anyGen
	msg   *dns.Msg
}

type answerMemo struct {
	seed  maphash.Seed
	slots [answerMemoSlots]atomic.Pointer[memoAnswer]
}

func newAnswerMemo() *answerMemo { return &answerMemo{seed: maphash.MakeSeed()} }

func (m *answerMemo) pair(name string, qtype uint16) (a, b *atomic.Pointer[memoAnswer]) {
	h := maphash.String(m.seed, name) ^ uint64(qtype)*0x9E3779B97F4A7C15
	i := h % answerMemoSlots
	return &m.slots[i], &m.slots[i^1]
}

// get returns the answer kept for (name, qtype) if it was built at gen (or
// holds in every generation).
func (m *answerMemo) get(name string, qtype uint16, gen uint64) *dns.Msg {
	a, b := m.pair(name, qtype)
	for _, p := range [2]*atomic.Pointer[memoAnswer]{a, b} {
		if e := p.Load(); e != nil && e.qtype == qtype && e.name == name && (e.gen == anyGen || e.gen == gen) {
			return e.msg
		}
	}
	return nil
}

// put keeps msg for (name, qtype), name being a string the caller owns
// (an owner name of msg, never the query's buffer).
func (m *answerMemo) put(name string, qtype uint16, gen uint64, msg *dns.Msg) {
	a, b := m.pair(name, qtype)
	e := &memoAnswer{name: name, qtype: qtype, gen: gen, msg: msg}
	ea := a.Load()
	switch {
	case ea == nil || (ea.gen != anyGen && ea.gen != gen) || (ea.name == name && ea.qtype == qtype):
		a.Store(e)
	default:
		// Both taken by current answers: the second slot goes, so the
		// first keeps what it holds and an older entry is not stuck
		// behind a name asked once.
		b.Store(e)
	}
}
