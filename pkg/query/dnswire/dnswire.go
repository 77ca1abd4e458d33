// Package dnswire reads and patches DNS messages in wire form without
// unpacking them: the request header and question, the EDNS0 OPT record,
// the offsets of every TTL in a packed answer. It is what lets the hit path
// answer from stored bytes; anything that needs the records themselves
// unpacks with github.com/miekg/dns instead.
//
// It also holds how a TTL of 2^31 or more is read (ttl.go: ReadTTL, and
// ZeroHugeTTLs for an unpacked message), the one rule the cache and the
// forwarder both apply to a reply.
//
// Names handled here are uncompressed in the question (as every real client
// sends them); a compression pointer in a question is reported as an error.
package dnswire

import (
	"encoding/binary"
	"errors"
	"strings"
	"unsafe"

	"github.com/miekg/dns"
)

// HeaderLen is the length of the DNS header.
const HeaderLen = 12

// Errors from parsing. ErrHeader means even the header is unreadable (the
// packet is dropped); the others leave a header to answer FORMERR to.
var (
	ErrHeader   = errors.New("dnswire: short header")
	ErrQuestion = errors.New("dnswire: malformed question")
	ErrRR       = errors.New("dnswire: malformed resource record")
	ErrOPT      = errors.New("dnswire: malformed or repeated OPT")
)

// Header flag bits (second 16-bit word of the header).
const (
	FlagQR = 1 << 15
	FlagAA = 1 << 10
	FlagTC = 1 << 9
	FlagRD = 1 << 8
	FlagRA = 1 << 7
	FlagAD = 1 << 5
	FlagCD = 1 << 4
)

// Query is a parsed request: header fields, the single question and the
// EDNS0 parameters. RawName points into the packet that was parsed; Name
// points into the Query itself (so parsing allocates nothing): both are
// valid only while the packet and the Query are. Copying a Query copies
// the bytes but not the pointers: call Detach on a copy that must outlive
// its original.
type Query struct {
	ID      uint16
	Flags   uint16
	QDCount uint16
	ANCount uint16
	NSCount uint16
	ARCount uint16

	// RawName is the question name as sent (wire form, client's case).
	RawName []byte
	// Name is the question name in presentation form, lower-case, fully
	// qualified, as github.com/miekg/dns would print it.
	Name  string
	Type  uint16
	Class uint16
	// QEnd is the offset just past the question section.
	QEnd int

	EDNS        bool
	UDPSize     uint16
	DO          bool
	EDNSVersion uint8
	// NSID: the OPT record carries the NSID option (RFC 5001), which
	// asks the server to say who it is.
	NSID bool

	// nameBuf holds Name's bytes for plain names.
	nameBuf [256]byte
}

// Detach makes Name independent of the Query it was parsed into (a heap
// copy), for a Query copied to outlive the original.
func (q *Query) Detach() { q.Name = strings.Clone(q.Name) }

// Opcode returns the header's opcode.
func (q *Query) Opcode() int { return int(q.Flags>>11) & 0xF }

// Response reports whether QR is set.
func (q *Query) Response() bool { return q.Flags&FlagQR != 0 }

// CD reports whether the checking-disabled bit is set.
func (q *Query) CD() bool { return q.Flags&FlagCD != 0 }

// ParseHeader reads only the header.
func ParseHeader(b []byte, q *Query) error {
	if len(b) < HeaderLen {
		return ErrHeader
	}
	q.ID = binary.BigEndian.Uint16(b[0:])
	q.Flags = binary.BigEndian.Uint16(b[2:])
	q.QDCount = binary.BigEndian.Uint16(b[4:])
	q.ANCount = binary.BigEndian.Uint16(b[6:])
	q.NSCount = binary.BigEndian.Uint16(b[8:])
	q.ARCount = binary.BigEndian.Uint16(b[10:])
	return nil
}

