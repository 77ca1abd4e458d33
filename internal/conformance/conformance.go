// Package conformance is the protocol conformance table of the DNS
// server: RFC 8906 ("A Common Operational Problem in DNS Servers: Failure
// to Communicate") sections 3 and 8, with RFC 1035 (the header), RFC 6891
// (EDNS), RFC 6895 (opcodes, Z) and RFC 6840 (DO, CD, AD). Each case is a
// query and what every part of its reply must be: rcode, each header
// flag, the question echoed or not, and the OPT record. The server's unit
// test and the integration test (the agent binary, side by side with
// CoreDNS) run the same table.
package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/miekg/dns"
)

// Header bits of a query (second 16-bit word).
const (
	hQR = 1 << 15
	hAA = 1 << 10
	hTC = 1 << 9
	hRD = 1 << 8
	hRA = 1 << 7
	hZ  = 1 << 6
	hAD = 1 << 5
	hCD = 1 << 4
)

// EDNS flag bits (the low 16 bits of the OPT TTL).
const (
	eDO = 1 << 15
	// eMBZ are the EDNS flags no RFC defines: RFC 6891 §6.1.4 says they
	// are ignored and cleared in replies.
	eMBZ = 0x7FFF
)

// Case is one query of the table and what its reply must be.
type Case struct {
	Name string
	// The query.
	Opcode     int
	Hflags     uint16 // header bits: RD, CD, AD, Z
	NoQuestion bool
	Qtype      uint16 // 0: the target's usual type (A)
	Big        bool   // ask the target's name whose answer is 512-1232 octets
	Edns       bool
	Version    uint8
	Eflags     uint16
	Size       uint16
	Options    []byte // OPT rdata
	// The expectation, for both targets. An authoritative target's
	// answer also has AA when the rcode is NOERROR or NXDOMAIN and the
	// reply is not an error reply (ErrReply).
	Rcode    int
	ErrReply bool // no records at all (NOTIMP, BADVERS)
	Answer   bool // at least one answer record
	Tc       bool // over UDP only; never over TCP
	Question bool // the question is echoed
}

