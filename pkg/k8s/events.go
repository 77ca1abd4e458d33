package k8s

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// touch records a change to the cluster zone: the SOA serial is the Unix
// time of the last change, as in CoreDNS. The shared negative answers
// carry the SOA, so they are rebuilt when the serial moves (at most once a
// second) or when force is set (the NS data changed). Called with wmu
// held.
func (ix *Index) touch(force bool) {
	ix.changed(&ix.lastChange, ix.zoneMsg.Load().serial, force)
}

// changed records a change to zones whose SOA serial is *last, the time of
// their last change, and serial the one their shared answers carry now.
// Called with wmu held.
func (ix *Index) changed(last *time.Time, serial uint32, force bool) {
	// After the change is in place: a reader that built an answer from the
	// old state read the old generation first (Generation).
	ix.gen.Add(1)
	ix.counters.events++
	*last = ix.now()
	if force || uint32(last.Unix()) != serial {
		ix.rebuildZone()
	}
}

// eventObjects reads an informer event's objects as T (old nil: an add;
// cur nil: a delete): cur, and ref, the one that names the object. ok is
// false when there is nothing to apply: an update that changed nothing
// the index keeps (equal), or no object of type T.
func eventObjects[T comparable](old, cur any, equal func(a, b T) bool) (c, ref T, ok bool) {
	var none T
	c, _ = cur.(T)
	o, _ := old.(T)
	if c != none && o != none && equal(c, o) {
		return none, none, false
	}
	ref = c
	if ref == none {
		ref = o
	}
	return c, ref, ref != none
}

// svcStore is one zone kind's services and their EndpointSlices as the
// writers keep them, under Index.wmu: the cluster zone's Services, or the
// multicluster zones' ServiceImports.
type svcStore struct {
	svcs       map[string]*service         // key "name.ns"
	bySvc      map[string][]*endpointSlice // key "name.ns", sorted by slice name
	sliceByKey map[string]*endpointSlice   // key "ns/name"
}

func newSvcStore() svcStore {
	return svcStore{svcs: map[string]*service{}, bySvc: map[string][]*endpointSlice{}, sliceByKey: map[string]*endpointSlice{}}
}

// putService stores s, the service of key (nil: deleted), and returns the
// one it replaces.
func (st *svcStore) putService(key string, s *service) (prev *service) {
	prev = st.svcs[key]
	if s != nil {
		st.svcs[key] = s
	} else {
		delete(st.svcs, key)
	}
	return prev
}

// putSlice stores e, the EndpointSlice of skey (nil: deleted), in its
// service's set, and returns the one it replaces and the keys of the
// services whose sets changed ("" for none).
func (st *svcStore) putSlice(skey string, e *endpointSlice) (prev *endpointSlice, keys [2]string) {
	// The stored slice, not the event's old object, is what the indexes
	// hold: they may differ after a missed event and a relist.
	prev = st.sliceByKey[skey]
	if e != nil {
		st.sliceByKey[skey] = e
	} else {
		delete(st.sliceByKey, skey)
	}
	if prev != nil && prev.service != "" {
		k := prev.service + "." + prev.namespace
		st.bySvc[k] = removeSlice(st.bySvc[k], prev)
		if len(st.bySvc[k]) == 0 {
			delete(st.bySvc, k)
		}
		keys[0] = k
	}
	if e != nil && e.service != "" {
		k := e.service + "." + e.namespace
		st.bySvc[k] = insertSlice(st.bySvc[k], e)
		if k != keys[0] {
			keys[1] = k
		}
	}
	return prev, keys
}

// recordsFor builds, with build, the records of the services of keys
// that exist (putSlice's keys).
func (st *svcStore) recordsFor(keys [2]string, build func(key string, s *service, sl []*endpointSlice) *svcRecords) (recs [2]*svcRecords) {
	for i, k := range keys {
		if s := st.svcs[k]; k != "" && s != nil {
			recs[i] = build(k, s, st.bySvc[k])
		}
	}
	return recs
}

// publish puts recs, rebuilt for keys, in to (mu held); a nil entry
// leaves its key as it was.
func publish(to map[string]*svcRecords, keys [2]string, recs [2]*svcRecords) {
	for i, k := range keys {
		if recs[i] != nil {
			to[k] = recs[i]
		}
	}
}

// setRecords publishes r as the records of key, or deletes key when r is
// nil (mu held).
func setRecords(to map[string]*svcRecords, key string, r *svcRecords) {
	if r != nil {
		to[key] = r
	} else {
		delete(to, key)
	}
}

// serviceEvent applies a Service or ServiceImport event (old nil: add;
// cur nil: delete) to st and calls apply, under wmu, with the service's
// key, the service (nil: deleted) and the one it replaced.
func (ix *Index) serviceEvent(st *svcStore, old, cur any, apply func(key string, s, prev *service)) {
	s, ref, ok := eventObjects(old, cur, (*service).equal)
	if !ok {
		return
	}
	key := ref.name + "." + ref.namespace
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	apply(key, s, st.putService(key, s))
}

// sliceEvent applies an EndpointSlice event to st and calls apply, under
// wmu, with the slice (nil: deleted), the one it replaced and the keys of
// the services whose slice sets changed (putSlice).
func (ix *Index) sliceEvent(st *svcStore, old, cur any, apply func(e, prev *endpointSlice, keys [2]string)) {
	e, ref, ok := eventObjects(old, cur, (*endpointSlice).equal)
	if !ok {
		return
	}
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	prev, keys := st.putSlice(ref.namespace+"/"+ref.name, e)
	apply(e, prev, keys)
}

