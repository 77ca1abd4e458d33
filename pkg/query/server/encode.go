package server

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// ourUDPSize is the EDNS0 buffer size the server advertises in replies.
const ourUDPSize = 1232

// request is one query being answered.
type request struct {
	q      dnswire.Query
	proto  string
	client netip.Addr
	start  time.Time
	// maxSize is the largest reply the client accepts on this transport.
	maxSize int
	// parsed is false when the question could not be read (FORMERR
	// replies then carry no question).
	parsed bool
	// raw is the packet; rawQuestion reads the question bytes from it.
	raw []byte
	// listener is the index in Config.Listen of the address the query
	// came in on.
	listener int
	// fail and failErr say why the server answers SERVFAIL, for the
	// failure log (failures.go); empty when a stage answered it.
	fail    string
	failErr error
	// asked is the name the client asked when a rewrite rule changed
	// q.Name (rewrite.go); revert maps a reply's names back to it.
	asked  string
	revert func(*dns.Msg) *dns.Msg
}

func (r *request) setMaxSize(maxUDP int) {
	if r.proto == "tcp" {
		r.maxSize = dns.MaxMsgSize
		return
	}
	r.maxSize = dns.MinMsgSize
	if r.q.EDNS && int(r.q.UDPSize) > r.maxSize {
		r.maxSize = min(int(r.q.UDPSize), maxUDP)
	}
}

// encode packs m (a stage's answer, read-only) as the reply to r and
// appends it to dst.
func (s *Server) encode(dst []byte, r *request, m *dns.Msg) []byte {
	start := len(dst)
	dst, err := s.pack(dst, r, m)
	if err != nil {
		r.fail, r.failErr = failPack, err
		return s.errorReply(dst[:start], r, dns.RcodeServerFailure)
	}
	return s.finish(dst, start, r, m.Rcode)
}

// pack appends m packed with the lower-case question of r: no OPT, header
// flags as m has them. finish makes it the reply to a particular request.
func (s *Server) pack(dst []byte, r *request, m *dns.Msg) ([]byte, error) {
	out := dns.Msg{MsgHdr: m.MsgHdr, Compress: true, Answer: m.Answer, Ns: m.Ns, Extra: m.Extra}
	out.Question = []dns.Question{{Name: r.askedName(), Qtype: r.q.Type, Qclass: r.q.Class}}
	if hasOPT(m.Extra) {
		out.Extra = make([]dns.RR, 0, len(m.Extra))
		for _, rr := range m.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				out.Extra = append(out.Extra, rr)
			}
		}
	}
	out.Rcode = m.Rcode & 0xF
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

// optLen is the size of the OPT record the server appends (no options).
const optLen = 11

// fits reports whether a packed reply of n bytes (no OPT) fits the client's
// size once the server's OPT is added.
func (r *request) fits(n int) bool {
	if r.q.EDNS {
		n += optLen
	}
	return n <= r.maxSize
}

// finish turns the packed reply at dst[start:] into the reply to r: the
// client's ID, RD and CD, QR and RA set, the question in the client's case,
// an OPT when the client sent one, and TC with empty sections when the
// reply does not fit the client's size. rcode may be extended (> 15).
func (s *Server) finish(dst []byte, start int, r *request, rcode int) []byte {
	flags := patchHeader(dst[start:], r, rcode)
	if rcode == dns.RcodeSuccess && s.loadBalance.Load() {
		// Round robin, as CoreDNS's loadbalance: each reply's address
		// RRsets rotated one step further than the last reply's, in the
		// copy being sent (never in a stored reply).
		dnswire.RotateAddrs(dst[start:], s.rotation.Add(1))
	}
	if r.q.EDNS {
		dst = appendOPT(dst, start, r, rcode)
	}
	if len(dst)-start <= r.maxSize {
		return dst
	}
	return truncate(dst, start, r, rcode, flags)
}

