package dnswire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// query builds a packed query; edns < 0 means no OPT.
func query(t testing.TB, name string, qtype uint16, edns int, do bool) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.Id = 0xBEEF
	m.RecursionDesired = true
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	if edns >= 0 {
		m.SetEdns0(uint16(edns), do)
	}
	return dnstest.Pack(m)
}

// header builds a raw header.
func header(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b[0:], id)
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint16(b[4:], qd)
	binary.BigEndian.PutUint16(b[6:], an)
	binary.BigEndian.PutUint16(b[8:], ns)
	binary.BigEndian.PutUint16(b[10:], ar)
	return b
}

// wireName is a name in wire form from its labels.
func wireName(labels ...string) []byte {
	var b []byte
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

func typeClass(qtype, qclass uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, qtype), qclass)
}

// opt is a raw OPT RR with the root owner.
func opt(size uint16, ttl uint32) []byte {
	b := []byte{0}
	b = binary.BigEndian.AppendUint16(b, dns.TypeOPT)
	b = binary.BigEndian.AppendUint16(b, size)
	b = binary.BigEndian.AppendUint32(b, ttl)
	return binary.BigEndian.AppendUint16(b, 0)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestParseQuery(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	// 3 x 64 + 62 + 1 = 255 octets: the longest legal name.
	longest := wireName(label63, label63, label63, strings.Repeat("b", 61))
	tooLong := wireName(label63, label63, label63, strings.Repeat("b", 62))
	withOPTVersion := func() []byte {
		m := new(dns.Msg)
		m.SetQuestion("example.com.", dns.TypeA)
		m.SetEdns0(1400, false)
		m.IsEdns0().SetVersion(1)
		return dnstest.Pack(m)
	}()
	aRR := cat(wireName("x"), typeClass(dns.TypeA, dns.ClassINET), []byte{0, 0, 0, 60, 0, 4, 192, 0, 2, 1})

	tests := []struct {
		name string
		pkt  []byte
		err  error
		// want's Name, Type and Class and the EDNS fields are checked
		// when err is nil.
		want    dnswire.Query
		edns    bool
		size    uint16
		do      bool
		version uint8
	}{
		{name: "plain", pkt: query(t, "www.Example.COM.", dns.TypeA, -1, false),
			want: dnswire.Query{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET}},
		{name: "edns do", pkt: query(t, "Example.com.", dns.TypeAAAA, 4096, true),
			want: dnswire.Query{Name: "example.com.", Type: dns.TypeAAAA, Class: dns.ClassINET}, edns: true, size: 4096, do: true},
		{name: "edns no do", pkt: query(t, "example.com.", dns.TypeMX, 512, false),
			want: dnswire.Query{Name: "example.com.", Type: dns.TypeMX, Class: dns.ClassINET}, edns: true, size: 512},
		{name: "edns version 1", pkt: withOPTVersion,
			want: dnswire.Query{Name: "example.com.", Type: dns.TypeA, Class: dns.ClassINET}, edns: true, size: 1400, version: 1},
		{name: "root", pkt: query(t, ".", dns.TypeNS, -1, false),
			want: dnswire.Query{Name: ".", Type: dns.TypeNS, Class: dns.ClassINET}},
		{name: "underscore star dash", pkt: query(t, "_Srv._tcp.*.a-b.example.", dns.TypeSRV, -1, false),
			want: dnswire.Query{Name: "_srv._tcp.*.a-b.example.", Type: dns.TypeSRV, Class: dns.ClassINET}},
		{name: "escaped dot and space", pkt: cat(header(1, 0, 1, 0, 0, 0), wireName("A.B", "C D", "Example"), typeClass(dns.TypeA, dns.ClassINET)),
			want: dnswire.Query{Name: `a\.b.c\ d.example.`, Type: dns.TypeA, Class: dns.ClassINET}},
		{name: "binary label", pkt: cat(header(1, 0, 1, 0, 0, 0), wireName("X\x00\xff"), typeClass(dns.TypeA, dns.ClassCHAOS)),
			want: dnswire.Query{Name: `x\000\255.`, Type: dns.TypeA, Class: dns.ClassCHAOS}},
		{name: "longest name", pkt: cat(header(1, 0, 1, 0, 0, 0), longest, typeClass(dns.TypeA, dns.ClassINET)),
			want: dnswire.Query{Name: label63 + "." + label63 + "." + label63 + "." + strings.Repeat("b", 61) + ".", Type: dns.TypeA, Class: dns.ClassINET}},
		{name: "OPT after an answer RR", pkt: cat(header(1, 0, 1, 1, 0, 1), wireName("a"), typeClass(dns.TypeA, dns.ClassINET), aRR, opt(1232, 1<<15)),
			want: dnswire.Query{Name: "a.", Type: dns.TypeA, Class: dns.ClassINET}, edns: true, size: 1232, do: true},
		{name: "two questions: EDNS not looked for", pkt: cat(header(1, 0, 2, 0, 0, 1), wireName("a"), typeClass(1, 1), wireName("b"), typeClass(1, 1), opt(1232, 0)),
			want: dnswire.Query{Name: "a.", Type: 1, Class: 1}},

		{name: "empty", pkt: nil, err: dnswire.ErrHeader},
		{name: "short header", pkt: header(1, 0, 1, 0, 0, 0)[:11], err: dnswire.ErrHeader},
		{name: "no question", pkt: header(1, 0, 0, 0, 0, 0), err: dnswire.ErrQuestion},
		{name: "name cut", pkt: cat(header(1, 0, 1, 0, 0, 0), []byte{7, 'e', 'x', 'a'}), err: dnswire.ErrQuestion},
		{name: "no root label", pkt: cat(header(1, 0, 1, 0, 0, 0), []byte{1, 'a'}), err: dnswire.ErrQuestion},
		{name: "type and class cut", pkt: cat(header(1, 0, 1, 0, 0, 0), wireName("a"), []byte{0, 1, 0}), err: dnswire.ErrQuestion},
		{name: "compression pointer", pkt: cat(header(1, 0, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 12}, typeClass(1, 1)), err: dnswire.ErrQuestion},
		{name: "pointer as first label", pkt: cat(header(1, 0, 1, 0, 0, 0), []byte{0xC0, 12}, typeClass(1, 1)), err: dnswire.ErrQuestion},
		{name: "label 64", pkt: cat(header(1, 0, 1, 0, 0, 0), wireName(strings.Repeat("a", 64)), typeClass(1, 1)), err: dnswire.ErrQuestion},
		{name: "reserved label type 0x40", pkt: cat(header(1, 0, 1, 0, 0, 0), []byte{0x41, 'a', 0}, typeClass(1, 1)), err: dnswire.ErrQuestion},
		{name: "name 256", pkt: cat(header(1, 0, 1, 0, 0, 0), tooLong, typeClass(1, 1)), err: dnswire.ErrQuestion},
		{name: "repeated OPT", pkt: cat(header(1, 0, 1, 0, 0, 2), wireName("a"), typeClass(1, 1), opt(1232, 0), opt(512, 0)), err: dnswire.ErrOPT},
		{name: "OPT with an owner", pkt: cat(header(1, 0, 1, 0, 0, 1), wireName("a"), typeClass(1, 1), []byte{1, 'x'}, opt(1232, 0)), err: dnswire.ErrOPT},
		{name: "ARCOUNT past the end", pkt: cat(header(1, 0, 1, 0, 0, 1), wireName("a"), typeClass(1, 1)), err: dnswire.ErrRR},
		{name: "OPT rdata cut", pkt: cat(header(1, 0, 1, 0, 0, 1), wireName("a"), typeClass(1, 1), opt(1232, 0)[:9], []byte{0, 4, 0}), err: dnswire.ErrRR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q dnswire.Query
			err := dnswire.ParseQuery(tc.pkt, &q)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParseQuery: err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseQuery: %v", err)
			}
			if q.Name != tc.want.Name || q.Type != tc.want.Type || q.Class != tc.want.Class {
				t.Errorf("question %q/%d/%d, want %q/%d/%d", q.Name, q.Type, q.Class, tc.want.Name, tc.want.Type, tc.want.Class)
			}
			if q.EDNS != tc.edns || q.UDPSize != tc.size || q.DO != tc.do || q.EDNSVersion != tc.version {
				t.Errorf("EDNS %v size %d DO %v version %d, want %v %d %v %d", q.EDNS, q.UDPSize, q.DO, q.EDNSVersion, tc.edns, tc.size, tc.do, tc.version)
			}
			if !bytes.Equal(q.RawName, tc.pkt[12:12+len(q.RawName)]) || q.QEnd != 12+len(q.RawName)+4 {
				t.Errorf("RawName %q QEnd %d: not the question's bytes", q.RawName, q.QEnd)
			}
			// The name agrees with what miekg/dns makes of the packet.
			name, _, err := dns.UnpackDomainName(tc.pkt, 12)
			if err != nil {
				t.Fatalf("miekg cannot unpack the name: %v", err)
			}
			if strings.ToLower(name) != q.Name {
				t.Errorf("Name %q, miekg says %q", q.Name, name)
			}
		})
	}
}

