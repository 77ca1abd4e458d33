package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// The protocol conformance table: RFC 8906 ("Failure to Communicate")
// sections 3 and 8, with RFC 1035 (header), RFC 6891 (EDNS), RFC 6895
// (opcodes, Z) and RFC 6840 (DO, CD, AD). Each case is sent over UDP and
// TCP to (a) a cluster name, answered authoritatively, and (b) an external
// name through the real cache and forwarder, twice: the first goes to the
// upstream, the second is a cache hit. Every reply is checked for rcode,
// every header flag, the question, and the OPT record.

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

type confCase struct {
	name string
	// The query.
	opcode     int
	hflags     uint16 // header bits: RD, CD, AD, Z
	noQuestion bool
	qtype      uint16 // 0: A (cluster) or A (external); big cases pick their own
	big        bool   // ask the name whose answer is over 512 octets
	edns       bool
	version    uint8
	eflags     uint16
	size       uint16
	options    []byte // OPT rdata
	// The expectation, for both targets. A cluster answer also has AA
	// when the rcode is NOERROR or NXDOMAIN and the reply is not an
	// error reply (errReply).
	rcode    int
	errReply bool // no records at all (NOTIMP, BADVERS)
	answer   bool // at least one answer record
	tc       bool // over UDP only; never over TCP
	question bool // the question is echoed
}

