package k8s

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

var (
	// REFUSED, like CoreDNS: zone transfers are not served. CoreDNS sets
	// no AA bit on it, neither do we.
	refusedMsg  = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeRefused}}
	servfailMsg = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}
)

// maxChain bounds ExternalName CNAME chains inside the zone. CoreDNS stops
// adding CNAMEs once more than 10 precede, and then answers NODATA.
const maxChain = 10

// Lookup answers (name, qtype). name must be a lower-case FQDN; it is not
// retained (it may live in the caller's reused buffer). ok is false
// when the name is not the index's to answer: outside the zones and not
// the reverse name of an IP it knows, a non-PTR query for a reverse name,
// or a name that does not exist in a Config.Fallthrough zone.
//
// Semantics follow CoreDNS's kubernetes plugin (with the cluster zones and
// in-addr.arpa and ip6.arpa on its line, and by default `fallthrough
// in-addr.arpa ip6.arpa`), which implements the Kubernetes DNS
// specification v1.1.0; the comments below mark where we deliberately
// differ.
func (ix *Index) Lookup(name string, qtype uint16) (stage.Result, bool) {
	zm := ix.zoneOf(name)
	if zm == nil {
		return ix.lookupReverse(name, qtype)
	}
	if qtype == dns.TypeAXFR || qtype == dns.TypeIXFR {
		return stage.Result{Msg: refusedMsg}, true
	}
	if !ix.synced.Load() {
		// Never a false NXDOMAIN before the informers have synced.
		return stage.Result{Msg: servfailMsg, NotSynced: true}, true
	}
	ix.mu.RLock()
	m, ext := ix.resolve(zm, name, qtype, 0)
	ix.mu.RUnlock()
	if m == zm.nxdomain && ix.fallsThrough(name) {
		return stage.Result{}, false
	}
	return stage.Result{Msg: m, ExternalTarget: ext}, true
}

// zoneOf returns the shared answers of the zone name is in, cluster or
// multicluster, the longest when zones nest (as CoreDNS matches zones), or
// nil.
func (ix *Index) zoneOf(name string) *zoneMsgs {
	zs := ix.zoneMsg.Load()
	var best *zoneMsgs
	for _, zm := range zs.z {
		if dnsname.InZone(name, zm.zone) && (best == nil || len(zm.zone) > len(best.zone)) {
			best = zm
		}
	}
	for _, zm := range zs.mc {
		if dnsname.InZone(name, zm.zone) && (best == nil || len(zm.zone) > len(best.zone)) {
			best = zm
		}
	}
	return best
}

// fallsThrough reports whether a name error for name goes on to the cache
// and upstream (Config.Fallthrough).
func (ix *Index) fallsThrough(name string) bool {
	return dnsname.InZones(name, ix.cfg.Fallthrough)
}

// maxLabels is the longest name below the zone with a meaning:
// _port._proto.svc.ns.svc.
const maxLabels = 5

// resolve answers an in-zone name. depth counts the CNAMEs already in an
// ExternalName chain. Called with mu read-locked.
func (ix *Index) resolve(zm *zoneMsgs, name string, qtype uint16, depth int) (*dns.Msg, string) {
	if name == zm.zone {
		switch qtype {
		case dns.TypeSOA:
			return zm.soa, ""
		case dns.TypeNS:
			return zm.ns, ""
		}
		// Apex A/AAAA/TXT/...: NODATA. (CoreDNS answers TXT at the apex
		// with NXDOMAIN, contradicting its own SOA; we keep NODATA.)
		return zm.nodata, ""
	}
	if qtype == dns.TypeSOA {
		// CoreDNS answers SOA only at the apex and NODATA for every
		// other name of the zone, existing or not.
		return zm.nodata, ""
	}
	rel := name[:len(name)-len(zm.zone)-1]

	// Labels right to left, without allocating: lab[0] is "svc"/"pod".
	var lab [maxLabels]string
	n := 0
	for rest := rel; ; {
		if n == maxLabels {
			return zm.nxdomain, "" // too long to mean anything
		}
		i := strings.LastIndexByte(rest, '.')
		lab[n] = rest[i+1:]
		n++
		if i < 0 {
			break
		}
		rest = rest[:i]
	}

	if n == 1 {
		switch lab[0] {
		case "dns-version":
			if qtype == dns.TypeTXT {
				return zm.txt, ""
			}
			// CoreDNS answers other types here with NXDOMAIN, which
			// would deny the TXT to caches (RFC 8020); NODATA instead.
			return zm.nodata, ""
		case "svc", "pod":
			return zm.nodata, ""
		}
		return zm.nxdomain, ""
	}
	if n == 2 && lab[0] == "dns" && lab[1] == "ns" {
		// ns.dns.<zone>, the NS target when the DNS Service is absent.
		switch qtype {
		case dns.TypeA:
			return orNodata(zm.nsA, zm), ""
		case dns.TypeAAAA:
			return orNodata(zm.nsAAAA, zm), ""
		}
		return zm.nodata, ""
	}
	switch lab[0] {
	case "svc":
		return ix.resolveSvc(zm, name, rel, &lab, n, qtype, depth)
	case "pod":
		return ix.resolvePod(zm, name, &lab, n, qtype)
	}
	return zm.nxdomain, ""
}

