package k8s

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// The external zones: CoreDNS 1.15's k8s_external, answered from the
// Services the index already holds. A Service's external addresses are its
// spec.externalIPs and its load balancer's ingress (the IP, or the
// hostname when there is none), kept in the stripped Service (service.ext,
// nil for the many that have none). Answers are assembled per query from
// the records under the read lock, as the colder cluster names are.
//
// Names, as CoreDNS's k8s_external and its kubernetes plugin answer them:
//   - `<svc>.<ns>.<zone>`: A and AAAA of the external addresses (each
//     once, TTL the zone's), a CNAME (the cluster TTL) to a hostname
//     ingress with the target's records looked up through the pipeline;
//     SRV of each external address and port (target `<svc>.<ns>.<zone>`,
//     glue in the additional section); other types NODATA.
//   - `_<port>._<proto>.<svc>.<ns>.<zone>`: only those ports.
//   - `<x>.<svc>.<ns>.<zone>`: as `<svc>.<ns>.<zone>` (CoreDNS reads no
//     endpoint label for a Service with external addresses); with
//     headless, for a headless Service without external addresses, the
//     ready endpoints (all, or those labelled x).
//   - `<ns>.<zone>` of an existing namespace: NODATA; a Service without
//     external addresses (or ports), or a namespace that does not exist:
//     NXDOMAIN, or on to the next stage with fallthrough.
//   - The apex: SOA (`ns1.<apex>.<zone> hostmaster.<apex>.<zone>`, the
//     zone's TTL), NS `ns1.<apex>.<zone>`; `<apex>.<zone>` NODATA.
//
// The name server `ns1.<apex>.<zone>` (the NS answer's glue, its A and
// AAAA) has the cluster DNS Service's external addresses, or the agent's
// own without that Service (nsAddrs), as CoreDNS gives its own Service's
// or its listen addresses.
//
// Departures (docs/plugins.md): PTR is not answered from external
// addresses; an SRV to a hostname ingress has no glue; of several
// hostname ingresses only the first one's target is looked up, and the
// target's records follow the CNAMEs rather than each of them.

// ExternalConfig configures the external zones (CoreDNS's `k8s_external
// ZONES... { apex; ttl; headless; fallthrough }`).
type ExternalConfig struct {
	// Zones are lower-case FQDNs; at least one.
	Zones []string
	// Apex is the label of the names the zone's own records live under;
	// default "dns".
	Apex string
	// TTL of the answers, 0 to 3600.
	TTL uint32
	// Headless answers the ready endpoints of headless Services without
	// external addresses.
	Headless bool
	// Fallthrough: the zones whose NXDOMAIN goes on to the next stage
	// (empty with FallthroughSet: every zone).
	Fallthrough    []string
	FallthroughSet bool
}

// External answers the external zones from the index's Services. It is
// safe for concurrent use; its settings are fixed (a reload makes a new
// one).
type External struct {
	ix  *Index
	cfg ExternalConfig
}

// CheckExternal checks cfg and returns an error naming the bad value.
func CheckExternal(cfg ExternalConfig) error {
	if len(cfg.Zones) == 0 {
		return fmt.Errorf("%w: k8s-external: no zones", ErrConfig)
	}
	for _, z := range cfg.Zones {
		if _, ok := dns.IsDomainName(z); !ok || !dns.IsFqdn(z) {
			return fmt.Errorf("%w: k8s-external zone %q: not a fully qualified name", ErrConfig, z)
		}
	}
	if cfg.Apex != "" {
		if n, ok := dns.IsDomainName(cfg.Apex); !ok || n != 1 || strings.HasSuffix(cfg.Apex, ".") {
			return fmt.Errorf("%w: k8s-external apex %q: want one label", ErrConfig, cfg.Apex)
		}
	}
	if cfg.TTL > 3600 {
		return fmt.Errorf("%w: k8s-external ttl %d: want 0 to 3600", ErrConfig, cfg.TTL)
	}
	return nil
}

// External returns the external zones of cfg answered from ix.
func (ix *Index) External(cfg ExternalConfig) (*External, error) {
	if err := CheckExternal(cfg); err != nil {
		return nil, err
	}
	if cfg.Apex == "" {
		cfg.Apex = "dns"
	}
	cfg.Apex = strings.ToLower(cfg.Apex)
	return &External{ix: ix, cfg: cfg}, nil
}

// zone returns the longest external zone name is in, or "": a few suffix
// comparisons and no allocation for the names of no zone.
func (e *External) zone(name string) string {
	best := ""
	for _, z := range e.cfg.Zones {
		if dnsname.InZone(name, z) && len(z) > len(best) {
			best = z
		}
	}
	return best
}

