package upstream_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/upstream"
)

// FuzzValidate feeds fuzzed datagrams to the reply validator the way the
// UDP exchange does: whatever miekg/dns unpacks is validated against the
// query that was sent. patchID gives the datagram the query's ID and QR
// bit, so that the fuzzer reaches the question and record checks instead
// of stopping at the ID. An accepted reply must really answer the query
// (ID, QR, opcode, question) and must survive being packed and unpacked
// again, since the cache stores it and the server sends it on in wire form.
func FuzzValidate(f *testing.F) {
	q := query("www.example.test.", dns.TypeA)
	seed := func(m *dns.Msg, patch bool) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, patch)
	}
	good := new(dns.Msg)
	good.SetReply(q)
	good.Answer = []dns.RR{mustFuzzRR(f, "www.example.test. 60 IN A 192.0.2.1")}
	seed(good, false)
	upper := good.Copy()
	upper.Question[0].Name = "WWW.Example.TEST."
	seed(upper, true)
	wrongQ := good.Copy()
	wrongQ.Question[0].Name = "evil.example.test."
	seed(wrongQ, true)
	refused := new(dns.Msg)
	refused.Id, refused.Response, refused.Rcode = q.Id, true, dns.RcodeRefused
	seed(refused, true)
	nx := new(dns.Msg)
	nx.SetRcode(q, dns.RcodeNameError)
	nx.Ns = []dns.RR{mustFuzzRR(f, "example.test. 60 IN SOA ns.example.test. h.example.test. 1 2 3 4 60")}
	seed(nx, true)
	// An SOA with empty RDATA (RDLENGTH 0): miekg/dns unpacks it, but
	// packs it back into bytes it cannot unpack (a finding of this target).
	empty := []byte{0, 0, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0,
		3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
		0xC0, 12, 0, 6, 0, 1, 0, 0, 0, 60, 0, 0}
	f.Add(empty, true)

	f.Fuzz(func(t *testing.T, b []byte, patchID bool) {
		if patchID && len(b) >= 4 {
			b = append([]byte(nil), b...)
			binary.BigEndian.PutUint16(b, q.Id)
			b[2] |= 0x80
		}
		r := new(dns.Msg)
		if r.Unpack(b) != nil {
			return // the exchange drops what does not unpack
		}
		if err := upstream.Validate(q, r); err != nil {
			return
		}
		if r.Id != q.Id || !r.Response || r.Opcode != dns.OpcodeQuery {
			t.Fatalf("accepted a reply with ID %d QR %v opcode %d", r.Id, r.Response, r.Opcode)
		}
		switch len(r.Question) {
		case 0:
			if r.Rcode == dns.RcodeSuccess || r.Rcode == dns.RcodeNameError {
				t.Fatalf("accepted a %s without a question", dns.RcodeToString[r.Rcode])
			}
		case 1:
			a, got := q.Question[0], r.Question[0]
			if got.Qtype != a.Qtype || got.Qclass != a.Qclass || !strings.EqualFold(got.Name, a.Name) {
				t.Fatalf("accepted question %v for %v", got, a)
			}
		default:
			t.Fatalf("accepted %d questions", len(r.Question))
		}
		again, err := r.Pack()
		if err != nil {
			return // unpackable replies are not cached, and the server answers SERVFAIL
		}
		if err := new(dns.Msg).Unpack(again); err != nil {
			t.Fatalf("accepted a reply that packs into bytes that do not unpack: %v\n% x", err, again)
		}
	})
}

func mustFuzzRR(tb testing.TB, s string) dns.RR {
	tb.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		tb.Fatal(err)
	}
	return rr
}
