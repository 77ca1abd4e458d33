package k8s

import (
	"cmp"
	"net/netip"
	"slices"
)

// touch records a change: the SOA serial is the Unix time of the last
// change, as in CoreDNS. The shared negative answers carry the SOA, so they
// are rebuilt when the serial moves (at most once a second) or when force
// is set (the NS data changed). Called with wmu held.
func (ix *Index) touch(force bool) {
	// After the change is in place: a reader that built an answer from the
	// old state read the old generation first (Generation).
	ix.gen.Add(1)
	ix.counters.events++
	ix.lastChange = ix.now()
	if force || uint32(ix.lastChange.Unix()) != ix.zoneMsg.Load().serial {
		ix.rebuildZone()
	}
}

// onService applies a Service event (old nil: add; cur nil: delete).
func (ix *Index) onService(old, cur any) {
	s, _ := cur.(*service)
	o, _ := old.(*service)
	if s != nil && o != nil && s.equal(o) {
		return
	}
	ref := s
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	key := ref.name + "." + ref.namespace
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	prev := ix.svcs[key]
	if s != nil {
		ix.svcs[key] = s
	} else {
		delete(ix.svcs, key)
	}
	ix.objCount[objServices] = len(ix.svcs)
	var view *svcView
	if s != nil {
		view = ix.buildView(s, ix.bySvc[key], nil)
	}
	ix.mu.Lock()
	if prev != nil {
		for _, ip := range prev.ips {
			ix.clusterIPs.remove(ip, key)
		}
	}
	if view != nil {
		for _, ip := range s.ips {
			ix.clusterIPs.add(ip, key)
		}
		ix.views[key] = view
	} else {
		delete(ix.views, key)
	}
	ix.mu.Unlock()
	ix.touch(key == ix.dnsSvcKey)
}

// onSlice applies an EndpointSlice event.
func (ix *Index) onSlice(old, cur any) {
	e, _ := cur.(*endpointSlice)
	o, _ := old.(*endpointSlice)
	if e != nil && o != nil && e.equal(o) {
		return
	}
	ref := e
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	skey := ref.namespace + "/" + ref.name
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	// The stored slice, not the event's old object, is what the indexes
	// hold: they may differ after a missed event and a relist.
	prev := ix.sliceByKey[skey]
	if e != nil {
		ix.sliceByKey[skey] = e
	} else {
		delete(ix.sliceByKey, skey)
	}
	ix.objCount[objSlices] = len(ix.sliceByKey)

	// Service keys whose slice sets change.
	var keys [2]string
	if prev != nil && prev.service != "" {
		k := prev.service + "." + prev.namespace
		ix.bySvc[k] = removeSlice(ix.bySvc[k], prev)
		if len(ix.bySvc[k]) == 0 {
			delete(ix.bySvc, k)
		}
		keys[0] = k
	}
	if e != nil && e.service != "" {
		k := e.service + "." + e.namespace
		ix.bySvc[k] = insertSlice(ix.bySvc[k], e)
		if k != keys[0] {
			keys[1] = k
		}
	}
	var views [2]*svcView
	for i, k := range keys {
		if s := ix.svcs[k]; k != "" && s != nil {
			views[i] = ix.buildView(s, ix.bySvc[k], ix.peekView(k))
		}
	}

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
	for i, k := range keys {
		if views[i] != nil {
			ix.views[k] = views[i]
		}
	}
	ix.mu.Unlock()
	ix.touch(false)
}

// peekView returns the published view of key. Called with wmu held: only
// writers publish, so no read lock is needed against them.
func (ix *Index) peekView(key string) *svcView {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.views[key]
}

func insertSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	i, _ := slices.BinarySearchFunc(s, e, func(a, b *endpointSlice) int { return cmp.Compare(a.name, b.name) })
	return slices.Insert(slices.Clip(s), i, e)
}

func removeSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	// Copy: published views share the old slice.
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
