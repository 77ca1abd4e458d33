package pipeline

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/internal/dnstest"
)

// Hostile and broken input: every malformed packet gets the outcome RFC
// 1035/6891/8482 prescribe, over UDP and over TCP alike.

// outcome is what the server must do with a packet.
type outcome int

const (
	drop     outcome = -1 // no reply at all
	answered outcome = -2 // answered from the pipeline (NOERROR)
)

// wire helpers: a header, names and records in raw bytes.

func hdr(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 12)
	for i, v := range []uint16{id, flags, qd, an, ns, ar} {
		binary.BigEndian.PutUint16(b[2*i:], v)
	}
	return b
}

func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// name is the uncompressed wire form of dotted labels ("" is the root).
func name(dotted string) []byte {
	var out []byte
	for _, l := range strings.Split(strings.TrimSuffix(dotted, "."), ".") {
		if l == "" {
			continue
		}
		out = append(append(out, byte(len(l))), l...)
	}
	return append(out, 0)
}

// optRR is an OPT record: root owner, UDP size, extended rcode/version/DO
// in the TTL, and rdata.
func optRR(size uint16, version uint8, rdata []byte) []byte {
	return cat([]byte{0}, u16(dns.TypeOPT), u16(size), []byte{0, version, 0, 0}, u16(uint16(len(rdata))), rdata)
}

const rd = 1 << 8

