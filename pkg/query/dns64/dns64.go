// Package dns64 synthesizes AAAA records from A records (RFC 6147) for
// IPv6-only clients that reach IPv4-only services through NAT64, with the
// semantics of CoreDNS 1.15's dns64 plugin: which queries it takes, when a
// reply is translated, and the synthesized reply. The lookup of the A
// records is the pipeline's (pkg/query/pipeline runs the name through its
// whole stage order again, as CoreDNS asks its own server), so this package
// only decides and builds.
//
// What CoreDNS 1.15 does, and this package with it:
//   - Only AAAA questions of class IN, and only from IPv6 clients unless
//     allow_ipv4 (an IPv4-mapped address is an IPv4 client); not of the
//     Except zones (a Corefile's other server blocks, without the root
//     block's dns64).
//   - A reply is translated unless it is a name error (NXDOMAIN without
//     answers) or, without translate_all, it holds an AAAA record. Every
//     other reply is translated: NODATA, a CNAME without AAAA, and error
//     rcodes (SERVFAIL, REFUSED) too.
//   - The synthesized reply is the A lookup's: its rcode, TC bit,
//     authority and additional sections, its answer with each A record
//     replaced by an AAAA record made from the prefix (RFC 6052 §2.2) and
//     every other record unchanged. Its TTL is the smaller of the A
//     record's and the SOA's of the AAAA reply's authority section (600
//     when it has none: RFC 6147 §5.1.7). It is not authoritative and
//     does not say recursion is available (CoreDNS's reply is a fresh
//     SetReply of the query).
//
// Limits it shares with CoreDNS: no PTR synthesis for the prefix, no
// DNSSEC awareness, one prefix for every IPv4 range.
package dns64

import (
	"fmt"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// DefaultPrefix is the well-known prefix of RFC 6052.
const DefaultPrefix = "64:ff9b::/96"

// defaultSOATTL is the TTL bound when the AAAA reply has no SOA (RFC 6147
// §5.1.7, as CoreDNS).
const defaultSOATTL = 600

// Config is what CoreDNS's `dns64 [PREFIX] { prefix; translate_all;
// allow_ipv4 }` sets.
type Config struct {
	// Prefix is the IPv6 prefix the IPv4 addresses are embedded in; its
	// length is 32, 40, 48, 56, 64 or 96 (RFC 6052 §2.2). Zero:
	// DefaultPrefix.
	Prefix netip.Prefix
	// TranslateAll translates replies that hold AAAA records too.
	TranslateAll bool
	// AllowIPv4 translates for clients that asked over IPv4 too.
	AllowIPv4 bool
	// Except are zones (canonical: lower-case, fully qualified) whose
	// names are not translated: the zones of a Corefile's other server
	// blocks, which CoreDNS answers without the root block's dns64. At
	// most MaxExcept.
	Except []string
}

// MaxExcept bounds Config.Except: each is tried on an AAAA query dns64
// applies to.
const MaxExcept = 64

// DNS64 decides which queries are translated and builds their replies.
// It is immutable and safe for concurrent use.
type DNS64 struct {
	prefix       netip.Prefix
	translateAll bool
	allowIPv4    bool
	except       []string
}

// ParsePrefix reads a DNS64 prefix: an IPv6 CIDR of length 32, 40, 48,
// 56, 64 or 96. The address is masked to the prefix, as CoreDNS's
// net.ParseCIDR does.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("dns64 prefix %q: %w", s, err)
	}
	if !p.Addr().Is6() || p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("dns64 prefix %q: want an IPv6 prefix", s)
	}
	switch p.Bits() {
	case 32, 40, 48, 56, 64, 96:
	default:
		return netip.Prefix{}, fmt.Errorf("dns64 prefix %q: length %d: want 32, 40, 48, 56, 64 or 96 (RFC 6052)", s, p.Bits())
	}
	return p.Masked(), nil
}