// Lookup answers name (lower-case FQDN) of type qtype when it is in an
// external zone; ok false otherwise, or for an NXDOMAIN that falls
// through.
func (e *External) Lookup(name string, qtype uint16) (stage.Result, bool) {
	zone := e.zone(name)
	if zone == "" {
		return stage.Result{}, false
	}
	if !e.ix.synced.Load() {
		return stage.Result{Msg: servfailMsg, NotSynced: true}, true
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}}
	soa := e.soa(zone)
	if name == zone {
		switch qtype {
		case dns.TypeSOA:
			m.Answer = []dns.RR{soa}
		case dns.TypeNS:
			target := "ns1." + e.cfg.Apex + "." + zone
			m.Answer = []dns.RR{&dns.NS{Hdr: e.hdr(zone, dns.TypeNS, e.cfg.TTL), Ns: target}}
			for _, a := range e.nsAddrs() {
				m.Extra = append(m.Extra, e.addrRR(target, a))
			}
		default:
			m.Ns = []dns.RR{soa}
		}
		return stage.Result{Msg: m}, true
	}
	base := name[:len(name)-len(zone)] // "a.b." (the zone is never the root's alone here)
	if zone == "." {
		base = name
	}
	labels := dns.SplitDomainName(base)
	if apexName := e.cfg.Apex + "." + zone; dnsname.InZone(name, apexName) {
		switch {
		case len(labels) == 1:
			m.Ns = []dns.RR{soa}
		case len(labels) == 2 && labels[0] == "ns1":
			for _, a := range e.nsAddrs() {
				if a.Is4() == (qtype == dns.TypeA) && (qtype == dns.TypeA || qtype == dns.TypeAAAA) {
					m.Answer = append(m.Answer, e.addrRR(name, a))
				}
			}
			if len(m.Answer) == 0 {
				m.Ns = []dns.RR{soa}
			}
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		}
		return stage.Result{Msg: m}, true
	}
	entries, rcode := e.entries(labels, zone)
	if len(entries) == 0 {
		if rcode == dns.RcodeNameError && e.cfg.FallthroughSet &&
			(len(e.cfg.Fallthrough) == 0 || dnsname.InZones(name, e.cfg.Fallthrough)) {
			return stage.Result{}, false
		}
		m.Rcode = rcode
		m.Ns = []dns.RR{soa}
		return stage.Result{Msg: m}, true
	}
	var (
		target string
		times  int
	)
	switch qtype {
	case dns.TypeA, dns.TypeAAAA:
		m.Answer, target, times = e.addrs(name, qtype, entries)
	case dns.TypeSRV:
		m.Answer, m.Extra = e.srv(name, entries)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{soa}
	}
	return stage.Result{Msg: m, ExternalTarget: target, TargetAnswerOnly: target != "", TargetTimes: times}, true
}

// extEntry is one address and port a name stands for (CoreDNS's
// msg.Service of its External): host is an address or a hostname,
// target the SRV target's name.
type extEntry struct {
	host   string
	port   int32
	target string
}

// entries reads the external addresses of the name whose labels below
// zone are labels, with the rcode CoreDNS's External gives when there are
// none. Under the index's read lock.
func (e *External) entries(labels []string, zone string) ([]extEntry, int) {
	n := len(labels)
	if n == 0 {
		return nil, dns.RcodeServerFailure
	}
	ns := labels[n-1]
	ix := e.ix
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if _, ok := ix.nss[ns]; !ok {
		return nil, dns.RcodeNameError
	}
	if n == 1 {
		return nil, dns.RcodeSuccess
	}
	var endpoint, qport, qproto string
	switch n {
	case 2:
	case 3:
		endpoint = strings.TrimPrefix(labels[0], "_")
	case 4:
		qport, qproto = strings.TrimPrefix(labels[0], "_"), strings.TrimPrefix(labels[1], "_")
	default:
		return nil, dns.RcodeNameError
	}
	svcName := labels[n-2]
	v := ix.records[svcName+"."+ns]
	if v == nil || v.svc == nil {
		return nil, dns.RcodeNameError
	}
	s := v.svc
	svcTarget := svcName + "." + ns + "." + zone
	var out []extEntry
	if e.cfg.Headless && len(s.extList()) == 0 && (s.kind == kindHeadless || endpoint != "") {
		for _, sl := range v.slices {
			for i := range sl.len() {
				label := sl.label(i)
				if endpoint != "" && label != endpoint {
					continue
				}
				for _, p := range sl.ports {
					if p.port == -1 || !matchPort(qport, qproto, p) {
						continue
					}
					out = append(out, extEntry{host: sl.ip(i).String(), port: p.port, target: label + "." + svcTarget})
				}
			}
		}
	} else {
		for _, h := range s.extList() {
			for _, p := range s.ports {
				if p.port == -1 || !matchPort(qport, qproto, p) {
					continue
				}
				out = append(out, extEntry{host: h, port: p.port, target: svcTarget})
			}
		}
	}
	if len(out) == 0 {
		return nil, dns.RcodeNameError
	}
	return out, dns.RcodeSuccess
}

