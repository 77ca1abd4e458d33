package k8s

import (
	"net"
	"net/netip"
	"sync"

	"github.com/miekg/dns"
)

// Bounds of one answer built from the index. A Service's endpoints are what
// its owner makes them (or the controller of the pods a tenant scales),
// over any number of EndpointSlices, and every SRV answer multiplies them
// by the ports; but a reply goes whole over TCP only up to 64 KiB, so
// records past what fits there are of use to no client, while each costs
// the index memory (a bare name's answers are built and kept at every
// change) and each query CPU (SRV, port and endpoint answers are
// assembled per query). What fits 64 KiB with the owner name compressed:
// an A record takes 16 bytes, AAAA 28, an SRV record with its glue some
// 50 to 100. An answer past a bound keeps the first records, in the
// order the index holds them (slices by name).
const (
	maxAnswerA    = 4000
	maxAnswerAAAA = 2300
	maxAnswerSRV  = 1000
	// maxServicePorts bounds the ports a Service keeps (newService): the
	// API server bounds them only by the object's size (some 50,000 in
	// 1.5 MiB), every SRV query walks them, and past maxAnswerSRV ports no
	// SRV answer could hold another.
	maxServicePorts = maxAnswerSRV
	// maxServiceExternal bounds the external addresses kept of a Service
	// (k8s_external): the API allows any number.
	maxServiceExternal = 64
)

// svcRecords is a Service's records: everything Lookup needs about one
// Service, built when the Service or one of its EndpointSlices changes and
// immutable afterwards (but for the memo of assembled answers).
//
// The answers for the bare service name (A, AAAA, the ExternalName CNAME)
// are complete shared messages: those names carry nearly all cluster
// traffic, and a search-path walk's negative answers are shared zone-wide.
// SRV, endpoint names, port names and PTR answers are assembled per query
// from these records, in time proportional to the answer (about 1 µs for one
// record). Prebuilding them too would cost some 300 bytes per endpoint
// address, more than the rest of the index, for names that are rarely
// asked.
type svcRecords struct {
	svc    *service
	slices []*endpointSlice   // the service's slices, by name
	hosts  map[string][]epRef // endpoint name label -> endpoints; nil when none has one
	// exists is false when every name of the service is NXDOMAIN: headless
	// without ready endpoints, ExternalName with an IP, and with
	// IgnoreEmptyService a ClusterIP service without ready endpoints.
	exists bool
	// capped: the bare name's answers hold fewer addresses than the
	// service has (maxAnswerA, maxAnswerAAAA); logged when it starts.
	capped bool

	// The service's name and prebuilt answers in each zone: primary for
	// the first zone, more for the others (nil with one zone).
	primary zoneRecords
	more    []zoneRecords

	// memo keeps the positive answers assembled per query for the
	// service's names (endpoint and port names, SRV). Bounded by the names
	// the service has, not by traffic: negative answers are never kept.
	memoMu sync.Mutex
	memo   map[memoKey]*dns.Msg
}

// zoneRecords is a service's name and bare-name answers in one zone.
type zoneRecords struct {
	fqdn    string   // "name.ns.svc.<zone>"
	a, aaaa *dns.Msg // bare name; nil: NODATA
	cname   *dns.Msg // ExternalName: the CNAME alone
}

// in returns the service's names and answers in zone zi (Index.zones).
func (v *svcRecords) in(zi int) *zoneRecords {
	if zi == 0 {
		return &v.primary
	}
	return &v.more[zi-1]
}

type memoKey struct {
	name  string
	qtype uint16
}

func (v *svcRecords) memoGet(name string, qtype uint16) *dns.Msg {
	v.memoMu.Lock()
	m := v.memo[memoKey{name, qtype}]
	v.memoMu.Unlock()
	return m
}

// memoPut keeps m, a positive answer, under its owner name (a string the
// index owns, unlike the query name).
func (v *svcRecords) memoPut(qtype uint16, m *dns.Msg) {
	if len(m.Answer) == 0 {
		return
	}
	k := memoKey{m.Answer[0].Header().Name, qtype}
	v.memoMu.Lock()
	if v.memo == nil {
		v.memo = make(map[memoKey]*dns.Msg)
	}
	v.memo[k] = m
	v.memoMu.Unlock()
}

