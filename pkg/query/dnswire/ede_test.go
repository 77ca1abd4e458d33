package dnswire

import (
	"testing"

	"github.com/miekg/dns"
)

// An OPT built with AppendOPT and AppendEDE reads back as miekg/dns's EDE
// options; LastOPT finds it, PatchOPT rewrites its header, DropLast removes
// it, EDEOptions lists its options.
func TestEDEWire(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("a.example.", dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: []byte{192, 0, 2, 1}}}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := LastOPT(b); ok {
		t.Fatal("LastOPT found an OPT in a message without additional records")
	}
	plain := len(b)
	b = AppendOPT(b, 1232, false, 0)
	opt, ok := LastOPT(b)
	if !ok || opt != plain {
		t.Fatalf("LastOPT = %d, %v; want %d", opt, ok, plain)
	}
	b = AppendEDE(b, opt, dns.ExtendedErrorCodeStaleAnswer, "")
	b = AppendEDE(b, opt, dns.ExtendedErrorCodeNetworkError, "upstream failed")
	PatchOPT(b, opt, 4096, true, 0)
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		t.Fatal(err)
	}
	o := r.IsEdns0()
	if o == nil || o.UDPSize() != 4096 || !o.Do() || len(o.Option) != 2 {
		t.Fatalf("OPT %v", o)
	}
	if e := o.Option[1].(*dns.EDNS0_EDE); e.InfoCode != dns.ExtendedErrorCodeNetworkError || e.ExtraText != "upstream failed" {
		t.Fatalf("second option %v", e)
	}
	var codes []uint16
	EDEOptions(b, opt, func(code uint16, text []byte) { codes = append(codes, code) })
	if len(codes) != 2 || codes[0] != 3 || codes[1] != 23 {
		t.Fatalf("EDEOptions listed %v", codes)
	}
	b = DropLast(b, opt)
	if err := r.Unpack(b); err != nil || r.IsEdns0() != nil || len(r.Answer) != 1 {
		t.Fatalf("after DropLast: %v (%v)", r, err)
	}
}
