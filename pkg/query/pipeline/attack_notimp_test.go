package pipeline

// The NOTIMP answer to an unknown opcode carried RA and echoed RD and CD.
// Those flags are defined for opcode QUERY only (RFC 1035 §4.1.1 for RD
// and RA, RFC 4035 §3.2.2 for CD); CoreDNS clears them on NOTIMP, and a
// third-party EDNS compliance tester flagged the echo. For an opcode other
// than QUERY the reply has QR, the opcode echoed and NOTIMP, nothing else:
// over UDP and TCP, with and without a question section, with and without
// EDNS.

import (
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestAttackNotImpFlags(t *testing.T) {
	s, addr := start(t, Config{Resolver: &fakeResolver{}})
	for _, opcode := range []int{dns.OpcodeIQuery, dns.OpcodeStatus, 3, dns.OpcodeNotify, dns.OpcodeUpdate, 15} {
		for _, withQuestion := range []bool{true, false} {
			for _, edns := range []bool{false, true} {
				m := new(dns.Msg)
				m.SetQuestion("opcode.example.", dns.TypeSOA)
				m.Opcode = opcode
				m.RecursionDesired, m.CheckingDisabled, m.AuthenticatedData = true, true, true
				if edns {
					m.SetEdns0(1232, true)
				}
				if !withQuestion {
					m.Question = nil
				}
				b, err := m.Pack()
				if err != nil {
					t.Fatal(err)
				}
				for _, proto := range []string{"udp", "tcp"} {
					var out []byte
					if proto == "udp" {
						out = dnstest.ExchangeRawUDP(t, addr, b)
					} else {
						out = rawTCP(t, s.TCPAddrs()[0].String(), b)
					}
					if len(out) < 12 {
						t.Fatalf("opcode %d %s: %d-byte reply", opcode, proto, len(out))
					}
					flags := binary.BigEndian.Uint16(out[2:])
					rcode := int(flags & 0xF)
					ra, rd, cd, ad, aa := flags&0x0080 != 0, flags&0x0100 != 0, flags&0x0010 != 0, flags&0x0020 != 0, flags&0x0400 != 0
					if rcode != dns.RcodeNotImplemented || int(flags>>11&0xF) != opcode || flags&0x8000 == 0 {
						t.Fatalf("opcode %d %s: rcode %d opcode %d QR %v, want NOTIMP, the opcode echoed and QR", opcode, proto, rcode, flags>>11&0xF, flags&0x8000 != 0)
					}
					if ra || rd || cd || ad || aa {
						t.Errorf("opcode %d %s (question %v, EDNS %v): NOTIMP with RA=%v RD=%v CD=%v AD=%v AA=%v; want all clear (defined for QUERY only)",
							opcode, proto, withQuestion, edns, ra, rd, cd, ad, aa)
					}
				}
			}
		}
	}
	// QUERY's own errors keep them: RD and CD copied, RA set.
	m := new(dns.Msg)
	m.SetQuestion("opcode.example.", dns.TypeAXFR)
	m.RecursionDesired, m.CheckingDisabled = true, true
	r := dnstest.Exchange(t, addr, "udp", m)
	if r.Rcode != dns.RcodeRefused || !r.RecursionDesired || !r.CheckingDisabled || !r.RecursionAvailable {
		t.Errorf("REFUSED to a QUERY: %v; want RD and CD copied, RA set", r.MsgHdr)
	}
}