// Cases is the table.
func Cases() []Case {
	unknownOpt := []byte{0x00, 0x64, 0x00, 0x04, 1, 2, 3, 4} // option 100, 4 octets
	return []Case{
		// RFC 1035 §4.1.1: a plain query, RD copied, RA set (we recurse).
		{Name: "plain", Hflags: hRD, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "plain EDNS0", Hflags: hRD, Edns: true, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RFC 8906 §3.1.2 / RFC 1035 §4.1.1: Z must be zero in replies and
		// is ignored in queries.
		{Name: "Z bit set", Hflags: hRD | hZ, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "Z bit set, EDNS0", Hflags: hRD | hZ, Edns: true, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RFC 8906 §3.1.3 / RFC 3597: an unknown type is NODATA, not an error.
		{Name: "TYPE666", Hflags: hRD, Qtype: 666, Rcode: dns.RcodeSuccess, Question: true},
		{Name: "TYPE666 EDNS0", Hflags: hRD, Qtype: 666, Edns: true, Size: 1232, Rcode: dns.RcodeSuccess, Question: true},
		// RFC 8906 §3.1.4 / RFC 6895 §2.2: unknown opcodes are NOTIMP,
		// never FORMERR, with no answer data; with and without a question.
		// (CoreDNS echoes no question and drops the OPT; we echo what we
		// could read and answer EDNS with EDNS.)
		// RD, RA and CD are QUERY's only: the NOTIMP has them clear
		// whatever the query set (RFC 1035 §4.1.1, RFC 4035 §3.2.2).
		{Name: "opcode 15", Opcode: 15, Hflags: hRD, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode 15, RD CD AD", Opcode: 15, Hflags: hRD | hCD | hAD, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode NOTIFY, RD CD, EDNS0 DO", Opcode: dns.OpcodeNotify, Hflags: hRD | hCD, Edns: true, Eflags: eDO, Size: 1232, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode 15, no question", Opcode: 15, NoQuestion: true, Rcode: dns.RcodeNotImplemented, ErrReply: true},
		{Name: "opcode 15, no question, RD", Opcode: 15, Hflags: hRD, NoQuestion: true, Rcode: dns.RcodeNotImplemented, ErrReply: true},
		{Name: "opcode 15, no question, EDNS0", Opcode: 15, NoQuestion: true, Edns: true, Size: 1232, Rcode: dns.RcodeNotImplemented, ErrReply: true},
		{Name: "opcode 15 EDNS0", Opcode: 15, Hflags: hRD, Edns: true, Size: 1232, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode 3 (unassigned)", Opcode: 3, Hflags: hRD, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode IQUERY", Opcode: dns.OpcodeIQuery, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode STATUS, no question", Opcode: dns.OpcodeStatus, NoQuestion: true, Rcode: dns.RcodeNotImplemented, ErrReply: true},
		{Name: "opcode NOTIFY", Opcode: dns.OpcodeNotify, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		{Name: "opcode UPDATE", Opcode: dns.OpcodeUpdate, Rcode: dns.RcodeNotImplemented, ErrReply: true, Question: true},
		// RFC 8906 §3.2.2 / RFC 6891 §6.1.2: unknown options are ignored
		// and not echoed.
		{Name: "unknown EDNS option", Hflags: hRD, Edns: true, Size: 1232, Options: unknownOpt, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RFC 8906 §3.2.1 / RFC 6891 §6.1.3: version 1 is BADVERS with a
		// version-0 OPT, with and without options; no answer data.
		{Name: "EDNS version 1", Hflags: hRD, Edns: true, Version: 1, Size: 1232, Rcode: dns.RcodeBadVers, ErrReply: true, Question: true},
		{Name: "EDNS version 1, unknown option", Hflags: hRD, Edns: true, Version: 1, Size: 1232, Options: unknownOpt, Rcode: dns.RcodeBadVers, ErrReply: true, Question: true},
		{Name: "EDNS version 1, unknown flag", Hflags: hRD, Edns: true, Version: 1, Eflags: 0x40, Size: 1232, Rcode: dns.RcodeBadVers, ErrReply: true, Question: true},
		// RFC 8906 §3.2.3 / RFC 6891 §6.1.4: flags other than DO are
		// ignored and not echoed.
		{Name: "EDNS flag 0x40", Hflags: hRD, Edns: true, Eflags: 0x40, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "EDNS all undefined flags", Hflags: hRD, Edns: true, Eflags: eMBZ, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "EDNS all flags", Hflags: hRD, Edns: true, Eflags: 0xFFFF, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RFC 6840 §5.9 / RFC 4035 §3.2.2: DO echoed in the OPT, CD copied;
		// §5.8: AD only when the data is validated (never here: the cluster
		// zone is unsigned and the test upstream sets no AD).
		{Name: "DO", Hflags: hRD, Edns: true, Eflags: eDO, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "CD", Hflags: hRD | hCD, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "DO and CD", Hflags: hRD | hCD, Edns: true, Eflags: eDO, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "AD in the query", Hflags: hRD | hAD, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "AD and DO in the query", Hflags: hRD | hAD, Edns: true, Eflags: eDO, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RFC 6891 §6.2.5: a size under 512 is taken as 512. An answer
		// under 512 octets fits; one over it is truncated over UDP.
		{Name: "EDNS size 100, small answer", Hflags: hRD, Edns: true, Size: 100, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "EDNS size 0, small answer", Hflags: hRD, Edns: true, Size: 0, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "EDNS size 100, big answer", Hflags: hRD, Edns: true, Size: 100, Big: true, Rcode: dns.RcodeSuccess, Answer: true, Tc: true, Question: true},
		{Name: "no EDNS, big answer", Hflags: hRD, Big: true, Rcode: dns.RcodeSuccess, Answer: true, Tc: true, Question: true},
		{Name: "EDNS size 4096, big answer", Hflags: hRD, Edns: true, Size: 4096, Big: true, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		// RD clear. A judgement for a caching forwarder (answer from cache,
		// forward, or REFUSED), and the references differ: CoreDNS 1.15
		// (cache + forward) answers, a hit from the cache and a miss
		// forwarded, with RD clear in the reply; unbound 1.17 with a
		// forward-zone answers REFUSED, hit or miss (both seen on
		// loopback). We do what CoreDNS does, the server nodedns replaces
		// on a node: answer, RD clear, RA set. The cluster zone is ours
		// to answer, RD or not.
		{Name: "RD clear", Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "RD clear EDNS0", Edns: true, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
		{Name: "RD clear, CD", Hflags: hCD, Edns: true, Eflags: eDO, Size: 1232, Rcode: dns.RcodeSuccess, Answer: true, Question: true},
	}
}

// Query is the wire form of c's query with the given ID and question
// (ignored when c has none).
func Query(c Case, id uint16, qname string, qtype uint16) []byte {
	var ar uint16
	if c.Edns {
		ar = 1
	}
	var qd uint16 = 1
	if c.NoQuestion {
		qd = 0
	}
	b := hdr(id, uint16(c.Opcode)<<11|c.Hflags, qd, 0, 0, ar)
	if !c.NoQuestion {
		b = cat(b, name(qname), u16(qtype), u16(dns.ClassINET))
	}
	if c.Edns {
		b = cat(b, []byte{0}, u16(dns.TypeOPT), u16(c.Size), []byte{0, c.Version}, u16(c.Eflags), u16(uint16(len(c.Options))), c.Options)
	}
	return b
}

// Check checks the reply b (nil: none came) to the query pkt against c,
// for a target that answers authoritatively or not, over proto ("udp" or
// "tcp"); it returns the problems found, none when the reply conforms.
func Check(c Case, authoritative bool, proto string, pkt, b []byte) []string {
	if b == nil {
		return []string{"no reply"}
	}
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if len(b) < 12 {
		return []string{fmt.Sprintf("reply of %d octets", len(b))}
	}
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		return []string{fmt.Sprintf("reply does not unpack: %v", err)}
	}
	qflags := binary.BigEndian.Uint16(pkt[2:])
	flags := binary.BigEndian.Uint16(b[2:])
	if r.Id != binary.BigEndian.Uint16(pkt) {
		fail("ID %d, want %d", r.Id, binary.BigEndian.Uint16(pkt))
	}
	opt := r.IsEdns0()
	rcode := int(flags & 0xF)
	if opt != nil {
		rcode |= int(opt.Hdr.Ttl>>24) << 4
	}
	if rcode != c.Rcode {
		fail("rcode %s, want %s", dns.RcodeToString[rcode], dns.RcodeToString[c.Rcode])
	}
	bit := func(name string, mask uint16, want bool) {
		if got := flags&mask != 0; got != want {
			fail("%s=%v, want %v", name, got, want)
		}
	}
	bit("QR", hQR, true)
	if op := int(flags>>11) & 0xF; op != c.Opcode {
		fail("opcode %d, want %d (copied)", op, c.Opcode)
	}
	wantAA := authoritative && !c.ErrReply && (c.Rcode == dns.RcodeSuccess || c.Rcode == dns.RcodeNameError)
	bit("AA", hAA, wantAA)
	bit("TC", hTC, c.Tc && proto == "udp")
	// RD, RA and CD are defined for QUERY only (RFC 1035 §4.1.1, RFC 4035
	// §3.2.2): the NOTIMP to another opcode clears them, as CoreDNS's.
	query := c.Opcode == dns.OpcodeQuery
	bit("RD", hRD, query && qflags&hRD != 0)
	bit("RA", hRA, query)
	bit("Z", hZ, false)
	bit("AD", hAD, false)
	bit("CD", hCD, query && qflags&hCD != 0)
	// The question.
	wantQD := 0
	if c.Question {
		wantQD = 1
	}
	if qd := int(binary.BigEndian.Uint16(b[4:])); qd != wantQD {
		fail("QDCOUNT %d, want %d", qd, wantQD)
	} else if wantQD == 1 {
		qlen := bytes.IndexByte(pkt[12:], 0) + 1 + 4
		if len(b) < 12+qlen || !bytes.Equal(b[12:12+qlen], pkt[12:12+qlen]) {
			fail("question not echoed as sent")
		}
	}
	// Records.
	switch {
	case c.ErrReply:
		if len(r.Answer)+len(r.Ns) != 0 || len(r.Extra) > btoi(opt != nil) {
			fail("error reply with records: %d answer, %d authority, %d additional", len(r.Answer), len(r.Ns), len(r.Extra))
		}
	case c.Tc && proto == "udp":
		// Whether a truncated reply keeps the records that fit (CoreDNS)
		// or none (nodedns, unbound) is the responder's choice (RFC 2181
		// §9): the client retries over TCP either way.
	case c.Answer:
		if len(r.Answer) == 0 {
			fail("no answer")
		}
	default:
		if len(r.Answer) != 0 {
			fail("%d answers, want NODATA", len(r.Answer))
		}
	}
	// The OPT: present when the query had one, version 0, no options,
	// DO echoed, every other flag clear, our size.
	switch {
	case !c.Edns && opt != nil:
		fail("OPT in the reply to a query without one")
	case c.Edns && opt == nil:
		fail("no OPT in the reply to an EDNS query")
	case opt != nil:
		if opt.Version() != 0 {
			fail("OPT version %d, want 0", opt.Version())
		}
		if len(opt.Option) != 0 {
			fail("OPT with %d options, want none echoed", len(opt.Option))
		}
		if got, want := opt.Do(), c.Eflags&eDO != 0; got != want {
			fail("DO=%v, want %v", got, want)
		}
		if f := uint16(opt.Hdr.Ttl) & eMBZ; f != 0 {
			fail("EDNS flags %#x echoed, want 0", f)
		}
		if opt.UDPSize() < 512 {
			fail("OPT size %d", opt.UDPSize())
		}
	}
	if proto == "udp" && len(b) > 512 && (!c.Edns || c.Size <= 512) {
		fail("UDP reply of %d octets over the %d the client takes", len(b), max(512, int(c.Size)))
	}
	return bad
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

func hdr(id, flags, qd, an, ns, ar uint16) []byte {
	return cat(u16(id), u16(flags), u16(qd), u16(an), u16(ns), u16(ar))
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// name is the wire form of a dotted, fully qualified name.
func name(dotted string) []byte {
	var out []byte
	for _, l := range bytes.Split([]byte(dotted), []byte{'.'}) {
		if len(l) == 0 {
			continue
		}
		out = append(append(out, byte(len(l))), l...)
	}
	return append(out, 0)
}
