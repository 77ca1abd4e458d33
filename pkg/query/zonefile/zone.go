package zonefile

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/miekg/dns"
)

// Bounds of one zone file: it is read whole into memory, and reloaded.
const (
	// MaxFileBytes bounds the size of a zone file.
	MaxFileBytes = 32 << 20
	// MaxRecords bounds the records of one zone.
	MaxRecords = 200_000
)

// zone is one zone as read from its file: immutable once built, replaced
// whole by a reload.
type zone struct {
	origin string // lower-case FQDN
	labels int    // dns.CountLabel(origin)
	soa    *dns.SOA
	// ns are the apex NS records (not in names).
	ns []dns.RR
	// names holds every record but the SOA and the apex NS, by lower-case
	// owner name and type.
	names map[string]map[uint16][]dns.RR
	// ents holds every name that has a name of names below it (empty
	// non-terminals, and the ancestors of records, up to the origin):
	// what CoreDNS's tree calls "has a descendant".
	ents    map[string]bool
	records int
}

// errSerial: the file's SOA serial is the one already served (a reload
// keeps the zone and says nothing, as CoreDNS's file).
var errSerial = errors.New("no change in SOA serial")

// parse reads the zone of origin from r (read from the file named file),
// as CoreDNS's file does: $INCLUDE allowed, one SOA at the origin
// required, NSEC3 refused. serial >= 0 is the serial served: a file with
// the same serial is errSerial. Errors name the file and, for a syntax
// error, the line.
func parse(r io.Reader, origin, file string, serial int64) (*zone, error) {
	z := &zone{origin: origin, labels: dns.CountLabel(origin),
		names: map[string]map[uint16][]dns.RR{}, ents: map[string]bool{}}
	zp := dns.NewZoneParser(r, origin, file)
	zp.SetIncludeAllowed(true)
	seenSOA := false
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if z.records++; z.records > MaxRecords {
			return nil, fmt.Errorf("zone file %s: more than %d records", file, MaxRecords)
		}
		if s, isSOA := rr.(*dns.SOA); isSOA {
			if !strings.EqualFold(s.Hdr.Name, origin) {
				return nil, fmt.Errorf("zone file %s: SOA owner %s does not match the origin %s", file, s.Hdr.Name, origin)
			}
			if !seenSOA {
				seenSOA = true
				if serial >= 0 && int64(s.Serial) == serial {
					return nil, errSerial
				}
			}
		}
		if err := z.insert(rr); err != nil {
			return nil, fmt.Errorf("zone file %s: %w", file, err)
		}
	}
	if err := zp.Err(); err != nil {
		// miekg/dns's ParseError names the file and the line.
		return nil, fmt.Errorf("zone file %s for %s: %w", file, origin, err)
	}
	if !seenSOA {
		return nil, fmt.Errorf("zone file %s has no SOA record for %s", file, origin)
	}
	return z, nil
}

// insert adds rr, with the name forms CoreDNS's file keeps (owner names
// lower-case but SRV's, targets of NS, CNAME, MX and the SOA's names
// lower-case).
func (z *zone) insert(rr dns.RR) error {
	h := rr.Header()
	owner := strings.ToLower(h.Name)
	if h.Rrtype != dns.TypeSRV {
		h.Name = owner
	}
	if !dns.IsSubDomain(z.origin, owner) {
		return fmt.Errorf("record %s is outside the zone %s", h.Name, z.origin)
	}
	switch x := rr.(type) {
	case *dns.NS:
		x.Ns = strings.ToLower(x.Ns)
		if owner == z.origin {
			z.ns = append(z.ns, rr)
			return nil
		}
	case *dns.SOA:
		x.Ns, x.Mbox = strings.ToLower(x.Ns), strings.ToLower(x.Mbox)
		z.soa = x
		return nil
	case *dns.NSEC3, *dns.NSEC3PARAM:
		return fmt.Errorf("NSEC3 zones are not supported (record %s)", h.Name)
	case *dns.CNAME:
		x.Target = strings.ToLower(x.Target)
	case *dns.MX:
		x.Mx = strings.ToLower(x.Mx)
	}
	types := z.names[owner]
	if types == nil {
		types = map[uint16][]dns.RR{}
		z.names[owner] = types
		for n := owner; n != z.origin; {
			i, end := dns.NextLabel(n, 0)
			if end {
				break
			}
			n = n[i:]
			if z.ents[n] {
				break
			}
			z.ents[n] = true
		}
	}
	for _, old := range types[h.Rrtype] {
		if dns.IsDuplicate(old, rr) {
			return nil
		}
	}
	types[h.Rrtype] = append(types[h.Rrtype], rr)
	return nil
}