func TestParseQueryHeader(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("Example.com.", dns.TypeA)
	m.Id = 0x1234
	m.CheckingDisabled = true
	m.Opcode = dns.OpcodeNotify
	b := dnstest.Pack(m)
	var q dnswire.Query
	if err := dnswire.ParseQuery(b, &q); err != nil {
		t.Fatal(err)
	}
	if q.ID != 0x1234 || !q.CD() || q.Opcode() != dns.OpcodeNotify || q.Response() || q.Flags&dnswire.FlagRD == 0 || q.QDCount != 1 {
		t.Errorf("header %+v: want ID 0x1234, CD, RD, opcode NOTIFY, QDCOUNT 1", q)
	}
	// A reused Query is reset.
	q.EDNS, q.DO = true, true
	if err := dnswire.ParseQuery(b, &q); err != nil || q.EDNS || q.DO {
		t.Errorf("reused Query kept EDNS %v DO %v (err %v)", q.EDNS, q.DO, err)
	}
	m.Response = true
	if err := dnswire.ParseQuery(dnstest.Pack(m), &q); err != nil || !q.Response() {
		t.Errorf("QR not reported (err %v)", err)
	}
}

// reply is a message that exercises name compression in every section.
func reply(t testing.TB) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{
		dnstest.MustRR("www.example.com. 300 IN CNAME web.example.com."),
		dnstest.MustRR("web.example.com. 60 IN A 192.0.2.1"),
		dnstest.MustRR("web.example.com. 61 IN A 192.0.2.2"),
		dnstest.MustRR("web.example.com. 62 IN MX 10 mail.example.com."),
		dnstest.MustRR(`web.example.com. 63 IN TXT "hello" "world"`),
	}
	m.Ns = []dns.RR{
		dnstest.MustRR("example.com. 3600 IN NS ns1.example.com."),
		dnstest.MustRR("example.com. 900 IN SOA ns1.example.com. hostmaster.example.com. 1 7200 900 1209600 86400"),
	}
	m.Extra = []dns.RR{dnstest.MustRR("ns1.example.com. 3600 IN AAAA 2001:db8::53")}
	m.SetEdns0(1232, true)
	m.Extra = append(m.Extra, dnstest.MustRR("mail.example.com. 120 IN A 192.0.2.25"))
	m.Compress = true
	return m
}