func orNodata(m *dns.Msg, zm *zoneMsgs) *dns.Msg {
	if m == nil {
		return zm.nodata
	}
	return m
}

// resolveSvc answers <ns>.svc, <svc>.<ns>.svc, <endpoint>.<svc>.<ns>.svc
// and _<port>._<proto>.<svc>.<ns>.svc.
func (ix *Index) resolveSvc(zm *zoneMsgs, name, rel string, lab *[maxLabels]string, n int, qtype uint16, depth int) (*dns.Msg, string) {
	if _, ok := ix.nss[lab[1]]; !ok {
		return zm.nxdomain, "" // a missing namespace hides everything under it
	}
	if n == 2 {
		return zm.nodata, "" // <ns>.svc exists
	}
	// "<svc>.<ns>" is a contiguous part of rel: the map key, no allocation.
	end := len(rel) - len(lab[0]) - 1
	key := rel[end-len(lab[1])-1-len(lab[2]) : end]
	recs := ix.records
	if zm.mc {
		recs = ix.mcRecords
	}
	v := recs[key]
	if v == nil || !v.exists {
		// Also every name below a service that does not exist (an
		// empty headless service, an ignored empty one): CoreDNS skips
		// such a service for every name under it.
		return zm.nxdomain, ""
	}
	// In a multicluster zone two labels left of the service are an
	// endpoint and its cluster, unless one starts with '_' (a port).
	mcEndpoint := zm.mc && (n == 4 || n == 5 && !strings.HasPrefix(lab[3], "_") && !strings.HasPrefix(lab[4], "_"))
	if zm.mc && !mcEndpoint && v.svc.kind == kindClusterIP && len(v.svc.ports) == 0 {
		// A ClusterSetIP import's records are one per port and IP: one
		// without ports has none, and CoreDNS answers NXDOMAIN (a
		// Service always has a port, CoreDNS's sentinel).
		return zm.nxdomain, ""
	}
	if n == 3 && (qtype != dns.TypeSRV || v.svc.kind == kindExternal) {
		return ix.resolveBare(zm, v, name, qtype, depth)
	}
	if v.svc.kind == kindExternal {
		return zm.nxdomain, "" // no endpoint or port names under an ExternalName
	}
	// The answers assembled per query are kept in the service's records,
	// so a name asked again gets the same message (the server keeps
	// replies packed by message). A change to the service or its slices
	// builds new records and so drops them.
	memo := qtype == dns.TypeA || qtype == dns.TypeAAAA || qtype == dns.TypeSRV
	if memo {
		if m := v.memoGet(name, qtype); m != nil {
			return m, ""
		}
	}
	var m *dns.Msg
	switch {
	case n == 3:
		m, _ = ix.resolveBare(zm, v, name, qtype, depth)
	case mcEndpoint && n == 4:
		m = ix.resolveMCEndpoint(zm, v, name, lab[3], "", qtype)
	case mcEndpoint:
		m = ix.resolveMCEndpoint(zm, v, name, lab[4], lab[3], qtype)
	case n == 4:
		m = ix.resolveEndpoint(zm, v, name, lab[3], qtype)
	default: // 5
		m = ix.resolvePort(zm, v, name, strings.TrimPrefix(lab[4], "_"), strings.TrimPrefix(lab[3], "_"), qtype)
	}
	if memo && m != zm.nxdomain && m != zm.nodata {
		// Negative answers are not kept: any label can be asked, and
		// the memory must not grow with traffic.
		v.memoPut(qtype, m)
	}
	return m, ""
}