// ParseQuery reads the header, the first question and any OPT record. The
// caller has already checked QDCount == 1 if it cares; ParseQuery requires
// at least one question.
func ParseQuery(b []byte, q *Query) error {
	if err := ParseHeader(b, q); err != nil {
		return err
	}
	*q = Query{ID: q.ID, Flags: q.Flags, QDCount: q.QDCount, ANCount: q.ANCount, NSCount: q.NSCount, ARCount: q.ARCount}
	if q.QDCount == 0 {
		// No question to answer, but the OPT (if any) is still read, so
		// that the error reply (FORMERR, or NOTIMP for an unknown opcode)
		// can carry one as RFC 6891 asks.
		if q.ARCount != 0 {
			if err := q.parseOPT(b, HeaderLen); err != nil {
				return err
			}
		}
		return ErrQuestion
	}
	end, text, err := questionName(b, HeaderLen, &q.nameBuf)
	if err != nil {
		return err
	}
	q.RawName = b[HeaderLen:end]
	if end+4 > len(b) {
		return ErrQuestion
	}
	q.Type = binary.BigEndian.Uint16(b[end:])
	q.Class = binary.BigEndian.Uint16(b[end+2:])
	q.QEnd = end + 4
	switch {
	case text > 0:
		q.Name = unsafe.String(&q.nameBuf[0], text)
	case end == HeaderLen+1:
		q.Name = "."
	default:
		name, _, err := dns.UnpackDomainName(b, HeaderLen)
		if err != nil {
			return ErrQuestion
		}
		q.Name = lowerASCII(name)
	}
	if q.ARCount == 0 {
		return nil
	}
	// Further questions (QDCOUNT > 1) are the caller's to refuse; EDNS is
	// only looked for when the question section is the usual single one.
	if q.QDCount != 1 {
		return nil
	}
	return q.parseOPT(b, q.QEnd)
}

// parseOPT reads the EDNS0 parameters from the OPT record among the
// additional records, the answer and authority sections starting at off.
func (q *Query) parseOPT(b []byte, off int) (err error) {
	for i := 0; i < int(q.ANCount)+int(q.NSCount); i++ {
		if off, err = skipRR(b, off); err != nil {
			return err
		}
	}
	for i := 0; i < int(q.ARCount); i++ {
		start := off
		nameEnd, err := SkipName(b, off)
		if err != nil {
			return ErrRR
		}
		if nameEnd+10 > len(b) {
			return ErrRR
		}
		typ := binary.BigEndian.Uint16(b[nameEnd:])
		rdlen := int(binary.BigEndian.Uint16(b[nameEnd+8:]))
		if nameEnd+10+rdlen > len(b) {
			return ErrRR
		}
		if typ == dns.TypeOPT {
			if q.EDNS || nameEnd != start+1 || b[start] != 0 {
				return ErrOPT
			}
			q.EDNS = true
			q.UDPSize = binary.BigEndian.Uint16(b[nameEnd+2:])
			ttl := binary.BigEndian.Uint32(b[nameEnd+4:])
			q.EDNSVersion = uint8(ttl >> 16)
			q.DO = ttl&(1<<15) != 0
			q.NSID = hasOption(b[nameEnd+10:nameEnd+10+rdlen], OptionNSID)
		}
		off = nameEnd + 10 + rdlen
	}
	return nil
}

// questionName checks the uncompressed name at off and returns its end.
// When every byte of its labels is plain (a letter, digit, '-', '_' or
// '*'), it also writes the name's lower-case text form (the labels joined
// by dots) to buf and returns its length as text; else text is 0. One
// pass does both: the name is the longest part of a query, and a pod's
// search-path expansions are long names.
func questionName(b []byte, off int, buf *[256]byte) (end, text int, err error) {
	total, n := 0, 0
	var acc byte // the OR of every byte's lowerPlain: high bit set once one is not plain
	for {
		if off >= len(b) {
			return 0, 0, ErrQuestion
		}
		l := int(b[off])
		if l == 0 {
			total++
			if total > 255 {
				return 0, 0, ErrQuestion
			}
			if acc&notPlain != 0 {
				n = 0
			}
			return off + 1, n, nil
		}
		if l > 63 { // a pointer (0xC0) or a reserved label type
			return 0, 0, ErrQuestion
		}
		if off+1+l > len(b) {
			return 0, 0, ErrQuestion
		}
		total += l + 1
		if total > 255 {
			return 0, 0, ErrQuestion
		}
		// total <= 255 bounds n + l + 1 (the text so far, this label
		// and its dot) by 255: within buf.
		label := b[off+1 : off+1+l]
		dst := buf[n : n+l+1]
		for i, c := range label {
			x := lowerPlain[c]
			dst[i] = x
			acc |= x
		}
		dst[l] = '.'
		n += l + 1
		off += 1 + l
	}
}

// notPlain marks a byte that is not plain in lowerPlain.
const notPlain = 0x80