func TestTTLOffsets(t *testing.T) {
	m := reply(t)
	b := dnstest.Pack(m)
	m.Compress = false
	if plain := dnstest.Pack(m); len(b) >= len(plain) {
		t.Fatalf("test message not compressed: %d bytes vs %d plain", len(b), len(plain))
	}
	offs, err := dnswire.TTLOffsets(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(m.Answer) + len(m.Ns) + len(m.Extra) - 1; len(offs) != want {
		t.Fatalf("%d offsets, want %d (every RR but the OPT)", len(offs), want)
	}
	dnswire.PutTTLs(b, offs, 4242)
	got := new(dns.Msg)
	if err := got.Unpack(b); err != nil {
		t.Fatalf("unpacking patched message: %v", err)
	}
	for _, sec := range [][]dns.RR{got.Answer, got.Ns, got.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if rr.Header().Ttl != 4242 {
				t.Errorf("%v: TTL not patched", rr)
			}
		}
	}
	o := got.IsEdns0()
	if o == nil || !o.Do() || o.UDPSize() != 1232 || o.Version() != 0 {
		t.Errorf("OPT changed by PutTTLs: %v", o)
	}
	// Everything but the TTLs is as packed.
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype != dns.TypeOPT {
				rr.Header().Ttl = 4242
			}
		}
	}
	m.Compress = true
	if want := dnstest.Pack(m); !bytes.Equal(b, want) {
		t.Errorf("patched message differs from the original with TTL 4242 beyond the TTL fields")
	}
}