func conformanceCases() []confCase {
	unknownOpt := []byte{0x00, 0x64, 0x00, 0x04, 1, 2, 3, 4} // option 100, 4 octets
	return []confCase{
		// RFC 1035 §4.1.1: a plain query, RD copied, RA set (we recurse).
		{name: "plain", hflags: hRD, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "plain EDNS0", hflags: hRD, edns: true, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RFC 8906 §3.1.2 / RFC 1035 §4.1.1: Z must be zero in replies and
		// is ignored in queries.
		{name: "Z bit set", hflags: hRD | hZ, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "Z bit set, EDNS0", hflags: hRD | hZ, edns: true, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RFC 8906 §3.1.3 / RFC 3597: an unknown type is NODATA, not an error.
		{name: "TYPE666", hflags: hRD, qtype: 666, rcode: dns.RcodeSuccess, question: true},
		{name: "TYPE666 EDNS0", hflags: hRD, qtype: 666, edns: true, size: 1232, rcode: dns.RcodeSuccess, question: true},
		// RFC 8906 §3.1.4 / RFC 6895 §2.2: unknown opcodes are NOTIMP,
		// never FORMERR, with no answer data; with and without a question.
		// (CoreDNS echoes no question and drops the OPT; we echo what we
		// could read and answer EDNS with EDNS.)
		{name: "opcode 15", opcode: 15, hflags: hRD, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		{name: "opcode 15, no question", opcode: 15, noQuestion: true, rcode: dns.RcodeNotImplemented, errReply: true},
		{name: "opcode 15, no question, RD", opcode: 15, hflags: hRD, noQuestion: true, rcode: dns.RcodeNotImplemented, errReply: true},
		{name: "opcode 15, no question, EDNS0", opcode: 15, noQuestion: true, edns: true, size: 1232, rcode: dns.RcodeNotImplemented, errReply: true},
		{name: "opcode 15 EDNS0", opcode: 15, hflags: hRD, edns: true, size: 1232, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		{name: "opcode 3 (unassigned)", opcode: 3, hflags: hRD, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		{name: "opcode IQUERY", opcode: dns.OpcodeIQuery, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		{name: "opcode STATUS, no question", opcode: dns.OpcodeStatus, noQuestion: true, rcode: dns.RcodeNotImplemented, errReply: true},
		{name: "opcode NOTIFY", opcode: dns.OpcodeNotify, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		{name: "opcode UPDATE", opcode: dns.OpcodeUpdate, rcode: dns.RcodeNotImplemented, errReply: true, question: true},
		// RFC 8906 §3.2.2 / RFC 6891 §6.1.2: unknown options are ignored
		// and not echoed.
		{name: "unknown EDNS option", hflags: hRD, edns: true, size: 1232, options: unknownOpt, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RFC 8906 §3.2.1 / RFC 6891 §6.1.3: version 1 is BADVERS with a
		// version-0 OPT, with and without options; no answer data.
		{name: "EDNS version 1", hflags: hRD, edns: true, version: 1, size: 1232, rcode: dns.RcodeBadVers, errReply: true, question: true},
		{name: "EDNS version 1, unknown option", hflags: hRD, edns: true, version: 1, size: 1232, options: unknownOpt, rcode: dns.RcodeBadVers, errReply: true, question: true},
		{name: "EDNS version 1, unknown flag", hflags: hRD, edns: true, version: 1, eflags: 0x40, size: 1232, rcode: dns.RcodeBadVers, errReply: true, question: true},
		// RFC 8906 §3.2.3 / RFC 6891 §6.1.4: flags other than DO are
		// ignored and not echoed.
		{name: "EDNS flag 0x40", hflags: hRD, edns: true, eflags: 0x40, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "EDNS all undefined flags", hflags: hRD, edns: true, eflags: eMBZ, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "EDNS all flags", hflags: hRD, edns: true, eflags: 0xFFFF, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RFC 6840 §5.9 / RFC 4035 §3.2.2: DO echoed in the OPT, CD copied;
		// §5.8: AD only when the data is validated (never here: the cluster
		// zone is unsigned and the test upstream sets no AD).
		{name: "DO", hflags: hRD, edns: true, eflags: eDO, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "CD", hflags: hRD | hCD, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "DO and CD", hflags: hRD | hCD, edns: true, eflags: eDO, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "AD in the query", hflags: hRD | hAD, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "AD and DO in the query", hflags: hRD | hAD, edns: true, eflags: eDO, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RFC 6891 §6.2.5: a size under 512 is taken as 512. An answer
		// under 512 octets fits; one over it is truncated over UDP.
		{name: "EDNS size 100, small answer", hflags: hRD, edns: true, size: 100, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "EDNS size 0, small answer", hflags: hRD, edns: true, size: 0, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "EDNS size 100, big answer", hflags: hRD, edns: true, size: 100, big: true, rcode: dns.RcodeSuccess, answer: true, tc: true, question: true},
		{name: "no EDNS, big answer", hflags: hRD, big: true, rcode: dns.RcodeSuccess, answer: true, tc: true, question: true},
		{name: "EDNS size 4096, big answer", hflags: hRD, edns: true, size: 4096, big: true, rcode: dns.RcodeSuccess, answer: true, question: true},
		// RD clear. A judgement for a caching forwarder (answer from cache,
		// forward, or REFUSED): we do what CoreDNS (cache + forward) does,
		// answer from the cache and resolve a miss upstream, with RD clear
		// in the reply and RA set. The cluster zone is ours, RD or not.
		{name: "RD clear", rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "RD clear EDNS0", edns: true, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
		{name: "RD clear, CD", hflags: hCD, edns: true, eflags: eDO, size: 1232, rcode: dns.RcodeSuccess, answer: true, question: true},
	}
}

// confTarget is where a case's question goes.
type confTarget struct {
	name  string
	cache bool // the name goes through cache and upstream (not authoritative)
	// question returns the name and type for case i, protocol proto.
	question func(c confCase, i int, proto string) (string, uint16)
}

func confQuery(c confCase, id uint16, qname string, qtype uint16) []byte {
	var ar uint16
	if c.edns {
		ar = 1
	}
	var qd uint16 = 1
	if c.noQuestion {
		qd = 0
	}
	b := hdr(id, uint16(c.opcode)<<11|c.hflags, qd, 0, 0, ar)
	if !c.noQuestion {
		b = cat(b, name(qname), u16(qtype), u16(dns.ClassINET))
	}
	if c.edns {
		b = cat(b, []byte{0}, u16(dns.TypeOPT), u16(c.size), []byte{0, c.version}, u16(c.eflags), u16(uint16(len(c.options))), c.options)
	}
	return b
}

// checkConformance checks the reply b to query pkt against c; it returns
// the problems found, empty when the reply conforms.
func checkConformance(c confCase, tgt confTarget, proto string, pkt, b []byte) []string {
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
	if rcode != c.rcode {
		fail("rcode %s, want %s", dns.RcodeToString[rcode], dns.RcodeToString[c.rcode])
	}
	bit := func(name string, mask uint16, want bool) {
		if got := flags&mask != 0; got != want {
			fail("%s=%v, want %v", name, got, want)
		}
	}
	bit("QR", hQR, true)
	if op := int(flags>>11) & 0xF; op != c.opcode {
		fail("opcode %d, want %d (copied)", op, c.opcode)
	}
	wantAA := !tgt.cache && !c.errReply && (c.rcode == dns.RcodeSuccess || c.rcode == dns.RcodeNameError)
	bit("AA", hAA, wantAA)
	bit("TC", hTC, c.tc && proto == "udp")
	bit("RD", hRD, qflags&hRD != 0)
	bit("RA", hRA, true)
	bit("Z", hZ, false)
	bit("AD", hAD, false)
	bit("CD", hCD, qflags&hCD != 0)
	// The question.
	wantQD := 0
	if c.question {
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
	case c.errReply:
		if len(r.Answer)+len(r.Ns) != 0 || len(r.Extra) > btoi(opt != nil) {
			fail("error reply with records: %d answer, %d authority, %d additional", len(r.Answer), len(r.Ns), len(r.Extra))
		}
	case c.tc && proto == "udp":
		if len(r.Answer) != 0 {
			fail("truncated reply with %d answers", len(r.Answer))
		}
	case c.answer:
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
	case !c.edns && opt != nil:
		fail("OPT in the reply to a query without one")
	case c.edns && opt == nil:
		fail("no OPT in the reply to an EDNS query")
	case opt != nil:
		if opt.Version() != 0 {
			fail("OPT version %d, want 0", opt.Version())
		}
		if len(opt.Option) != 0 {
			fail("OPT with %d options, want none echoed", len(opt.Option))
		}
		if got, want := opt.Do(), c.eflags&eDO != 0; got != want {
			fail("DO=%v, want %v", got, want)
		}
		if f := uint16(opt.Hdr.Ttl) & eMBZ; f != 0 {
			fail("EDNS flags %#x echoed, want 0", f)
		}
		if opt.UDPSize() < 512 {
			fail("OPT size %d", opt.UDPSize())
		}
	}
	if proto == "udp" && len(b) > 512 && (!c.edns || c.size <= 512) {
		fail("UDP reply of %d octets over the %d the client takes", len(b), max(512, int(c.size)))
	}
	return bad
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// conformanceServer runs a server with the fake cluster zone (plus a name
// whose answer is over 512 octets) and the real cache and forwarder in
// front of a test upstream.
func conformanceServer(t *testing.T) (udp, tcp string, up *dnstest.Server) {
	t.Helper()
	zone := dnstest.Zone(300)
	up = dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		// big*: 40 A records, ~700 octets, over 512 and under 1232.
		if q := r.Question[0]; strings.HasPrefix(strings.ToLower(q.Name), "big") && q.Qtype == dns.TypeA {
			m := new(dns.Msg)
			m.SetReply(r)
			if o := r.IsEdns0(); o != nil {
				m.SetEdns0(o.UDPSize(), o.Do())
			}
			for i := 0; i < 40; i++ {
				m.Answer = append(m.Answer, mustRR("%s 300 IN A 192.0.2.%d", q.Name, i))
			}
			dnstest.WriteTruncated(w, r, m) // the forwarder retries over TCP
			return
		}
		zone(w, r)
	})
	fwd, err := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Size: 1000}, fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl := testCluster()
	var many []dns.RR
	for i := 0; i < 40; i++ { // 40 A records: ~700 octets
		many = append(many, mustRR("many.team-a.svc.cluster.local. 5 IN A 10.96.1.%d", i))
	}
	cl.names["many.team-a.svc.cluster.local."] = many
	s, addr := start(t, Config{Resolver: c, HitCache: c, Cluster: cl})
	return addr, s.TCPAddrs()[0].String(), up
}

func conformanceTargets() []confTarget {
	return []confTarget{
		{name: "cluster", question: func(c confCase, i int, proto string) (string, uint16) {
			if c.big {
				return "Many.Team-A.svc.cluster.local.", dns.TypeA
			}
			if c.qtype != 0 {
				return "web.team-a.svc.cluster.local.", c.qtype
			}
			return "Web.Team-A.svc.Cluster.Local.", dns.TypeA
		}},
		// A fresh name per case and protocol, so that the first query is a
		// miss (upstream) and the second a hit (cache).
		{name: "external", cache: true, question: func(c confCase, i int, proto string) (string, uint16) {
			if c.big {
				return fmt.Sprintf("Big%d-%s.Example.test.", i, proto), dns.TypeA
			}
			qt := c.qtype
			if qt == 0 {
				qt = dns.TypeA
			}
			return fmt.Sprintf("C%d-%s.Example.test.", i, proto), qt
		}},
	}
}

// TestConformance runs the table; a failing case names every problem of
// its reply.
func TestConformance(t *testing.T) {
	udp, tcp, _ := conformanceServer(t)
	for _, tgt := range conformanceTargets() {
		for i, c := range conformanceCases() {
			for _, proto := range []string{"udp", "tcp"} {
				t.Run(tgt.name+"/"+proto+"/"+c.name, func(t *testing.T) {
					qname, qtype := tgt.question(c, i, proto)
					passes := []string{"first"}
					if tgt.cache {
						passes = []string{"miss", "hit"}
					}
					for j, pass := range passes {
						pkt := confQuery(c, uint16(1000+i*4+j), qname, qtype)
						var b []byte
						if proto == "udp" {
							b = raw(t, udp, pkt)
						} else {
							b = rawTCP(t, tcp, pkt)
						}
						for _, p := range checkConformance(c, tgt, proto, pkt, b) {
							t.Errorf("%s: %s", pass, p)
						}
					}
				})
			}
		}
	}
}