// lowerPlain maps every plain byte of a name (a letter, digit, '-', '_' or
// '*') to its lower-case form, and every other byte to notPlain.
var lowerPlain = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= 'A' && c <= 'Z':
			t[c] = byte(c) + 'a' - 'A'
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '*':
			t[c] = byte(c)
		default:
			t[c] = notPlain
		}
	}
	return t
}()

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// SkipName returns the offset just past the (possibly compressed) name at
// off. It does not follow pointers, so it cannot loop.
func SkipName(b []byte, off int) (int, error) {
	for {
		if off >= len(b) {
			return 0, ErrRR
		}
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1, nil
		case l&0xC0 == 0xC0:
			if off+2 > len(b) {
				return 0, ErrRR
			}
			return off + 2, nil
		case l > 63:
			return 0, ErrRR
		}
		off += 1 + l
	}
}

func skipRR(b []byte, off int) (int, error) {
	n, err := SkipName(b, off)
	if err != nil {
		return 0, err
	}
	if n+10 > len(b) {
		return 0, ErrRR
	}
	rdlen := int(binary.BigEndian.Uint16(b[n+8:]))
	if n+10+rdlen > len(b) {
		return 0, ErrRR
	}
	return n + 10 + rdlen, nil
}

// TTLOffsets returns the offset of the TTL field of every resource record in
// the packed message m, OPT records excluded (their TTL field holds flags).
func TTLOffsets(m []byte) ([]uint16, error) {
	var h Query
	if err := ParseHeader(m, &h); err != nil {
		return nil, err
	}
	off := HeaderLen
	var err error
	for i := 0; i < int(h.QDCount); i++ {
		if off, err = SkipName(m, off); err != nil {
			return nil, err
		}
		off += 4
	}
	n := int(h.ANCount) + int(h.NSCount) + int(h.ARCount)
	offs := make([]uint16, 0, n)
	for i := 0; i < n; i++ {
		nameEnd, err := SkipName(m, off)
		if err != nil {
			return nil, err
		}
		if nameEnd+10 > len(m) || nameEnd+4 > 0xFFFF {
			// The TTL field must be addressable by a uint16 offset.
			return nil, ErrRR
		}
		if binary.BigEndian.Uint16(m[nameEnd:]) != dns.TypeOPT {
			offs = append(offs, uint16(nameEnd+4))
		}
		if off, err = skipRR(m, off); err != nil {
			return nil, err
		}
	}
	return offs, nil
}

// PutTTLs writes ttl into every TTL field listed in offs.
func PutTTLs(m []byte, offs []uint16, ttl uint32) {
	for _, o := range offs {
		binary.BigEndian.PutUint32(m[o:], ttl)
	}
}

// AppendOPT appends an OPT record advertising udpSize with the DO bit and
// extended rcode bits given, and increments ARCOUNT. m must be the message
// alone (its header at m[0]), not a buffer holding something before it.
func AppendOPT(m []byte, udpSize uint16, do bool, extRcode uint8) []byte {
	var flags uint32 = uint32(extRcode) << 24
	if do {
		flags |= 1 << 15
	}
	m = append(m, 0, 0, byte(dns.TypeOPT), byte(udpSize>>8), byte(udpSize),
		byte(flags>>24), byte(flags>>16), byte(flags>>8), byte(flags), 0, 0)
	binary.BigEndian.PutUint16(m[10:], binary.BigEndian.Uint16(m[10:])+1)
	return m
}

// maxRotateRun bounds the records of one RRset RotateAddrs rotates (their
// offsets are kept on the stack); a longer run, which only a TCP reply
// can hold (a UDP reply of 1232 bytes holds at most 75 A records), keeps
// its order.
const maxRotateRun = 256

