// Package builtin answers the names whose answers no zone holds, fixed by
// convention: localhost and the loopback, this-network and broadcast
// reverse zones (local.go, CoreDNS's local plugin, RFC 6761 §6.3), and the
// server's identity in class CH (chaos.go, CoreDNS's chaos plugin). The
// pipeline asks them first, before rewrites and the access list, as
// CoreDNS's plugin order has it; each is a stage.Builtin.
package builtin

import (
	"net"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// localTTL is the TTL of every record Local answers with (CoreDNS's).
const localTTL = 604800

// localZones are the zones Local answers (none holds another).
var localZones = []string{"localhost.", "0.in-addr.arpa.", "127.in-addr.arpa.", "255.in-addr.arpa."}

// Local answers localhost and its reverse names itself, as CoreDNS's local
// plugin (1.15): localhost. A 127.0.0.1 and AAAA ::1 (SOA and NS at the
// apex, other types NODATA with the SOA); every name under localhost.
// (and, with the legacy prefix, every name starting localhost.) A and
// AAAA loopback, other types NODATA with an SOA owned by the name; the
// zones 0, 127 and 255.in-addr.arpa: the apex NODATA with its SOA (SOA and
// NS answered), 1.0.0.127.in-addr.arpa PTR localhost., every other name
// NXDOMAIN. TTL 604800, not authoritative (CoreDNS sets no AA).
type Local struct {
	// prefix: names starting "localhost." are answered as localhost
	// (CoreDNS's localhost_prefix, on by default).
	prefix bool
}

// NewLocal returns the local answers; localhostPrefix answers names
// starting "localhost." too.
func NewLocal(localhostPrefix bool) *Local { return &Local{prefix: localhostPrefix} }

// Lookup implements stage.Builtin. name is lower-case and fully qualified;
// owner names are that name (the pipeline restores the client's case).
func (l *Local) Lookup(name string, qtype, _ uint16) (stage.Result, bool) {
	const lh = "localhost."
	if len(name) > len(lh) && (dnsname.InZone(name, lh) || l.prefix && strings.HasPrefix(name, lh)) {
		return stage.Result{Msg: localhost(name, qtype), Source: stage.SourceLocal}, true
	}
	zone := ""
	for _, z := range localZones {
		if dnsname.InZone(name, z) {
			zone = z
			break
		}
	}
	if zone == "" {
		return stage.Result{}, false
	}
	m := new(dns.Msg)
	switch name {
	case "localhost.", "0.in-addr.arpa.", "127.in-addr.arpa.", "255.in-addr.arpa.":
		switch {
		case qtype == dns.TypeA && name == lh:
			m.Answer = []dns.RR{&dns.A{Hdr: hdr(name, dns.TypeA), A: net.IPv4(127, 0, 0, 1).To4()}}
		case qtype == dns.TypeAAAA && name == lh:
			m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(name, dns.TypeAAAA), AAAA: net.IPv6loopback}}
		case qtype == dns.TypeSOA:
			m.Answer = []dns.RR{soa(name)}
		case qtype == dns.TypeNS:
			m.Answer = []dns.RR{&dns.NS{Hdr: hdr(name, dns.TypeNS), Ns: lh}}
		default:
			m.Ns = []dns.RR{soa(name)}
		}
	case "1.0.0.127.in-addr.arpa.":
		if qtype == dns.TypePTR {
			m.Answer = []dns.RR{&dns.PTR{Hdr: hdr(name, dns.TypePTR), Ptr: lh}}
		} else {
			m.Ns = []dns.RR{soa(zone)}
		}
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa(zone)}
	}
	return stage.Result{Msg: m, Source: stage.SourceLocal}, true
}

// localhost is the answer for a name under localhost. (or with the legacy
// prefix): loopback addresses, else NODATA with an SOA owned by the name.
func localhost(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	switch qtype {
	case dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(name, dns.TypeA), A: net.IPv4(127, 0, 0, 1).To4()}}
	case dns.TypeAAAA:
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(name, dns.TypeAAAA), AAAA: net.IPv6loopback}}
	default:
		m.Ns = []dns.RR{soa(name)}
	}
	return m
}

func hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: localTTL}
}

// soa is the SOA CoreDNS's local plugin makes for origin.
func soa(origin string) dns.RR {
	return &dns.SOA{Hdr: hdr(origin, dns.TypeSOA), Ns: "localhost.", Mbox: "root.localhost.", Serial: 1, Minttl: localTTL}
}