// truncatedReply appends the TC reply to r for the packed reply wire, which
// does not fit: its header and question only. Nothing past the question is
// copied.
func (s *Server) truncatedReply(dst []byte, start int, wire []byte, r *request, rcode int) []byte {
	qEnd := dnswire.HeaderLen + len(r.q.RawName) + 4
	if len(wire) < qEnd || binary.BigEndian.Uint16(wire[4:]) != 1 {
		// Not a packed reply to this question (never the case): the
		// general path.
		return s.finish(append(dst, wire...), start, r, rcode)
	}
	dst = append(dst, wire[:qEnd]...)
	flags := patchHeader(dst[start:], r, rcode)
	return truncate(dst, start, r, rcode, flags)
}

// patchHeader makes the header and question of m (a packed reply) the
// reply to r's and returns the flags it wrote.
func patchHeader(m []byte, r *request, rcode int) uint16 {
	binary.BigEndian.PutUint16(m[0:], r.q.ID)
	flags := binary.BigEndian.Uint16(m[2:])
	flags &^= dnswire.FlagRD | dnswire.FlagCD | dnswire.FlagTC | 0x7800 | 0xF // opcode and rcode
	flags |= dnswire.FlagQR | dnswire.FlagRA | uint16(rcode&0xF)
	flags |= r.q.Flags & (dnswire.FlagRD | dnswire.FlagCD)
	// RFC 6840 §5.8: AD only for clients that asked for DNSSEC answers.
	if !r.q.DO && r.q.Flags&dnswire.FlagAD == 0 {
		flags &^= dnswire.FlagAD
	}
	binary.BigEndian.PutUint16(m[2:], flags)
	n := len(r.q.RawName)
	if len(m) >= dnswire.HeaderLen+n && binary.BigEndian.Uint16(m[4:]) == 1 {
		copy(m[dnswire.HeaderLen:], r.q.RawName)
	}
	return flags
}

// truncate cuts the reply at dst[start:] (header already patched, flags as
// written) to its header and question with TC set, so the client retries
// over TCP, and appends an OPT when the client sent one.
func truncate(dst []byte, start int, r *request, rcode int, flags uint16) []byte {
	qEnd := start + dnswire.HeaderLen + len(r.q.RawName) + 4
	dst = dst[:qEnd]
	m := dst[start:]
	binary.BigEndian.PutUint16(m[2:], flags|dnswire.FlagTC)
	binary.BigEndian.PutUint16(m[6:], 0)
	binary.BigEndian.PutUint16(m[8:], 0)
	binary.BigEndian.PutUint16(m[10:], 0)
	if r.q.EDNS {
		dst = appendOPT(dst, start, r, rcode)
	}
	return dst
}

// appendOPT appends our OPT to the message at dst[start:].
func appendOPT(dst []byte, start int, r *request, rcode int) []byte {
	m := dnswire.AppendOPT(dst[start:], ourUDPSize, r.q.DO, uint8(rcode>>4))
	return append(dst[:start], m...)
}

// errorReply appends a reply with no records and the given rcode: the
// client's question when it could be read, an OPT when the client sent one.
func (s *Server) errorReply(dst []byte, r *request, rcode int) []byte {
	start := len(dst)
	var h [dnswire.HeaderLen]byte
	binary.BigEndian.PutUint16(h[0:], r.q.ID)
	flags := dnswire.FlagQR | dnswire.FlagRA | r.q.Flags&(dnswire.FlagRD|dnswire.FlagCD|0x7800) | uint16(rcode&0xF)
	binary.BigEndian.PutUint16(h[2:], flags)
	dst = append(dst, h[:]...)
	if r.parsed && r.q.QEnd <= len(r.raw) {
		binary.BigEndian.PutUint16(dst[start+4:], 1)
		dst = append(dst, r.raw[dnswire.HeaderLen:r.q.QEnd]...)
	}
	if r.q.EDNS {
		dst = appendOPT(dst, start, r, rcode)
	}
	return dst
}
