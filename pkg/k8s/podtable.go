package k8s

import (
	"encoding/binary"
	"net/netip"
)

// podTable maps the addresses of this node's pods to their namespaces, for
// PodNamespace: every query a pod sends that may be a search-path
// expansion asks it. It is built whole whenever those pods change (rarely,
// and a node has a few hundred at most) and never written after, so the
// readers of every socket read it without a lock; open addressing over
// slots of 32 bytes makes a lookup read one or two cache lines, where a Go
// map of netip.Addr read about ten (its header, control words, slots, the
// key's hash).
type podTable struct {
	mask  uint64
	slots []podSlot
}

// podSlot is one address (16-byte form) and its pod's namespace; an empty
// namespace marks an empty slot (a namespace is never empty).
type podSlot struct {
	addr [16]byte
	ns   string
}

// newPodTable builds the table of m, with at least twice as many slots as
// addresses.
func newPodTable(m map[netip.Addr]string) *podTable {
	n := 8
	for n < 2*len(m) {
		n <<= 1
	}
	t := &podTable{mask: uint64(n - 1), slots: make([]podSlot, n)}
	for a, ns := range m {
		k := a.As16()
		i := podHash(k) & t.mask
		for t.slots[i].ns != "" {
			i = (i + 1) & t.mask
		}
		t.slots[i] = podSlot{addr: k, ns: ns}
	}
	return t
}

// podHash mixes the address's two halves (an IPv4 address lives in the
// second).
func podHash(k [16]byte) uint64 {
	h := binary.LittleEndian.Uint64(k[:8]) ^ binary.LittleEndian.Uint64(k[8:])
	h *= 0x9E3779B97F4A7C15
	return h ^ h>>29
}

func (t *podTable) get(a netip.Addr) (string, bool) {
	k := a.As16()
	for i := podHash(k) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.ns == "" {
			return "", false
		}
		if s.addr == k {
			return s.ns, true
		}
	}
}