// buildRecords builds the records of s with its slices. prev, when it is the
// same Service, lets a ClusterIP service keep its prebuilt answers: only
// its endpoint data changed. Called with wmu held.
func (ix *Index) buildRecords(s *service, sl []*endpointSlice, prev *svcRecords) *svcRecords {
	ix.counters.rebuilds++
	v := &svcRecords{svc: s, slices: sl}
	if len(ix.zones) > 1 {
		v.more = make([]zoneRecords, len(ix.zones)-1)
	}
	same := prev != nil && prev.svc == s
	for zi, zone := range ix.zones {
		zr := v.in(zi)
		if same {
			zr.fqdn = prev.in(zi).fqdn
		} else {
			zr.fqdn = s.name + "." + s.namespace + ".svc." + zone
		}
	}
	ready := false
	for _, e := range sl {
		if e.len() > 0 {
			ready = true
		}
	}
	if s.kind != kindExternal {
		for _, e := range sl {
			for i := range e.len() {
				if h := e.host(i); h != "" {
					if v.hosts == nil {
						v.hosts = make(map[string][]epRef)
					}
					v.hosts[h] = append(v.hosts[h], epRef{e, int32(i)})
				}
			}
		}
	}
	switch s.kind {
	case kindExternal:
		v.exists = !s.externalIsIP
		if v.exists {
			for zi := range ix.zones {
				zr := v.in(zi)
				zr.cname = ix.answer([]dns.RR{&dns.CNAME{Hdr: ix.hdr(zr.fqdn, dns.TypeCNAME), Target: s.external}}, nil)
			}
		}
	case kindClusterIP:
		// A ClusterIP name exists even without endpoints (every service
		// has at least CoreDNS's sentinel port), unless
		// IgnoreEmptyService hides it: CoreDNS counts the ready addresses
		// of the service's slices.
		v.exists = ready || !ix.cfg.IgnoreEmptyService
		for zi := range ix.zones {
			zr := v.in(zi)
			if same {
				pz := prev.in(zi)
				zr.a, zr.aaaa = pz.a, pz.aaaa
				continue
			}
			zr.a, zr.aaaa = ix.addrAnswers(zr.fqdn, s.ips)
		}
	case kindHeadless:
		v.exists = ready
		// Deduplicated by address across all slices, in slice-name order.
		var ips []netip.Addr
		seen := make(map[netip.Addr]struct{})
		for _, e := range sl {
			for i := range e.len() {
				ip := e.ip(i)
				if _, dup := seen[ip]; dup {
					continue
				}
				seen[ip] = struct{}{}
				ips = append(ips, ip)
			}
		}
		for zi := range ix.zones {
			zr := v.in(zi)
			zr.a, zr.aaaa = ix.addrAnswers(zr.fqdn, ips)
		}
		if v4, v6 := countFamilies(ips); v4 > maxAnswerA || v6 > maxAnswerAAAA {
			v.capped = true
			if (prev == nil || !prev.capped) && ix.log != nil {
				ix.log.Warn("headless service with more ready addresses than one answer carries: its answers keep the first",
					"service", s.namespace+"/"+s.name, "ipv4", v4, "ipv6", v6, "max_a", maxAnswerA, "max_aaaa", maxAnswerAAAA)
			}
		}
	}
	return v
}

// countFamilies counts the IPv4 and the IPv6 addresses of ips.
func countFamilies(ips []netip.Addr) (v4, v6 int) {
	for _, ip := range ips {
		if ip.Is4() {
			v4++
		} else {
			v6++
		}
	}
	return v4, v6
}

// hdr returns an RR header with the cluster TTL.
func (ix *Index) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ix.ttl}
}

// addrRR returns an A or AAAA record for ip.
func (ix *Index) addrRR(name string, ip netip.Addr) dns.RR {
	if ip.Is4() {
		b := ip.As4()
		return &dns.A{Hdr: ix.hdr(name, dns.TypeA), A: net.IP(b[:])}
	}
	b := ip.As16()
	return &dns.AAAA{Hdr: ix.hdr(name, dns.TypeAAAA), AAAA: net.IP(b[:])}
}

