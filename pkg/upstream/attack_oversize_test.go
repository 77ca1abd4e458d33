package upstream_test

// An upstream reply larger than the buffer the forwarder read UDP replies
// into (the EDNS size it advertised, 1232 by default, or 512 without
// EDNS), sent without TC: the kernel cut the datagram, the cut message
// did not parse, the exchange took it for a stray and waited out its try
// timeout; the next try did the same, the client got SERVFAIL after the
// whole budget and the server was marked down, though it answered at once
// every time. UDP replies are now read whole, whatever their size (up to
// 64 KiB, as unbound), and data that does not parse is never a health
// failure.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// oversizeNoTC answers A with n records over UDP and TCP alike, never
// setting TC, whatever the query's EDNS size: a server (or middlebox)
// that ignores the advertised size.
func oversizeNoTC(n int) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), o.Do())
		}
		for i := 0; i < n; i++ {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: net.IPv4(192, 0, byte(2+i/256), byte(i))})
		}
		_ = w.WriteMsg(m)
	}
}

func TestAttackOversizeUDPReplyWithoutTC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		records int
		edns    bool
	}{
		{"2.4 KB to a 1232-byte EDNS query", 150, true},
		{"800 bytes to a query without EDNS", 48, false},
		{"about 60 KB (uncompressed)", 2200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := dnstest.Start(t, oversizeNoTC(tc.records))
			f, err := upstream.New(upstream.Config{Servers: []string{up.Addr}, TryTimeout: 500 * time.Millisecond, Budget: 2 * time.Second, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			s := f.Servers()[0]
			q := new(dns.Msg)
			q.SetQuestion("big.example.", dns.TypeA)
			if tc.edns {
				q.SetEdns0(1232, false)
			}
			start := time.Now()
			r, err := f.Exchange(context.Background(), stage.Origin{}, q)
			took := time.Since(start)
			if err != nil {
				t.Errorf("oversize UDP reply without TC: error after %v (%v), want the %d records", took.Round(time.Millisecond), err, tc.records)
			} else if len(r.Answer) != tc.records {
				t.Errorf("oversize UDP reply without TC: %d answers, want %d", len(r.Answer), tc.records)
			}
			if took > 400*time.Millisecond {
				t.Errorf("the exchange took %v: it waited out try timeouts for an answer that had arrived", took.Round(time.Millisecond))
			}
			if s.Down() {
				t.Errorf("server %s marked down (last error %q) for answering with a large reply", s.Addr, s.Stats().LastError)
			}
			if up.TCPCount() != 0 {
				t.Errorf("asked over TCP %d times: the UDP reply was whole", up.TCPCount())
			}
		})
	}
}
