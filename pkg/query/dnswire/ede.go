package dnswire

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// Extended DNS Errors (RFC 8914) in wire form: the option code, and the
// fixed part of an OPT record as AppendOPT writes it.
const (
	// OptionEDE is the EDNS0 option code of an Extended DNS Error.
	OptionEDE = 15
	// optFixed is an OPT record with the root name and no options: name
	// (1), type, class (UDP size), TTL (extended rcode, version, flags),
	// RDLENGTH.
	optFixed = 11
)

// AppendEDE appends an Extended DNS Error option (info code, EXTRA-TEXT) to
// the OPT record at offset opt of m, the last record of the message (as
// AppendOPT leaves it), and returns m. The text is UTF-8 without a
// terminating NUL (RFC 8914 §2).
func AppendEDE(m []byte, opt int, code uint16, text string) []byte {
	n := 2 + len(text)
	m = append(m, byte(OptionEDE>>8), byte(OptionEDE&0xFF), byte(n>>8), byte(n), byte(code>>8), byte(code))
	m = append(m, text...)
	rd := opt + optFixed - 2
	binary.BigEndian.PutUint16(m[rd:], binary.BigEndian.Uint16(m[rd:])+uint16(4+n))
	return m
}

// OptionNSID is the EDNS0 option code of the name server identifier
// (RFC 5001).
const OptionNSID = 3

// AppendNSID appends an NSID option with the payload id to the OPT record
// at offset opt of m, the last record of the message, and returns m.
func AppendNSID(m []byte, opt int, id string) []byte {
	n := len(id)
	m = append(m, byte(OptionNSID>>8), byte(OptionNSID&0xFF), byte(n>>8), byte(n))
	m = append(m, id...)
	rd := opt + optFixed - 2
	binary.BigEndian.PutUint16(m[rd:], binary.BigEndian.Uint16(m[rd:])+uint16(4+n))
	return m
}

// NSIDLen is the size AppendNSID adds for the payload id.
func NSIDLen(id string) int { return 4 + len(id) }

// EDELen is the size AppendEDE adds for an option carrying text.
func EDELen(text string) int { return 6 + len(text) }

// LastOPT returns the offset in m, a packed message, of an OPT record that
// is its last record, and whether there is one. Only messages with
// additional records are read past the header: a reply without them (most
// replies) costs two loads.
func LastOPT(m []byte) (int, bool) {
	if len(m) < HeaderLen {
		return 0, false
	}
	ar := int(binary.BigEndian.Uint16(m[10:]))
	if ar == 0 {
		return 0, false
	}
	qd := int(binary.BigEndian.Uint16(m[4:]))
	rrs := int(binary.BigEndian.Uint16(m[6:])) + int(binary.BigEndian.Uint16(m[8:])) + ar
	off := HeaderLen
	var err error
	for i := 0; i < qd; i++ {
		if off, err = SkipName(m, off); err != nil {
			return 0, false
		}
		off += 4
	}
	last := -1
	for i := 0; i < rrs; i++ {
		last = off
		if off, err = skipRR(m, off); err != nil {
			return 0, false
		}
	}
	if off != len(m) || last < 0 || last+optFixed > len(m) || m[last] != 0 ||
		binary.BigEndian.Uint16(m[last+1:]) != dns.TypeOPT {
		return 0, false
	}
	return last, true
}

// PatchOPT makes the OPT record at offset opt of m advertise udpSize, with
// the DO bit and extended rcode bits given and EDNS version 0; its options
// are kept.
func PatchOPT(m []byte, opt int, udpSize uint16, do bool, extRcode uint8) {
	var flags uint32 = uint32(extRcode) << 24
	if do {
		flags |= 1 << 15
	}
	binary.BigEndian.PutUint16(m[opt+3:], udpSize)
	binary.BigEndian.PutUint32(m[opt+5:], flags)
}

// DropLast removes the last record of m, which starts at offset rr of the
// message, and decrements ARCOUNT (it must be an additional record).
func DropLast(m []byte, rr int) []byte {
	binary.BigEndian.PutUint16(m[10:], binary.BigEndian.Uint16(m[10:])-1)
	return m[:rr]
}

// EDEOptions calls f with the info code and EXTRA-TEXT of each Extended DNS
// Error option of the OPT record at offset opt of m. text shares m's
// memory. Malformed options end the walk.
func EDEOptions(m []byte, opt int, f func(code uint16, text []byte)) {
	if opt+optFixed > len(m) {
		return
	}
	end := opt + optFixed + int(binary.BigEndian.Uint16(m[opt+optFixed-2:]))
	if end > len(m) {
		return
	}
	for off := opt + optFixed; off+4 <= end; {
		code := binary.BigEndian.Uint16(m[off:])
		n := int(binary.BigEndian.Uint16(m[off+2:]))
		if off+4+n > end {
			return
		}
		if code == OptionEDE && n >= 2 {
			f(binary.BigEndian.Uint16(m[off+4:]), m[off+6:off+4+n])
		}
		off += 4 + n
	}
}