// New checks cfg and returns its DNS64.
func New(cfg Config) (*DNS64, error) {
	p := cfg.Prefix
	if !p.IsValid() {
		p = netip.MustParsePrefix(DefaultPrefix)
	}
	p, err := ParsePrefix(p.String())
	if err != nil {
		return nil, err
	}
	if len(cfg.Except) > MaxExcept {
		return nil, fmt.Errorf("dns64 except: %d zones: want at most %d", len(cfg.Except), MaxExcept)
	}
	except := make([]string, 0, len(cfg.Except))
	for _, z := range cfg.Except {
		c := dnsname.Canonical(z)
		if c == "." {
			return nil, fmt.Errorf("dns64 except %q: the root zone would turn dns64 off; want a zone below it", z)
		}
		except = append(except, c)
	}
	return &DNS64{prefix: p, translateAll: cfg.TranslateAll, allowIPv4: cfg.AllowIPv4, except: except}, nil
}

// Prefix returns the prefix the addresses are embedded in.
func (d *DNS64) Prefix() netip.Prefix { return d.prefix }

// Applies reports whether a query of (qtype, qclass) from client may be
// translated: an AAAA question of class IN, from an IPv6 client unless
// AllowIPv4, about a name (canonical) in none of the Except zones. It is
// asked on the reader about every query, at no allocation.
func (d *DNS64) Applies(client netip.Addr, name string, qtype, qclass uint16) bool {
	if qtype != dns.TypeAAAA || qclass != dns.ClassINET {
		return false
	}
	return (d.allowIPv4 || !client.Unmap().Is4()) && !dnsname.InZones(name, d.except)
}

// Translate reports whether the reply to an AAAA question is replaced by
// one synthesized from the A records: not for a name error, not (without
// TranslateAll) when it holds an AAAA record.
func (d *DNS64) Translate(aaaa *dns.Msg) bool {
	if aaaa.Rcode == dns.RcodeNameError && len(aaaa.Answer) == 0 {
		return false
	}
	if d.translateAll {
		return true
	}
	for _, rr := range aaaa.Answer {
		if rr.Header().Rrtype == dns.TypeAAAA {
			return false
		}
	}
	return true
}

// Synthesize builds the reply to the AAAA question from the A lookup's
// reply a and the AAAA reply aaaa (whose SOA bounds the TTLs). Both are
// read, never changed; the result shares their records but the AAAA ones.
// Its Question is not set (the pipeline writes the client's).
func (d *DNS64) Synthesize(aaaa, a *dns.Msg) *dns.Msg {
	soaTTL := uint32(defaultSOATTL)
	for _, rr := range aaaa.Ns {
		if rr.Header().Rrtype == dns.TypeSOA {
			soaTTL = rr.Header().Ttl
		}
	}
	m := &dns.Msg{}
	m.Response = true
	m.Rcode = a.Rcode
	m.Truncated = a.Truncated
	m.Ns, m.Extra = a.Ns, a.Extra
	m.Answer = make([]dns.RR, 0, len(a.Answer))
	for _, rr := range a.Answer {
		ar, ok := rr.(*dns.A)
		if !ok {
			m.Answer = append(m.Answer, rr)
			continue
		}
		v4, ok := netip.AddrFromSlice(ar.A.To4())
		if !ok {
			m.Answer = append(m.Answer, rr)
			continue
		}
		h := ar.Hdr
		h.Rrtype, h.Rdlength = dns.TypeAAAA, 0
		h.Ttl = min(h.Ttl, soaTTL)
		v6 := Embed(d.prefix, v4).As16()
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: h, AAAA: v6[:]})
	}
	return m
}

// Embed returns the IPv4 address v4 embedded in prefix as RFC 6052 §2.2
// lays it out: the address bytes after the prefix, skipping byte 8 (bits
// 64 to 71, which are zero), the rest zero. prefix must be one ParsePrefix
// accepts.
func Embed(prefix netip.Prefix, v4 netip.Addr) netip.Addr {
	p := prefix.Addr().As16()
	a := v4.As4()
	var out [16]byte
	n := prefix.Bits() / 8
	copy(out[:n], p[:n])
	i, j := n, 0
	for ; i < 8 && j < 4; i, j = i+1, j+1 {
		out[i] = a[j]
	}
	if i == 8 {
		i++
	}
	for ; j < 4; i, j = i+1, j+1 {
		out[i] = a[j]
	}
	return netip.AddrFrom16(out)
}