func (ix *Index) resolveBare(zm *zoneMsgs, v *svcRecords, name string, qtype uint16, depth int) (*dns.Msg, string) {
	if !v.exists {
		return zm.nxdomain, ""
	}
	zr := v.in(zm.idx)
	if v.svc.kind == kindExternal {
		switch qtype {
		case dns.TypeCNAME:
			return zr.cname, ""
		case dns.TypeA, dns.TypeAAAA:
			return ix.chase(zm, v, name, qtype, depth)
		}
		// CoreDNS answers only A, AAAA and CNAME with the CNAME; SRV,
		// TXT and other types of an ExternalName name are NODATA.
		return zm.nodata, ""
	}
	switch qtype {
	case dns.TypeA:
		return orNodata(zr.a, zm), ""
	case dns.TypeAAAA:
		return orNodata(zr.aaaa, zm), ""
	case dns.TypeSRV:
		var entries []srvEntry
		if v.svc.kind == kindClusterIP {
			entries = ix.clusterSRV(v, zm.idx, "", "", nil)
		} else {
			entries = ix.headlessSRV(v, zm.idx, "", "", nil)
		}
		if len(entries) == 0 {
			return zm.nodata, ""
		}
		return orNodata(ix.srvAnswer(strings.Clone(name), entries), zm), ""
	}
	return zm.nodata, ""
}

// chase answers A/AAAA for an ExternalName service: the CNAME, and either
// the target's answer when the target is in the zone asked, or
// ExternalTarget for the caller to resolve (as CoreDNS, which looks a
// target in another of its zones up through the server).
func (ix *Index) chase(zm *zoneMsgs, v *svcRecords, name string, qtype uint16, depth int) (*dns.Msg, string) {
	target := v.svc.external
	if target == name || depth > maxChain {
		return zm.nodata, "" // x CNAME x, or a chain too long: CoreDNS drops it
	}
	cname := v.in(zm.idx).cname
	if !dnsname.InZone(target, zm.zone) {
		return cname, target
	}
	m, ext := ix.resolve(zm, target, qtype, depth+1)
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
		// An in-zone target without data: CoreDNS drops the CNAME too.
		return zm.nodata, ""
	}
	ans := make([]dns.RR, 0, 1+len(m.Answer))
	ans = append(ans, cname.Answer[0])
	ans = append(ans, m.Answer...)
	return ix.answer(ans, nil), ext
}

// headlessSRV appends the SRV entries of a service's endpoints: every ready
// address times every port of its slice that matches (qport, qproto),
// targeting <endpoint>.<svc>.<ns>.svc.<zone zi>; at most maxAnswerSRV in
// all (the work of a query stops there too).
func (ix *Index) headlessSRV(v *svcRecords, zi int, qport, qproto string, out []srvEntry) []srvEntry {
	fqdn := v.in(zi).fqdn
	for _, e := range v.slices {
		for i := range e.len() {
			var target string
			for _, p := range e.ports {
				if !matchPort(qport, qproto, p) {
					continue
				}
				if len(out) == maxAnswerSRV {
					return out
				}
				if target == "" {
					target = e.label(i) + "." + fqdn
					if e.cluster != "" {
						// A multicluster endpoint is named in its
						// cluster: <endpoint>.<cluster>.<svc>...
						target = e.label(i) + "." + e.cluster + "." + fqdn
					}
				}
				out = append(out, srvEntry{target: target, ip: e.ip(i), port: p.port})
			}
		}
	}
	return out
}

