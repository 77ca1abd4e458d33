package k8s

import (
	"net/netip"
	"slices"
)

// epRef names one ready endpoint address: eps[i] of a slice.
type epRef struct {
	sl *endpointSlice
	i  int32
}

// addrIndex maps an address to the objects that claim it. Claims are rare
// to collide (IP reuse, transitions), so each value is a short slice.
type addrIndex[T comparable] map[netip.Addr][]T

func (m addrIndex[T]) add(a netip.Addr, v T) {
	m[a] = append(m[a], v)
}

func (m addrIndex[T]) remove(a netip.Addr, v T) {
	s := m[a]
	i := slices.Index(s, v)
	if i < 0 {
		return
	}
	if len(s) == 1 {
		delete(m, a)
		return
	}
	m[a] = slices.Delete(s, i, i+1)
}

// epIndex maps endpoint addresses to endpoints. It is the index with one
// entry per endpoint address (100k in a large cluster), so it is laid out
// for size: the first endpoint of an address inline, keyed by 4 bytes for
// IPv4 (24 bytes a slot), the rare further claimants of an address in a
// second map.
type epIndex struct {
	v4   map[[4]byte]epRef
	v6   map[[16]byte]epRef
	more map[netip.Addr][]epRef
}

func newEPIndex() epIndex {
	return epIndex{v4: make(map[[4]byte]epRef), v6: make(map[[16]byte]epRef), more: make(map[netip.Addr][]epRef)}
}

func (x epIndex) first(a netip.Addr) (epRef, bool) {
	if a.Is4() {
		r, ok := x.v4[a.As4()]
		return r, ok
	}
	r, ok := x.v6[a.As16()]
	return r, ok
}

func (x epIndex) setFirst(a netip.Addr, r epRef) {
	if a.Is4() {
		x.v4[a.As4()] = r
	} else {
		x.v6[a.As16()] = r
	}
}

func (x epIndex) add(a netip.Addr, r epRef) {
	if _, ok := x.first(a); !ok {
		x.setFirst(a, r)
		return
	}
	x.more[a] = append(x.more[a], r)
}

func (x epIndex) remove(a netip.Addr, r epRef) {
	more := x.more[a]
	if f, ok := x.first(a); ok && f == r {
		if len(more) == 0 {
			if a.Is4() {
				delete(x.v4, a.As4())
			} else {
				delete(x.v6, a.As16())
			}
			return
		}
		x.setFirst(a, more[0])
		more = more[1:]
	} else if i := slices.Index(more, r); i >= 0 {
		more = slices.Delete(slices.Clone(more), i, i+1)
	} else {
		return
	}
	if len(more) == 0 {
		delete(x.more, a)
	} else {
		x.more[a] = more
	}
}

// get appends the endpoints of a to buf.
func (x epIndex) get(a netip.Addr, buf []epRef) []epRef {
	r, ok := x.first(a)
	if !ok {
		return buf
	}
	return append(append(buf, r), x.more[a]...)
}
