package dnswire

import (
	"testing"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/internal/dnstest"
)

func BenchmarkRotateAddrs(b *testing.B) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.", dns.TypeA)
	m.Compress = true
	m.Answer = []dns.RR{dnstest.MustRR("www.example. 60 IN CNAME pool.example.")}
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		m.Answer = append(m.Answer, dnstest.MustRR("pool.example. 60 IN A "+ip))
	}
	wire, _ := m.Pack()
	b.ReportAllocs()
	k := uint32(0)
	for b.Loop() {
		k++
		RotateAddrs(wire, k)
	}
}
