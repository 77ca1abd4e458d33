package upstream

// The health probe of a down server asks ". IN NS" without EDNS, and its
// reply was read into a 512-byte buffer. A server that answers the root NS
// query with its full referral (13 NS and their glue: about 800 bytes)
// without setting TC, as some forwarders and middleboxes do, never passed
// the probe: the datagram was cut, did not parse, the probe timed out, and
// the server stayed down for good while it answered every query at once.

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestAttackProbeReadsLargeRootReferral(t *testing.T) {
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for i := 0; i < 13; i++ {
			ns := fmt.Sprintf("%c.root-servers.net.", 'a'+i)
			m.Answer = append(m.Answer, &dns.NS{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 518400}, Ns: ns})
			m.Extra = append(m.Extra,
				&dns.A{Hdr: dns.RR_Header{Name: ns, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 518400}, A: net.IPv4(198, 41, 0, byte(i))},
				&dns.AAAA{Hdr: dns.RR_Header{Name: ns, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 518400}, AAAA: net.ParseIP(fmt.Sprintf("2001:503:ba3e::2:%d", i))})
		}
		_ = w.WriteMsg(m) // about 800 bytes, no TC, whatever the query said
	})
	cfg := Config{Servers: []string{up.Addr}, TryTimeout: 500 * time.Millisecond, Logger: quietLog}
	cfg.defaults()
	s := newServer(up.Addr, &cfg, Health{MaxFails: 2}.normalized(), idleTCP)
	s.fails.Store(3)
	if err := s.probe(context.Background()); err == nil {
		s.probeOK()
	}
	if s.Down() {
		t.Errorf("a live server whose root NS reply is larger than 512 bytes (no TC) stays down after a probe (probe failures %d)",
			s.Stats().ProbeFailures)
	}
}