// resolvePort answers _<port>._<proto>.<svc>.<ns>.svc. Like CoreDNS it
// answers A and AAAA too (the addresses behind the matching ports), and an
// empty label ("_") matches any port or protocol.
func (ix *Index) resolvePort(zm *zoneMsgs, v *svcRecords, name, qport, qproto string, qtype uint16) *dns.Msg {
	var entries []srvEntry
	if v.svc.kind == kindClusterIP {
		matched := false
		for _, p := range v.svc.ports {
			if matchPort(qport, qproto, p) {
				matched = true
				break
			}
		}
		if !matched {
			return zm.nxdomain
		}
		if qtype != dns.TypeSRV {
			return ix.addrAnswer(zm, name, qtype, v.svc.ips)
		}
		entries = ix.clusterSRV(v, zm.idx, qport, qproto, nil)
	} else {
		entries = ix.headlessSRV(v, zm.idx, qport, qproto, nil)
		if len(entries) == 0 {
			return zm.nxdomain
		}
	}
	switch qtype {
	case dns.TypeSRV:
		return orNodata(ix.srvAnswer(strings.Clone(name), entries), zm)
	case dns.TypeA, dns.TypeAAAA:
		ips := make([]netip.Addr, len(entries))
		for i, e := range entries {
			ips[i] = e.ip
		}
		return ix.addrAnswer(zm, name, qtype, ips)
	}
	return zm.nodata
}

// resolveEndpoint answers <endpoint>.<svc>.<ns>.svc, for headless and
// ClusterIP services alike (as CoreDNS does). The label is an endpoint's
// hostname or, for endpoints without one, its address with dashes.
func (ix *Index) resolveEndpoint(zm *zoneMsgs, v *svcRecords, name, label string, qtype uint16) *dns.Msg {
	var buf [4]epRef
	refs := append(buf[:0], v.hosts[label]...)
	if ip, ok := parseDashIP(label); ok {
		var ipBuf [4]epRef
		for _, r := range ix.epIPs.get(ip, ipBuf[:0]) {
			if r.sl.host(int(r.i)) == "" && r.sl.service == v.svc.name && r.sl.namespace == v.svc.namespace &&
				dashIP(ip) == label {
				refs = append(refs, r)
			}
		}
	}
	return ix.endpointAnswer(zm, name, qtype, refs)
}

// endpointAnswer answers name with refs, the endpoints it names: A or
// AAAA with their addresses, SRV with their ports (name the target),
// NXDOMAIN for none. A hostname may be shared by any number of endpoints:
// at most maxAnswerSRV of them answer.
func (ix *Index) endpointAnswer(zm *zoneMsgs, name string, qtype uint16, refs []epRef) *dns.Msg {
	if len(refs) == 0 {
		return zm.nxdomain
	}
	refs = refs[:min(len(refs), maxAnswerSRV)]
	switch qtype {
	case dns.TypeA, dns.TypeAAAA:
		ips := make([]netip.Addr, len(refs))
		for i, r := range refs {
			ips[i] = r.sl.ip(int(r.i))
		}
		return ix.addrAnswer(zm, name, qtype, ips)
	case dns.TypeSRV:
		owner := strings.Clone(name)
		var entries []srvEntry
		for _, r := range refs {
			for _, p := range r.sl.ports {
				if len(entries) < maxAnswerSRV {
					entries = append(entries, srvEntry{target: owner, ip: r.sl.ip(int(r.i)), port: p.port})
				}
			}
		}
		return orNodata(ix.srvAnswer(owner, entries), zm)
	}
	return zm.nodata
}

// addrAnswer answers A or AAAA at name with the addresses of that family,
// deduplicated; NODATA when there are none (or for any other type).
func (ix *Index) addrAnswer(zm *zoneMsgs, name string, qtype uint16, ips []netip.Addr) *dns.Msg {
	var ans []dns.RR
	owner := ""
	for i, ip := range ips {
		if (qtype == dns.TypeA) != ip.Is4() || (qtype != dns.TypeA && qtype != dns.TypeAAAA) {
			continue
		}
		dup := false
		for _, p := range ips[:i] {
			if p == ip {
				dup = true
				break
			}
		}
		if !dup {
			if owner == "" {
				owner = strings.Clone(name)
			}
			ans = append(ans, ix.addrRR(owner, ip))
		}
	}
	if len(ans) == 0 {
		return zm.nodata
	}
	return ix.answer(ans, nil)
}