// onService applies a Service event.
func (ix *Index) onService(old, cur any) {
	ix.serviceEvent(&ix.svcStore, old, cur, func(key string, s, prev *service) {
		ix.objCount[objServices] = len(ix.svcs)
		var recs *svcRecords
		if s != nil {
			recs = ix.buildRecords(s, ix.bySvc[key], nil)
		}
		ix.mu.Lock()
		if prev != nil {
			for _, ip := range prev.ips {
				ix.clusterIPs.remove(ip, key)
			}
		}
		if recs != nil {
			for _, ip := range s.ips {
				ix.clusterIPs.add(ip, key)
			}
		}
		setRecords(ix.records, key, recs)
		ix.mu.Unlock()
		ix.touch(key == ix.dnsSvcKey)
	})
}

// onSlice applies an EndpointSlice event.
func (ix *Index) onSlice(old, cur any) {
	ix.sliceEvent(&ix.svcStore, old, cur, func(e, prev *endpointSlice, keys [2]string) {
		ix.objCount[objSlices] = len(ix.sliceByKey)
		recs := ix.recordsFor(keys, func(k string, s *service, sl []*endpointSlice) *svcRecords {
			return ix.buildRecords(s, sl, ix.peekRecords(k))
		})
		ix.mu.Lock()
		if prev != nil && prev.service != "" {
			for i := range prev.len() {
				ix.epIPs.remove(prev.ip(i), epRef{prev, int32(i)})
			}
			ix.endpoints -= prev.len()
		}
		if e != nil && e.service != "" {
			for i := range e.len() {
				ix.epIPs.add(e.ip(i), epRef{e, int32(i)})
			}
			ix.endpoints += e.len()
		}
		publish(ix.records, keys, recs)
		ix.mu.Unlock()
		ix.touch(false)
	})
}

// peekRecords returns the published records of key. Called with wmu
// held: only writers publish, so no read lock is needed against them.
func (ix *Index) peekRecords(key string) *svcRecords {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.records[key]
}

func insertSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	i, _ := slices.BinarySearchFunc(s, e, func(a, b *endpointSlice) int { return cmp.Compare(a.name, b.name) })
	return slices.Insert(slices.Clip(s), i, e)
}

func removeSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	// Copy: published records share the old slice.
	out := make([]*endpointSlice, 0, len(s))
	for _, x := range s {
		if x != e {
			out = append(out, x)
		}
	}
	return out
}

// onNamespace applies a Namespace event. Whether a namespace exists and
// is exposed (Namespaces, NamespaceLabels) decides between NXDOMAIN and an
// answer at query time, so nothing is rebuilt.
func (ix *Index) onNamespace(old, cur any) {
	n, _ := cur.(*namespace)
	o, _ := old.(*namespace)
	if n != nil && o != nil && ix.cfg.nsSel == nil {
		return // only existence matters; labels are not kept
	}
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	ix.mu.Lock()
	if n != nil && ix.cfg.exposes(n.name, n.labels) {
		ix.nss[n.name] = struct{}{}
	} else if n != nil {
		delete(ix.nss, n.name) // its labels no longer match
	} else if o != nil {
		delete(ix.nss, o.name)
	}
	ix.nsCount = len(ix.nss)
	ix.mu.Unlock()
	ix.objCount[objNamespaces] = ix.nsCount
	ix.touch(false)
}

// onPod applies a Pod event to the node-local index (PodNamespace) and, in
// verified mode, to the cluster-wide pod-record index.
func (ix *Index) onPod(old, cur any) {
	p, _ := cur.(*pod)
	o, _ := old.(*pod)
	if p != nil && o != nil && p.equal(o) {
		return
	}
	verified := ix.cfg.Pods == PodsVerified
	if p != nil && !p.local && !verified {
		// The field selector keeps other nodes' pods out; this guards
		// against servers (and fakes) that ignore it.
		p = nil
	}
	ref := p
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	key := ref.namespace + "/" + ref.name
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	prev := ix.podByKey[key]
	if p != nil {
		ix.podByKey[key] = p
	} else {
		delete(ix.podByKey, key)
	}
	ix.objCount[objPods] = len(ix.podByKey)
	ix.mu.Lock()
	if prev != nil {
		for _, ip := range prev.ips {
			ix.localPods.remove(ip, prev)
			ix.podIPs.remove(ip, prev)
		}
	}
	if p != nil {
		for _, ip := range p.ips {
			// A finished pod's address may already be a new pod's, and a
			// host-network pod's address is the node's: neither says which
			// namespace a query comes from.
			if p.local && !p.hostNetwork && !p.done {
				ix.localPods.add(ip, p)
			}
			// CoreDNS drops terminating pods from verified answers; we also
			// drop finished ones, whose address is released (CoreDNS keeps
			// them until they are deleted).
			if verified && !p.deleting && !p.done {
				ix.podIPs.add(ip, p)
			}
		}
	}
	ix.mu.Unlock()
	var was, is []netip.Addr
	if prev != nil && prev.local {
		was = prev.ips
	}
	if p != nil && p.local {
		is = p.ips
	}
	if len(was)+len(is) > 0 {
		ix.refreshPodNS(was, is)
		ix.podGen.Add(1)
	}
	if verified {
		ix.touch(false)
	}
}