func TestTTLOffsetsErrors(t *testing.T) {
	b := dnstest.Pack(reply(t))
	for n := 0; n < len(b); n++ {
		if _, err := dnswire.TTLOffsets(b[:n]); err == nil {
			t.Fatalf("TTLOffsets of the first %d of %d bytes: no error", n, len(b))
		}
	}
	offs, err := dnswire.TTLOffsets(header(1, 0, 0, 0, 0, 0))
	if err != nil || len(offs) != 0 {
		t.Errorf("header only: %v %v", offs, err)
	}
	// A TTL field past 64 KiB cannot be named by a uint16 offset: an error,
	// never a wrapped offset that would patch the header.
	rr := func(rdlen int) []byte {
		b := cat([]byte{0}, typeClass(dns.TypeTXT, dns.ClassINET), []byte{0, 0, 0, 1})
		return append(binary.BigEndian.AppendUint16(b, uint16(rdlen)), make([]byte, rdlen)...)
	}
	// The second RR's name ends at 65533, its TTL at 65537..65540.
	huge := cat(header(1, 0, 0, 2, 0, 0), rr(65509), rr(0))
	if offs, err := dnswire.TTLOffsets(huge); err == nil {
		t.Errorf("TTL beyond 64 KiB: offsets %v, no error", offs)
	}
	// A label type that is neither a length nor a pointer.
	bad := cat(header(1, 0, 0, 1, 0, 0), []byte{0x80})
	if _, err := dnswire.TTLOffsets(bad); err == nil {
		t.Errorf("reserved label type accepted")
	}
}

func TestAppendOPT(t *testing.T) {
	for _, tc := range []struct {
		size  uint16
		do    bool
		ext   uint8
		rcode int // header rcode
		want  int // miekg's full rcode
	}{
		{1232, false, 0, dns.RcodeSuccess, dns.RcodeSuccess},
		{4096, true, 0, dns.RcodeNameError, dns.RcodeNameError},
		{512, true, 1, 0, dns.RcodeBadVers}, // 16 = 1<<4 | 0
	} {
		m := new(dns.Msg)
		m.SetQuestion("example.com.", dns.TypeA)
		m.Response = true
		m.Rcode = tc.rcode
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(192, 0, 2, 1)}}
		m.Extra = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "ns.example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(192, 0, 2, 53)}}
		b := dnswire.AppendOPT(dnstest.Pack(m), tc.size, tc.do, tc.ext)
		got := new(dns.Msg)
		if err := got.Unpack(b); err != nil {
			t.Fatalf("%+v: unpack: %v", tc, err)
		}
		o := got.IsEdns0()
		if o == nil {
			t.Fatalf("%+v: no OPT after AppendOPT", tc)
		}
		if o.UDPSize() != tc.size || o.Do() != tc.do || o.Version() != 0 || got.Rcode != tc.want || len(got.Extra) != 2 {
			t.Errorf("%+v: got size %d DO %v version %d rcode %d extra %d", tc, o.UDPSize(), o.Do(), o.Version(), got.Rcode, len(got.Extra))
		}
		if len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Errorf("%+v: answer damaged: %v", tc, got.Answer)
		}
	}
}

