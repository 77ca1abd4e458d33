package upstream

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestHostNameReplies: the resolvers of upstream names are read as the
// forwarder reads its servers: a UDP reply larger than 512 bytes without TC
// is read whole (it used to be cut at 512 bytes, fail to parse and leave
// the name unresolved), and a reply still truncated over TCP is no answer
// (it used to be taken as one: a name with no address, its group without
// that server).
func TestHostNameReplies(t *testing.T) {
	big := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Qtype == dns.TypeA {
			for i := range 40 {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A: net.IPv4(192, 0, 2, byte(i+1))})
			}
		}
		_ = w.WriteMsg(m) // whole, whatever the client's size: no TC
	})
	h, err := newHostNames([]string{big.Addr}, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _, err := h.query(context.Background(), "dns.example.net.")
	if err != nil || len(addrs) != 40 {
		t.Fatalf("a 700-byte reply over UDP: %d addresses, %v; want 40", len(addrs), err)
	}

	tc := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Truncated = true
		_ = w.WriteMsg(m)
	})
	h, err = newHostNames([]string{tc.Addr}, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _, err = h.query(context.Background(), "dns.example.net.")
	if err == nil || !errors.Is(err, errTruncated) {
		t.Fatalf("TC over UDP and again over TCP: %v, %v; want an error (truncated)", addrs, err)
	}
	if tc.TCPCount() == 0 {
		t.Fatal("never retried over TCP")
	}
}