// addrs answers A or AAAA: each address of the family once; a CNAME for
// each hostname entry (one a port), the first hostname's target looked
// up by the pipeline, its answer appended once for each of its entries
// (times), as CoreDNS appends one lookup's answer after each CNAME.
func (e *External) addrs(name string, qtype uint16, entries []extEntry) (rrs []dns.RR, target string, times int) {
	seen := make(map[string]bool, len(entries))
	for _, en := range entries {
		a, err := netip.ParseAddr(en.host)
		if err != nil {
			t := dns.Fqdn(strings.ToLower(en.host))
			rrs = append(rrs, &dns.CNAME{Hdr: e.hdr(name, dns.TypeCNAME, e.ix.ttl), Target: t})
			if target == "" {
				target = t
			}
			if t == target {
				times++
			}
			continue
		}
		a = a.Unmap()
		if seen[en.host] || a.Is4() != (qtype == dns.TypeA) {
			continue
		}
		seen[en.host] = true
		rrs = append(rrs, e.addrRR(name, a))
	}
	return rrs, target, times
}

// srv answers SRV: one record per target and port, weight 100/N of the N
// entries (priority 0), the cluster TTL; the addresses as glue, each once
// per target, the zone's TTL.
func (e *External) srv(name string, entries []extEntry) (rrs, extra []dns.RR) {
	weight := uint16(math.Floor(100.0 / float64(100*len(entries)) * 100))
	if weight == 0 {
		weight = 1
	}
	type key struct {
		name, addr string
		port       int32
	}
	seen := map[key]bool{}
	for _, en := range entries {
		a, err := netip.ParseAddr(en.host)
		target := en.target
		if err != nil {
			target = dns.Fqdn(strings.ToLower(en.host))
		}
		if k := (key{name: target, port: en.port}); !seen[k] {
			seen[k] = true
			rrs = append(rrs, &dns.SRV{Hdr: e.hdr(name, dns.TypeSRV, e.ix.ttl), Weight: weight, Port: uint16(en.port), Target: target})
		}
		if err != nil {
			continue // CoreDNS looks the hostname up for glue; not here
		}
		if k := (key{name: target, addr: en.host}); !seen[k] {
			seen[k] = true
			extra = append(extra, e.addrRR(target, a.Unmap()))
		}
	}
	return rrs, extra
}

func (e *External) hdr(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

func (e *External) addrRR(name string, a netip.Addr) dns.RR {
	if a.Is4() {
		v := a.As4()
		return &dns.A{Hdr: e.hdr(name, dns.TypeA, e.cfg.TTL), A: v[:]}
	}
	v := a.As16()
	return &dns.AAAA{Hdr: e.hdr(name, dns.TypeAAAA, e.cfg.TTL), AAAA: v[:]}
}

// soa is the external zone's SOA, as CoreDNS's k8s_external writes it;
// the serial is the cluster zone's (the time of the last change).
func (e *External) soa(zone string) *dns.SOA {
	apex := e.cfg.Apex + "." + zone
	return &dns.SOA{Hdr: e.hdr(zone, dns.TypeSOA, e.cfg.TTL), Ns: "ns1." + apex, Mbox: "hostmaster." + apex,
		Serial: e.ix.zoneMsg.Load().serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: e.cfg.TTL}
}

// nsAddrs are the addresses of the zone's name server, as CoreDNS's
// kubernetes plugin gives them to k8s_external: those of the Service the
// server is an endpoint of (here the cluster DNS Service,
// Config.DNSService): its external IPs, or with Headless and a headless
// Service its ready endpoints; without that Service, the server's own
// addresses (Config.NSAddrs).
func (e *External) nsAddrs() []netip.Addr {
	ix := e.ix
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	v := ix.records[ix.dnsSvcKey]
	if v == nil || v.svc == nil {
		return ix.cfg.NSAddrs
	}
	var out []netip.Addr
	if e.cfg.Headless && v.svc.kind == kindHeadless {
		for _, sl := range v.slices {
			for i := range sl.len() {
				out = append(out, sl.ip(i))
			}
		}
		return out
	}
	for _, h := range v.svc.extList() {
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}
