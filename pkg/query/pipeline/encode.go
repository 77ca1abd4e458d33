package pipeline

import (
	"encoding/binary"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// ourUDPSize is the EDNS0 buffer size the pipeline advertises in replies.
const ourUDPSize = 1232

func (c *call) setMaxSize(maxUDP int) {
	if c.req.Proto == "tcp" {
		c.maxSize = dns.MaxMsgSize
		return
	}
	c.maxSize = dns.MinMsgSize
	if c.q.EDNS && int(c.q.UDPSize) > c.maxSize {
		c.maxSize = min(int(c.q.UDPSize), maxUDP)
	}
}

// encode packs m (a stage's answer, read-only) as the reply to c and
// appends it to dst.
func (p *Pipeline) encode(dst []byte, c *call, m *dns.Msg) []byte {
	start := len(dst)
	if c.q.EDNS && len(m.Extra) > 0 {
		c.ede.passOn(m)
	}
	dst, err := p.pack(dst, c, m)
	if err != nil {
		c.fail, c.failErr = failPack, err
		return p.errorReply(dst[:start], c, dns.RcodeServerFailure)
	}
	return p.finish(dst, start, c, m.Rcode)
}

// pack appends m packed with the lower-case question of c: no OPT, header
// flags as m has them. finish makes it the reply to a particular request.
func (p *Pipeline) pack(dst []byte, c *call, m *dns.Msg) ([]byte, error) {
	out := dns.Msg{MsgHdr: m.MsgHdr, Compress: true, Answer: m.Answer, Ns: m.Ns, Extra: m.Extra}
	out.Question = []dns.Question{{Name: c.q.Name, Qtype: c.q.Type, Qclass: c.q.Class}}
	if hasOPT(m.Extra) {
		out.Extra = make([]dns.RR, 0, len(m.Extra))
		for _, rr := range m.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				out.Extra = append(out.Extra, rr)
			}
		}
	}
	out.Rcode = m.Rcode & 0xF
	if p.cfg.MinimalResponses && minimizable(m) {
		out.Ns, out.Extra = nil, nil
	}
	start := len(dst)
	b, err := out.PackBuffer(dst[start:cap(dst)])
	if err != nil {
		return dst, err
	}
	// PackBuffer used dst's spare capacity when it fitted, else allocated.
	return append(dst[:start], b...), nil
}

func hasOPT(rrs []dns.RR) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			return true
		}
	}
	return false
}

// optLen is the size of the OPT record the pipeline appends (no options).
const optLen = 11

// fits reports whether a packed reply of n bytes (no OPT) fits the client's
// size once the server's OPT is added.
func (c *call) fits(n int) bool {
	if c.q.EDNS {
		n += optLen + c.ede.size()
		if c.hasNSID {
			n += dnswire.NSIDLen(c.nsid)
		}
	}
	return n <= c.maxSize
}

// finish turns the packed reply at dst[start:] into the reply to c: the
// client's ID, RD and CD, QR and RA set, the question in the client's case,
// an OPT when the client sent one, and TC with empty sections when the
// reply does not fit the client's size. rcode may be extended (> 15).
func (p *Pipeline) finish(dst []byte, start int, c *call, rcode int) []byte {
	flags := patchHeader(dst[start:], c, rcode)
	if rcode == dns.RcodeSuccess && p.loadBalance.Load() {
		// Round robin, as CoreDNS's loadbalance: each reply's address
		// RRsets rotated one step further than the last reply's, in the
		// copy being sent (never in a stored reply).
		dnswire.RotateAddrs(dst[start:], p.rotation.Add(1))
	}
	switch {
	case c.optAt > 0:
		dst = storedOPT(dst, start, c, rcode)
	case c.q.EDNS:
		dst = appendOPT(dst, start, c, rcode)
	}
	if len(dst)-start <= c.maxSize {
		return dst
	}
	return truncate(dst, start, c, rcode, flags)
}

// truncatedReply appends the TC reply to c for the packed reply wire, which
// does not fit: its header and question only. Nothing past the question is
// copied.
func (p *Pipeline) truncatedReply(dst []byte, start int, wire []byte, c *call, rcode int) []byte {
	qEnd := dnswire.HeaderLen + len(c.q.RawName) + 4
	if len(wire) < qEnd || binary.BigEndian.Uint16(wire[4:]) != 1 {
		// Not a packed reply to this question (never the case): the
		// general path.
		return p.finish(append(dst, wire...), start, c, rcode)
	}
	dst = append(dst, wire[:qEnd]...)
	flags := patchHeader(dst[start:], c, rcode)
	return truncate(dst, start, c, rcode, flags)
}