// answer returns an authoritative NOERROR message.
func (ix *Index) answer(ans, extra []dns.RR) *dns.Msg {
	return &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Answer: ans, Extra: extra}
}

// addrAnswers returns the A and the AAAA answer of owner for ips, in
// their order, at most maxAnswerA and maxAnswerAAAA records; nil for a
// family without addresses (NODATA).
func (ix *Index) addrAnswers(owner string, ips []netip.Addr) (a, aaaa *dns.Msg) {
	var ra, raaaa []dns.RR
	for _, ip := range ips {
		switch {
		case ip.Is4() && len(ra) < maxAnswerA:
			ra = append(ra, ix.addrRR(owner, ip))
		case !ip.Is4() && len(raaaa) < maxAnswerAAAA:
			raaaa = append(raaaa, ix.addrRR(owner, ip))
		}
	}
	if len(ra) > 0 {
		a = ix.answer(ra, nil)
	}
	if len(raaaa) > 0 {
		aaaa = ix.answer(raaaa, nil)
	}
	return a, aaaa
}

// srvEntry is one (target, address, port) triple, the unit CoreDNS counts
// when it weighs SRV records.
type srvEntry struct {
	target string
	ip     netip.Addr
	port   int32
}

// srvAnswer turns entries into SRV records with glue, following CoreDNS:
// priority 0, weight floor(100/N) (at least 1) where N counts every entry
// before duplicates and port-less entries are dropped; one SRV per
// (target, port); one A/AAAA glue record per (target, address). It returns
// nil when no SRV record results (the caller answers NODATA).
func (ix *Index) srvAnswer(owner string, entries []srvEntry) *dns.Msg {
	if len(entries) == 0 {
		return nil
	}
	weight := uint16(max(100/len(entries), 1))
	type tp struct {
		target string
		port   int32
	}
	type ta struct {
		target string
		ip     netip.Addr
	}
	seenSRV := make(map[tp]struct{}, len(entries))
	seenAddr := make(map[ta]struct{}, len(entries))
	var ans, extra []dns.RR
	for _, e := range entries {
		if e.port < 0 {
			continue
		}
		if _, dup := seenSRV[tp{e.target, e.port}]; !dup {
			seenSRV[tp{e.target, e.port}] = struct{}{}
			ans = append(ans, &dns.SRV{Hdr: ix.hdr(owner, dns.TypeSRV), Priority: 0, Weight: weight,
				Port: uint16(e.port), Target: e.target})
		}
		if _, dup := seenAddr[ta{e.target, e.ip}]; !dup && e.ip.IsValid() {
			seenAddr[ta{e.target, e.ip}] = struct{}{}
			extra = append(extra, ix.addrRR(e.target, e.ip))
		}
	}
	if len(ans) == 0 {
		return nil
	}
	return ix.answer(ans, extra)
}

// matchPort reports whether p matches the port and protocol labels of a
// query; an empty label matches anything, as in CoreDNS.
func matchPort(qport, qproto string, p port) bool {
	return (qport == "" || qport == p.name) && (qproto == "" || qproto == p.proto)
}

// clusterSRV appends the SRV entries of a ClusterIP service for the ports
// matching (qport, qproto): every matching port times every ClusterIP,
// targeting the service name in zone zi; at most maxAnswerSRV in all.
func (ix *Index) clusterSRV(v *svcRecords, zi int, qport, qproto string, out []srvEntry) []srvEntry {
	target := v.in(zi).fqdn
	for _, p := range v.svc.ports {
		if !matchPort(qport, qproto, p) {
			continue
		}
		for _, ip := range v.svc.ips {
			if len(out) == maxAnswerSRV {
				return out
			}
			out = append(out, srvEntry{target: target, ip: ip, port: p.port})
		}
	}
	return out
}

// dashIP writes an address as an endpoint label does: IPv4 '.' and IPv6
// ':' become '-', and a trailing '-' gets a '0'.
func dashIP(ip netip.Addr) string {
	b := make([]byte, 0, 40)
	b = ip.AppendTo(b)
	for i, c := range b {
		if c == '.' || c == ':' {
			b[i] = '-'
		}
	}
	if b[len(b)-1] == '-' {
		b = append(b, '0')
	}
	return string(b)
}