// parseDashIP reads an address written with dashes, the way CoreDNS reads
// pod names: exactly three dashes and no "--" is IPv4, anything else is
// IPv6 with ':' written as '-'.
func parseDashIP(label string) (netip.Addr, bool) {
	if len(label) < 2 || len(label) > 45 {
		return netip.Addr{}, false
	}
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		return parseDashIPv4(label)
	}
	return parseDashIPv6(label)
}

// parseDashIPv6 reads an IPv6 address written with '-' for ':' (at most
// one "--" for "::"), as netip.ParseAddr reads the address with the
// colons put back, without allocating: it runs for every pod-shaped name.
// A v4-mapped address is returned as IPv4, as before.
func parseDashIPv6(label string) (netip.Addr, bool) {
	var ip [16]byte
	ellipsis := -1 // groups before "--"
	n, i := 0, 0   // groups read, position
	if strings.HasPrefix(label, "--") {
		ellipsis, i = 0, 2
	}
	for i < len(label) {
		v, digits := 0, 0
		for ; i < len(label); i++ {
			d, ok := hexDigit(label[i])
			if !ok {
				break
			}
			v = v<<4 | d
			digits++
		}
		if digits == 0 || digits > 4 || n == 8 {
			return netip.Addr{}, false
		}
		ip[2*n], ip[2*n+1] = byte(v>>8), byte(v)
		n++
		if i == len(label) {
			break
		}
		if label[i] != '-' {
			return netip.Addr{}, false
		}
		i++
		switch {
		case i < len(label) && label[i] == '-':
			if ellipsis >= 0 {
				return netip.Addr{}, false
			}
			ellipsis = n
			i++
		case i == len(label):
			return netip.Addr{}, false // a single trailing dash
		}
	}
	switch {
	case ellipsis < 0 && n != 8, ellipsis >= 0 && n == 8:
		// Eight groups without "--", or "--" standing for no group.
		return netip.Addr{}, false
	case ellipsis >= 0:
		// Move the groups after "--" to the end.
		gap := 2 * (8 - n)
		copy(ip[2*ellipsis+gap:], ip[2*ellipsis:2*n])
		clear(ip[2*ellipsis : 2*ellipsis+gap])
	}
	return netip.AddrFrom16(ip).Unmap(), true
}

func hexDigit(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10), true
	}
	return 0, false
}

// parseDashIPv4 reads a-b-c-d without allocating: it runs for every
// endpoint-shaped name, existing or not. Leading zeros are refused, as
// netip (and CoreDNS's net.ParseIP) refuse them.
func parseDashIPv4(label string) (netip.Addr, bool) {
	var b [4]byte
	for i := range 4 {
		j := strings.IndexByte(label, '-')
		part := label
		if i < 3 {
			part, label = label[:j], label[j+1:]
		}
		v, ok := dnsname.Octet(part)
		if !ok {
			return netip.Addr{}, false
		}
		b[i] = v
	}
	return netip.AddrFrom4(b), true
}

// resolvePod answers <ns>.pod and <a-b-c-d>.<ns>.pod per the pod mode.
// Longer names under pod are NXDOMAIN. (CoreDNS parses them as endpoint or
// port names and then ignores the extra labels, answering for the pod;
// those names are not in the specification.)
func (ix *Index) resolvePod(zm *zoneMsgs, name string, lab *[maxLabels]string, n int, qtype uint16) (*dns.Msg, string) {
	if ix.cfg.Pods == PodsDisabled {
		return zm.nxdomain, ""
	}
	ns := lab[1]
	if _, ok := ix.nss[ns]; !ok {
		return zm.nxdomain, ""
	}
	if n == 2 {
		return zm.nodata, ""
	}
	if n > 3 {
		return zm.nxdomain, ""
	}
	ip, ok := parseDashIP(lab[2])
	if !ok {
		return zm.nxdomain, ""
	}
	if ix.cfg.Pods == PodsVerified {
		found := false
		for _, p := range ix.podIPs[ip] {
			if p.namespace == ns {
				found = true
				break
			}
		}
		if !found {
			return zm.nxdomain, ""
		}
	}
	if (qtype == dns.TypeA && ip.Is4()) || (qtype == dns.TypeAAAA && ip.Is6()) {
		// The record depends on the name alone: kept across changes.
		if m := ix.answers.get(name, qtype, anyGen); m != nil {
			return m, ""
		}
		owner := strings.Clone(name)
		m := ix.answer([]dns.RR{ix.addrRR(owner, ip)}, nil)
		ix.answers.put(owner, qtype, anyGen, m)
		return m, ""
	}
	return zm.nodata, ""
}