// patchHeader makes the header and question of m (a packed reply) the
// reply to c's and returns the flags it wrote.
func patchHeader(m []byte, c *call, rcode int) uint16 {
	binary.BigEndian.PutUint16(m[0:], c.q.ID)
	flags := binary.BigEndian.Uint16(m[2:])
	flags &^= dnswire.FlagRD | dnswire.FlagCD | dnswire.FlagTC | 0x7800 | 0xF // opcode and rcode
	flags |= dnswire.FlagQR | dnswire.FlagRA | uint16(rcode&0xF)
	flags |= c.q.Flags & (dnswire.FlagRD | dnswire.FlagCD)
	// RFC 6840 §5.8: AD only for clients that asked for DNSSEC answers.
	if !c.q.DO && c.q.Flags&dnswire.FlagAD == 0 {
		flags &^= dnswire.FlagAD
	}
	flags = c.headerFlags(flags)
	binary.BigEndian.PutUint16(m[2:], flags)
	n := len(c.q.RawName)
	if len(m) >= dnswire.HeaderLen+n && binary.BigEndian.Uint16(m[4:]) == 1 {
		copy(m[dnswire.HeaderLen:], c.q.RawName)
	}
	return flags
}

// truncate cuts the reply at dst[start:] (header already patched, flags as
// written) to its header and question with TC set, so the client retries
// over TCP, and appends an OPT when the client sent one.
func truncate(dst []byte, start int, c *call, rcode int, flags uint16) []byte {
	qEnd := start + dnswire.HeaderLen + len(c.q.RawName) + 4
	dst = dst[:qEnd]
	m := dst[start:]
	binary.BigEndian.PutUint16(m[2:], flags|dnswire.FlagTC)
	binary.BigEndian.PutUint16(m[6:], 0)
	binary.BigEndian.PutUint16(m[8:], 0)
	binary.BigEndian.PutUint16(m[10:], 0)
	if c.q.EDNS {
		dst = appendOPT(dst, start, c, rcode)
	}
	return dst
}

// appendOPT appends our OPT, with c's EDE options, to the message at
// dst[start:].
func appendOPT(dst []byte, start int, c *call, rcode int) []byte {
	m := dnswire.AppendOPT(dst[start:], ourUDPSize, c.q.DO, uint8(rcode>>4))
	opt := len(m) - optLen
	if c.ede.n > 0 {
		m = c.ede.appendTo(m, opt)
	}
	if c.hasNSID {
		m = dnswire.AppendNSID(m, opt, c.nsid)
	}
	return append(dst[:start], m...)
}

// storedOPT deals with the OPT record a stored reply at dst[start:] ends
// with (at c.optAt), which holds its upstream's EDE options: for a client
// that sent EDNS it becomes the reply's OPT (our size, the client's DO,
// the upstream's options then c's), for one that did not it goes.
func storedOPT(dst []byte, start int, c *call, rcode int) []byte {
	m := dst[start:]
	if !c.q.EDNS {
		m = dnswire.DropLast(m, c.optAt)
		return dst[:start+len(m)]
	}
	dnswire.PatchOPT(m, c.optAt, ourUDPSize, c.q.DO, uint8(rcode>>4))
	if c.ede.n > 0 {
		m = c.ede.appendTo(m, c.optAt)
	}
	if c.hasNSID {
		m = dnswire.AppendNSID(m, c.optAt, c.nsid)
	}
	return append(dst[:start], m...)
}

// errorReply appends a reply with no records and the given rcode: the
// client's question when it could be read, an OPT when the client sent one.
func (p *Pipeline) errorReply(dst []byte, c *call, rcode int) []byte {
	start := len(dst)
	var h [dnswire.HeaderLen]byte
	binary.BigEndian.PutUint16(h[0:], c.q.ID)
	flags := dnswire.FlagQR | dnswire.FlagRA | c.q.Flags&(dnswire.FlagRD|dnswire.FlagCD|0x7800) | uint16(rcode&0xF)
	if c.q.Opcode() != dns.OpcodeQuery {
		// RD, RA and CD are defined for QUERY only (RFC 1035 §4.1.1, RFC
		// 4035 §3.2.2): the NOTIMP to another opcode has QR, the opcode
		// and the rcode, as CoreDNS's.
		flags = dnswire.FlagQR | c.q.Flags&0x7800 | uint16(rcode&0xF)
	}
	binary.BigEndian.PutUint16(h[2:], flags)
	dst = append(dst, h[:]...)
	if c.parsed && c.q.QEnd <= len(c.req.Packet) {
		binary.BigEndian.PutUint16(dst[start+4:], 1)
		dst = append(dst, c.req.Packet[dnswire.HeaderLen:c.q.QEnd]...)
	}
	if c.q.EDNS {
		dst = appendOPT(dst, start, c, rcode)
	}
	return dst
}