// FuzzParseQuery: ParseQuery never panics, and whatever it accepts
// miekg/dns reads the same way.
func FuzzParseQuery(f *testing.F) {
	f.Add(query(f, "www.example.com.", dns.TypeA, -1, false))
	f.Add(query(f, "Mixed.Case.Example.", dns.TypeAAAA, 1232, true))
	f.Add(cat(header(1, 0, 1, 0, 0, 2), wireName("a"), typeClass(1, 1), opt(1232, 0), opt(512, 0)))
	f.Add(cat(header(1, 0, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 12}, typeClass(1, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q dnswire.Query
		err := dnswire.ParseQuery(b, &q)
		if q.QEnd > len(b) {
			t.Fatalf("QEnd %d past the packet's %d bytes", q.QEnd, len(b))
		}
		if err != nil {
			return
		}
		name, end, err := dns.UnpackDomainName(b, dnswire.HeaderLen)
		if err != nil {
			t.Fatalf("ParseQuery accepted a name miekg rejects (%v): %q", err, b)
		}
		if strings.ToLower(name) != q.Name {
			t.Fatalf("Name %q, miekg reads %q", q.Name, name)
		}
		if end != dnswire.HeaderLen+len(q.RawName) || q.QEnd != end+4 {
			t.Fatalf("RawName %d bytes, QEnd %d; miekg's name ends at %d", len(q.RawName), q.QEnd, end)
		}
		if q.Type != binary.BigEndian.Uint16(b[end:]) || q.Class != binary.BigEndian.Uint16(b[end+2:]) {
			t.Fatalf("type/class %d/%d not the packet's", q.Type, q.Class)
		}
		if _, ok := dns.IsDomainName(q.Name); !ok {
			t.Fatalf("Name %q is not a domain name to miekg", q.Name)
		}
	})
}

func BenchmarkParseQuery(b *testing.B) {
	pkt := query(b, "www.Example.com.", dns.TypeA, 1232, true)
	var q dnswire.Query
	b.ReportAllocs()
	for b.Loop() {
		if err := dnswire.ParseQuery(pkt, &q); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseQueryNoQuestionEDNS: a message without a question is an error
// (ErrQuestion, QEnd 0), but its OPT is still read so that the error reply
// (NOTIMP for an unknown opcode, FORMERR) answers EDNS with EDNS.
func TestParseQueryNoQuestionEDNS(t *testing.T) {
	b := []byte{0, 7, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 1, // ID 7, opcode 15, ARCOUNT 1
		0, 0, 41, 0x04, 0xD0, 0, 0, 0x80, 0, 0, 0} // OPT: size 1232, version 0, DO
	var q dnswire.Query
	if err := dnswire.ParseQuery(b, &q); !errors.Is(err, dnswire.ErrQuestion) {
		t.Fatalf("err = %v, want ErrQuestion", err)
	}
	if q.QEnd != 0 || !q.EDNS || q.UDPSize != 1232 || !q.DO || q.EDNSVersion != 0 || q.Opcode() != 15 {
		t.Fatalf("parsed %+v", q)
	}
	// A bad OPT in such a message is reported as such.
	if err := dnswire.ParseQuery(b[:20], &q); !errors.Is(err, dnswire.ErrRR) {
		t.Fatalf("cut OPT: err = %v, want ErrRR", err)
	}
}