// lookupReverse answers PTR queries for the addresses the index knows:
// a ClusterIP gets one PTR to its service, an endpoint address one PTR per
// endpoint, both named in the primary zone. Other PTR queries in the
// reverse zones are name errors, which go upstream (ok false) when a
// Config.Fallthrough zone holds them (by default the reverse zones, as
// with CoreDNS's `fallthrough in-addr.arpa ip6.arpa`) and are NXDOMAIN
// otherwise. Other query types in the reverse zones always go upstream:
// the index only holds PTR records there (CoreDNS also answers SOA and NS
// at in-addr.arpa. itself). Before the informers have synced every
// reverse name goes upstream.
func (ix *Index) lookupReverse(name string, qtype uint16) (stage.Result, bool) {
	if qtype != dns.TypePTR || !ix.synced.Load() {
		return stage.Result{}, false
	}
	ri := -1
	for i, z := range reverseZones {
		if dnsname.InZone(name, z) {
			ri = i
			break
		}
	}
	if ri < 0 {
		return stage.Result{}, false
	}
	if name == reverseZones[ri] {
		// The apex exists: NODATA, not a name error (as CoreDNS).
		return stage.Result{Msg: ix.zoneMsg.Load().revNoData[ri]}, true
	}
	if ip, ok := dnsname.ParseReverse(name); ok {
		// The generation is read before the state: an answer built from
		// a state that has since changed carries a generation that has
		// moved on (Generation).
		gen := ix.gen.Load()
		if m := ix.answers.get(name, qtype, gen); m != nil {
			return stage.Result{Msg: m}, true
		}
		ix.mu.RLock()
		m := ix.reverse(name, ip)
		ix.mu.RUnlock()
		if m != nil {
			ix.answers.put(m.Answer[0].Header().Name, qtype, gen, m)
			return stage.Result{Msg: m}, true
		}
	}
	if ix.fallsThrough(name) {
		return stage.Result{}, false
	}
	return stage.Result{Msg: ix.zoneMsg.Load().revNX[ri]}, true
}

// reverse returns the PTR answer for ip, nil when no exposed Service or
// endpoint has it. Called with mu read-locked.
func (ix *Index) reverse(name string, ip netip.Addr) *dns.Msg {
	// With a namespace filter, addresses in hidden namespaces get no PTR.
	// (CoreDNS filters PTR by `namespaces` but not by namespace_labels,
	// which lets a PTR name a service whose own name is NXDOMAIN; we hide
	// both.)
	filter := ix.cfg.filtersNamespaces()
	for _, key := range ix.clusterIPs[ip] {
		v := ix.records[key]
		if v == nil {
			continue
		}
		if _, ok := ix.nss[v.svc.namespace]; filter && !ok {
			continue
		}
		// The first Service with the address, as CoreDNS.
		return ix.answer([]dns.RR{ix.ptr(strings.Clone(name), v.primary.fqdn)}, nil)
	}
	var buf [4]epRef
	refs := ix.epIPs.get(ip, buf[:0])
	if len(refs) == 0 {
		return nil
	}
	var ans []dns.RR
outer:
	for _, r := range refs {
		if _, ok := ix.nss[r.sl.namespace]; filter && !ok {
			continue
		}
		target := r.sl.label(int(r.i)) + "." + r.sl.service + "." + r.sl.namespace + ".svc." + ix.zone
		for _, rr := range ans {
			if rr.(*dns.PTR).Ptr == target {
				continue outer
			}
		}
		if ans == nil {
			ans = make([]dns.RR, 0, len(refs))
			name = strings.Clone(name) // the caller's string may live in a reused buffer
		}
		ans = append(ans, ix.ptr(name, target))
	}
	if ans == nil {
		return nil
	}
	return ix.answer(ans, nil)
}

func (ix *Index) ptr(name, target string) dns.RR {
	return &dns.PTR{Hdr: ix.hdr(name, dns.TypePTR), Ptr: target}
}