// RotateAddrs rotates the addresses of every A and AAAA RRset in the
// packed message m by k positions, in place: within each run of
// consecutive records of one type and one owner name (in the answer,
// authority and additional sections), record i gets the address record
// i+k (mod the run's length) had. Owner names, TTLs and everything else
// stay where they are, so compression pointers remain valid; it allocates
// nothing. A message that does not parse is left as it is (a partial
// rotation of a valid prefix may have happened).
func RotateAddrs(m []byte, k uint32) {
	var h Query
	if ParseHeader(m, &h) != nil {
		return
	}
	off := HeaderLen
	var err error
	for i := 0; i < int(h.QDCount); i++ {
		if off, err = SkipName(m, off); err != nil {
			return
		}
		off += 4
	}
	var run [maxRotateRun]uint16 // RDATA offsets of the current run
	n := 0
	var runType uint16
	runOwner := 0 // offset of the run's first owner name
	flush := func() {
		if n > 1 && n <= maxRotateRun {
			rotate(m, run[:n], int(k%uint32(n)), rdataLen(runType))
		}
		n = 0
	}
	total := int(h.ANCount) + int(h.NSCount) + int(h.ARCount)
	for i := 0; i < total; i++ {
		nameEnd, err := SkipName(m, off)
		if err != nil || nameEnd+10 > len(m) {
			return
		}
		typ := binary.BigEndian.Uint16(m[nameEnd:])
		rdlen := int(binary.BigEndian.Uint16(m[nameEnd+8:]))
		end := nameEnd + 10 + rdlen
		if end > len(m) {
			return
		}
		// A section boundary ends a run: the same name in the answer and
		// the additional section is two RRsets' worth of context.
		if i == int(h.ANCount) || i == int(h.ANCount)+int(h.NSCount) {
			flush()
		}
		addr := (typ == dns.TypeA || typ == dns.TypeAAAA) && rdlen == rdataLen(typ) && nameEnd+10 <= 0xFFFF
		switch {
		case !addr:
			flush()
		case n > 0 && (typ != runType || !sameName(m, runOwner, off)):
			flush()
			fallthrough
		default:
			if n == 0 {
				runType, runOwner = typ, off
			}
			if n < maxRotateRun {
				run[n] = uint16(nameEnd + 10)
			}
			n++
		}
		off = end
	}
	flush()
}

func rdataLen(t uint16) int {
	if t == dns.TypeA {
		return 4
	}
	return 16
}

// rotate moves the size-byte fields at offs left by k: field i gets what
// field i+k held (three reversals, no buffer).
func rotate(m []byte, offs []uint16, k, size int) {
	if k == 0 {
		return
	}
	rev := func(a, b int) { // fields a..b-1
		for b--; a < b; a, b = a+1, b-1 {
			x, y := m[offs[a]:int(offs[a])+size], m[offs[b]:int(offs[b])+size]
			for j := 0; j < size; j++ {
				x[j], y[j] = y[j], x[j]
			}
		}
	}
	rev(0, k)
	rev(k, len(offs))
	rev(0, len(offs))
}

// sameName reports whether the (possibly compressed) names at a and b of m
// are equal, ignoring ASCII case. Pointers are followed a bounded number of
// times, so a malicious loop ends as "not equal".
func sameName(m []byte, a, b int) bool {
	// The common case: both are the same compression pointer.
	if a+1 < len(m) && b+1 < len(m) && m[a]&0xC0 == 0xC0 && m[a] == m[b] && m[a+1] == m[b+1] {
		return true
	}
	for hops := 0; hops < 128; {
		var la, lb int
		var ok bool
		if a, la, ok = label(m, a, &hops); !ok {
			return false
		}
		if b, lb, ok = label(m, b, &hops); !ok {
			return false
		}
		if la != lb {
			return false
		}
		if la == 0 {
			return true
		}
		if a+1+la > len(m) || b+1+lb > len(m) {
			return false
		}
		for j := 1; j <= la; j++ {
			x, y := m[a+j], m[b+j]
			if x >= 'A' && x <= 'Z' {
				x += 'a' - 'A'
			}
			if y >= 'A' && y <= 'Z' {
				y += 'a' - 'A'
			}
			if x != y {
				return false
			}
		}
		a, b = a+1+la, b+1+lb
	}
	return false
}

// label follows pointers from off to a label and returns its offset and
// length.
func label(m []byte, off int, hops *int) (int, int, bool) {
	for {
		if off >= len(m) {
			return 0, 0, false
		}
		l := int(m[off])
		switch {
		case l&0xC0 == 0xC0:
			if off+1 >= len(m) {
				return 0, 0, false
			}
			*hops++
			if *hops >= 128 {
				return 0, 0, false
			}
			off = int(binary.BigEndian.Uint16(m[off:]) & 0x3FFF)
		case l > 63:
			return 0, 0, false
		default:
			return off, l, true
		}
	}
}

// hasOption reports whether the OPT RDATA rd holds an option of the code;
// a malformed option list ends the walk (it is not this reader's to
// judge: miekg/dns, when the full message is read, does).
func hasOption(rd []byte, code uint16) bool {
	for len(rd) >= 4 {
		c, n := binary.BigEndian.Uint16(rd), int(binary.BigEndian.Uint16(rd[2:]))
		if c == code {
			return true
		}
		if 4+n > len(rd) {
			return false
		}
		rd = rd[4+n:]
	}
	return false
}