func badPacketCases(t *testing.T) []struct {
	name string
	pkt  []byte
	want outcome // an rcode, drop or answered
} {
	q := cat(name("a.example."), u16(dns.TypeA), u16(dns.ClassINET))
	label64 := cat([]byte{64}, []byte(strings.Repeat("x", 64)), []byte{0})
	// 4 labels of 63 plus one of 1: 4*64 + 2 + 1 = 259 octets.
	long := []byte{}
	for i := 0; i < 4; i++ {
		long = append(append(long, 63), strings.Repeat("y", 63)...)
	}
	long = append(long, 1, 'z', 0)
	// The longest legal name: 3 labels of 63, one of 61, root = 255.
	longest := []byte{}
	for i := 0; i < 3; i++ {
		longest = append(append(longest, 63), strings.Repeat("w", 63)...)
	}
	longest = append(append(longest, 61), strings.Repeat("w", 61)...)
	longest = append(longest, 0)
	padding := cat(u16(12), u16(4000), make([]byte, 4000)) // EDNS padding option, 4000 octets
	return []struct {
		name string
		pkt  []byte
		want outcome
	}{
		// Headers.
		{"empty packet", nil, drop},
		{"header of 11 octets", hdr(1, rd, 1, 0, 0, 0)[:11], drop},
		{"response sent as a query (QR=1)", cat(hdr(2, 1<<15|rd, 1, 0, 0, 0), q), drop},
		{"response with rcode", cat(hdr(3, 1<<15|dns.RcodeNameError, 1, 0, 0, 0), q), drop},
		{"QDCOUNT 0", hdr(4, rd, 0, 0, 0, 0), dns.RcodeFormatError},
		{"QDCOUNT 2", cat(hdr(5, rd, 2, 0, 0, 0), q, q), dns.RcodeFormatError},
		{"QDCOUNT 1, no question", hdr(6, rd, 1, 0, 0, 0), dns.RcodeFormatError},
		{"opcode NOTIFY", cat(hdr(7, dns.OpcodeNotify<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		{"opcode UPDATE", cat(hdr(8, dns.OpcodeUpdate<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		{"opcode IQUERY", cat(hdr(9, dns.OpcodeIQuery<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		// Questions.
		{"question cut inside a label", cat(hdr(10, rd, 1, 0, 0, 0), []byte{7, 'e', 'x', 'a'}), dns.RcodeFormatError},
		{"question cut before type", cat(hdr(11, rd, 1, 0, 0, 0), name("a.example.")), dns.RcodeFormatError},
		{"question cut inside class", cat(hdr(12, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), []byte{0}), dns.RcodeFormatError},
		{"compression pointer loop in question", cat(hdr(13, rd, 1, 0, 0, 0), []byte{0xC0, 12}, u16(1), u16(1)), dns.RcodeFormatError},
		{"pointer loop after a label", cat(hdr(14, rd, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 12}, u16(1), u16(1)), dns.RcodeFormatError},
		{"forward compression pointer", cat(hdr(15, rd, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 20}, u16(1), u16(1), name("b.")), dns.RcodeFormatError},
		{"label of 64 octets", cat(hdr(16, rd, 1, 0, 0, 0), label64, u16(1), u16(1)), dns.RcodeFormatError},
		{"reserved label type 0x80", cat(hdr(17, rd, 1, 0, 0, 0), []byte{0x81, 'a', 0}, u16(1), u16(1)), dns.RcodeFormatError},
		{"name of 259 octets", cat(hdr(18, rd, 1, 0, 0, 0), long, u16(1), u16(1)), dns.RcodeFormatError},
		{"name of 255 octets (legal)", cat(hdr(19, rd, 1, 0, 0, 0), longest, u16(1), u16(1)), answered},
		{"class CHAOS", cat(hdr(20, rd, 1, 0, 0, 0), name("version.bind."), u16(dns.TypeTXT), u16(dns.ClassCHAOS)), dns.RcodeRefused},
		{"class 42", cat(hdr(21, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), u16(42)), dns.RcodeRefused},
		{"class ANY", cat(hdr(22, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), u16(dns.ClassANY)), dns.RcodeRefused},
		{"qtype ANY (RFC 8482)", cat(hdr(23, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeANY), u16(1)), answered},
		{"qtype AXFR", cat(hdr(24, 0, 1, 0, 0, 0), name("example."), u16(dns.TypeAXFR), u16(1)), dns.RcodeRefused},
		{"qtype IXFR", cat(hdr(25, 0, 1, 0, 0, 0), name("example."), u16(dns.TypeIXFR), u16(1)), dns.RcodeRefused},
		{"qtype OPT", cat(hdr(26, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeOPT), u16(1)), dns.RcodeFormatError},
		{"qtype 0", cat(hdr(27, rd, 1, 0, 0, 0), name("a.example."), u16(0), u16(1)), dns.RcodeFormatError},
		{"trailing octets after the question", cat(hdr(28, rd, 1, 0, 0, 0), q, []byte("garbage")), answered},
		// EDNS.
		{"EDNS version 1 (BADVERS)", cat(hdr(29, rd, 1, 0, 0, 1), q, optRR(1232, 1, nil)), dns.RcodeBadVers},
		{"EDNS version 255", cat(hdr(30, rd, 1, 0, 0, 1), q, optRR(1232, 255, nil)), dns.RcodeBadVers},
		{"two OPT records", cat(hdr(31, rd, 1, 0, 0, 2), q, optRR(1232, 0, nil), optRR(512, 0, nil)), dns.RcodeFormatError},
		{"OPT with a non-root owner", cat(hdr(32, rd, 1, 0, 0, 1), q, []byte{1, 'x'}, optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"OPT RDLENGTH past the end", cat(hdr(33, rd, 1, 0, 0, 1), q, optRR(1232, 0, nil)[:9], u16(500)), dns.RcodeFormatError},
		{"huge OPT (4000 octets of padding)", cat(hdr(34, rd, 1, 0, 0, 1), q, optRR(65535, 0, padding)), answered},
		{"ARCOUNT 1, no record", cat(hdr(35, rd, 1, 0, 0, 1), q), dns.RcodeFormatError},
		{"ANCOUNT 3, no records", cat(hdr(36, rd, 1, 3, 0, 1), q, optRR(1232, 0, nil)), dns.RcodeFormatError},
		// A pointer loop in an additional record's owner is skipped, never
		// followed: the query itself is fine.
		{"pointer loop in an additional record", cat(hdr(37, rd, 1, 0, 0, 1), q, []byte{0xC0, 29}, u16(dns.TypeA), u16(1), []byte{0, 0, 0, 1}, u16(4), []byte{192, 0, 2, 1}), answered},
	}
}

// TestBadPacketTable sends every case over UDP and TCP and checks the
// outcome: the rcode (with the client's ID, QR set, and no question when
// the question could not be read), an answer, or silence.
func TestBadPacketTable(t *testing.T) {
	s, addr := start(t, Config{Resolver: &fakeResolver{}})
	tcpAddr := s.TCPAddrs()[0].String()
	for _, c := range badPacketCases(t) {
		for _, proto := range []string{"udp", "tcp"} {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				var b []byte
				if proto == "udp" {
					b = dnstest.ExchangeRawUDP(t, addr, c.pkt)
				} else {
					b = rawTCP(t, tcpAddr, c.pkt)
				}
				checkOutcome(t, c.pkt, b, c.want)
			})
		}
	}
	if n := s.Stats().Panics; n != 0 {
		t.Fatalf("%d panics recovered", n)
	}
	// The server still answers after all that.
	if r := dnstest.Exchange(t, addr, "udp", q("still.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after the bad packets: %v", r)
	}
}

func checkOutcome(t *testing.T, pkt, b []byte, want outcome) {
	t.Helper()
	if want == drop {
		if b != nil {
			t.Fatalf("got a reply (% x), want silence", b)
		}
		return
	}
	if b == nil {
		t.Fatalf("no reply, want %v", want)
	}
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	if r.Id != binary.BigEndian.Uint16(pkt) || !r.Response {
		t.Fatalf("reply ID %d QR %v, want ID %d and QR", r.Id, r.Response, binary.BigEndian.Uint16(pkt))
	}
	switch want {
	case answered:
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("want an answer, got %s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	default:
		if r.Rcode != int(want) {
			t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[int(want)])
		}
		if len(r.Answer) != 0 {
			t.Fatalf("error reply with %d answers", len(r.Answer))
		}
		if int(want) == dns.RcodeBadVers && r.IsEdns0() == nil {
			t.Fatalf("BADVERS without an OPT")
		}
	}
	if len(r.Question) > 1 {
		t.Fatalf("reply with %d questions", len(r.Question))
	}
}

// rawTCP sends b as one framed message on a new connection and returns
// the reply, or nil when the server closes the connection or says nothing
// for a short while.
func rawTCP(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(cat(u16(uint16(len(b))), b)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil
	}
	out := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, out); err != nil {
		t.Fatalf("reply cut short: %v", err)
	}
	return out
}
