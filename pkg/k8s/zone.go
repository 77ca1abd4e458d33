package k8s

import (
	"github.com/miekg/dns"
)

// zoneMsgs are the answers shared by one zone. They carry the SOA, whose
// serial moves with every change, so they are rebuilt together and
// swapped atomically as a zoneSet.
type zoneMsgs struct {
	zone             string // lower-case FQDN
	idx              int    // position in Index.zones (Index.mcZones when mc)
	mc               bool   // a multicluster zone: services are ServiceImports
	nxdomain, nodata *dns.Msg
	soa, ns, txt     *dns.Msg
	nsA, nsAAAA      *dns.Msg // ns.dns.<zone> A/AAAA, nil: NODATA
}

// zoneSet holds the shared answers of every zone.
type zoneSet struct {
	serial uint32
	z      []*zoneMsgs // as Index.zones
	// mc are the multicluster zones' (as Index.mcZones), whose SOA
	// serial is the time of the last multicluster change, as CoreDNS's.
	mcSerial uint32
	mc       []*zoneMsgs
	// revNX are the NXDOMAIN answers of the reverse zones (in-addr.arpa.,
	// ip6.arpa.), with their SOA, for PTR queries that do not fall
	// through.
	revNX [len(reverseZones)]*dns.Msg
	// revNoData answer other names of the reverse zones that exist (their
	// apexes).
	revNoData [len(reverseZones)]*dns.Msg
}

// dnsVersion is the Kubernetes DNS schema version the zone follows, served
// as TXT at dns-version.<zone>.
const dnsVersion = "1.1.0"

// rebuildZone rebuilds the zone-wide answers. Called with wmu held.
func (ix *Index) rebuildZone() {
	serial := uint32(ix.lastChange.Unix())
	if ix.lastChange.IsZero() {
		serial = 0
	}
	zs := &zoneSet{serial: serial, z: make([]*zoneMsgs, len(ix.zones))}
	for i, z := range ix.zones {
		zs.z[i] = ix.buildZoneMsgs(z, i, serial)
	}
	if ix.mc != nil {
		zs.mcSerial = uint32(ix.mc.lastChange.Unix())
		if ix.mc.lastChange.IsZero() {
			zs.mcSerial = 0
		}
		zs.mc = make([]*zoneMsgs, len(ix.mcZones))
		for i, z := range ix.mcZones {
			zs.mc[i] = ix.buildZoneMsgs(z, i, zs.mcSerial)
			zs.mc[i].mc = true
		}
	}
	for i, z := range reverseZones {
		soa := ix.soa(z, serial)
		zs.revNX[i] = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}
		zs.revNoData[i] = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Ns: []dns.RR{soa}}
	}
	ix.zoneMsg.Store(zs)
}

// soa is the SOA record of zone, as CoreDNS writes it.
func (ix *Index) soa(zone string, serial uint32) *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(ix.ttl, 300)},
		Ns:      "ns.dns." + zone,
		Mbox:    "hostmaster." + zone,
		Serial:  serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  ix.ttl,
	}
}

func (ix *Index) buildZoneMsgs(zone string, idx int, serial uint32) *zoneMsgs {
	soa := ix.soa(zone, serial)
	zm := &zoneMsgs{
		zone:     zone,
		idx:      idx,
		nxdomain: &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}},
		nodata:   &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Ns: []dns.RR{soa}},
		soa:      ix.answer([]dns.RR{soa}, nil),
		txt: ix.answer([]dns.RR{&dns.TXT{
			Hdr: dns.RR_Header{Name: "dns-version." + zone, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 28800},
			Txt: []string{dnsVersion},
		}}, nil),
	}

	// NS: the cluster DNS Service by name with its ClusterIPs as glue, as
	// CoreDNS answers with its own Service; without that Service,
	// ns.dns.<zone> with the configured addresses. The target is in the
	// zone asked, as in CoreDNS.
	target, addrs := "ns.dns."+zone, ix.cfg.NSAddrs
	if s := ix.svcs[ix.dnsSvcKey]; s != nil && s.kind == kindClusterIP && len(s.ips) > 0 {
		target, addrs = s.name+"."+s.namespace+".svc."+zone, s.ips
	}
	ns := &dns.NS{Hdr: ix.hdr(zone, dns.TypeNS), Ns: target}
	var glue []dns.RR
	for _, ip := range addrs {
		glue = append(glue, ix.addrRR(target, ip))
	}
	zm.ns = ix.answer([]dns.RR{ns}, glue)
	zm.nsA, zm.nsAAAA = ix.addrAnswers("ns.dns."+zone, addrs)
	return zm
}
