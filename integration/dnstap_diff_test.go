//go:build integration

package integration

// Differential test of dnstap: CoreDNS 1.15 with `dnstap SOCKET [full] {
// identity; version; extra }` in front of `forward`, and the nodedns
// binary with the same settings in its dnstap key, each sending to a
// collector of its own (golang-dnstap's types decode every frame), asked
// the same questions over UDP and TCP. Per question the two streams must
// agree: the message types in order (CLIENT_QUERY, FORWARDER_QUERY,
// FORWARDER_RESPONSE, CLIENT_RESPONSE), identity, version and extra, the
// socket family and protocol (the forwarder's for UDP questions only:
// CoreDNS forwards over the client's transport, nodedns over UDP first),
// the client's address and port (the same
// in a query and its reply), the upstream's address, times in order
// inside the exchange; with `full`, the query and the reply as the client
// sent and got them (modulo the ID), the forwarded question and the
// upstream's answer; without, no DNS message at all. The forwarded
// query's bytes differ on purpose (nodedns sends its own query:
// docs/plugins.md#departures): only its question is compared.

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// tapAsk asks q of addr over UDP or TCP from 127.0.0.1 and returns the
// reply and the port it was asked from.
func tapAsk(t *testing.T, addr string, name string, qtype uint16, tcp bool) (*dns.Msg, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(4096, false)
	network := "udp"
	if tcp {
		network = "tcp"
	}
	conn, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	co := &dns.Conn{Conn: conn, UDPSize: 4096}
	if err := co.WriteMsg(m); err != nil {
		t.Fatalf("asking %s %s over %s: %v", addr, name, network, err)
	}
	r, err := co.ReadMsg()
	if err != nil {
		t.Fatalf("asking %s %s over %s: %v", addr, name, network, err)
	}
	local := conn.LocalAddr().String()
	ap := netip.MustParseAddrPort(local)
	return r, int(ap.Port())
}

// tapRender renders one dnstap message for the comparison: type,
// family, protocol, the client's address (its port compared apart), the
// upstream's address as "upstream", the DNS messages as plRender has
// them (the client's query and the forwarded question by question only).
func tapRender(t *testing.T, d *dnstappb.Dnstap, upstream string, clientPort int, clientTCP, full bool) string {
	t.Helper()
	m := d.GetMessage()
	var b strings.Builder
	proto := m.GetSocketProtocol().String()
	if clientTCP && (m.GetType() == dnstappb.Message_FORWARDER_QUERY || m.GetType() == dnstappb.Message_FORWARDER_RESPONSE) {
		proto = "(the upstream's transport)"
	}
	fmt.Fprintf(&b, "%v %v %s identity=%q version=%q extra=%q", m.GetType(), m.GetSocketFamily(), proto,
		d.GetIdentity(), d.GetVersion(), d.GetExtra())
	addr := func(a []byte, p uint32) string {
		ip, ok := netip.AddrFromSlice(a)
		if !ok {
			return fmt.Sprintf("bad address %x", a)
		}
		return netip.AddrPortFrom(ip, uint16(p)).String()
	}
	switch m.GetType() {
	case dnstappb.Message_CLIENT_QUERY, dnstappb.Message_CLIENT_RESPONSE:
		want := fmt.Sprintf("127.0.0.1:%d", clientPort)
		if got := addr(m.GetQueryAddress(), m.GetQueryPort()); got != want {
			fmt.Fprintf(&b, " client %s, not the asker's %s", got, want)
		} else {
			b.WriteString(" client=asker")
		}
		if m.ResponseAddress != nil {
			fmt.Fprintf(&b, " response-address=%s", addr(m.GetResponseAddress(), m.GetResponsePort()))
		}
	default:
		if got := addr(m.GetResponseAddress(), m.GetResponsePort()); got != upstream {
			fmt.Fprintf(&b, " server %s, not the upstream %s", got, upstream)
		} else {
			b.WriteString(" server=upstream")
		}
	}
	qt := time.Unix(int64(m.GetQueryTimeSec()), int64(m.GetQueryTimeNsec()))
	if m.QueryTimeSec == nil || time.Since(qt) > time.Minute || time.Until(qt) > time.Second {
		fmt.Fprintf(&b, " query-time=%v", qt)
	}
	if m.ResponseTimeSec != nil {
		rt := time.Unix(int64(m.GetResponseTimeSec()), int64(m.GetResponseTimeNsec()))
		if rt.Before(qt) {
			fmt.Fprintf(&b, " response-time %v before query-time %v", rt, qt)
		}
		b.WriteString(" response-time")
	}
	unpack := func(what string, w []byte) *dns.Msg {
		if w == nil {
			return nil
		}
		x := new(dns.Msg)
		if err := x.Unpack(w); err != nil {
			fmt.Fprintf(&b, " %s does not unpack: %v", what, err)
			return nil
		}
		return x
	}
	if q := unpack("query", m.QueryMessage); q != nil {
		fmt.Fprintf(&b, "\n  query %s %s rd=%v", strings.ToLower(q.Question[0].Name), dns.TypeToString[q.Question[0].Qtype], q.RecursionDesired)
	}
	if r := unpack("response", m.ResponseMessage); r != nil {
		s := diffRender(r)
		if m.GetType() == dnstappb.Message_CLIENT_RESPONSE {
			s = plRender(plConfig{}, plQuestion{}, r)
		}
		fmt.Fprintf(&b, "\n  response %s", strings.ReplaceAll(s, "\n", "\n    "))
	}
	if !full && (m.QueryMessage != nil || m.ResponseMessage != nil) {
		b.WriteString("\n  a DNS message without full")
	}
	return b.String()
}

// TestDnstapDifferential compares what CoreDNS 1.15 and nodedns send to
// their dnstap collectors, with and without `full`.
func TestDnstapDifferential(t *testing.T) {
	coredns := coreDNSBin(t)
	A, AAAA, MX := dns.TypeA, dns.TypeAAAA, dns.TypeMX
	questions := []struct {
		name  string
		qtype uint16
		tcp   bool
	}{
		// Every name once: CoreDNS has no cache here, nodedns's would
		// answer a repeated question without an upstream exchange.
		{"www.example.com.", A, false}, {"nx.example.com.", A, false}, {"www.example.net.", AAAA, false},
		// Over TCP: CoreDNS forwards over TCP too, nodedns over UDP
		// (the forwarder messages' protocol is not compared for them).
		{"www.example.com.", AAAA, true}, {"www.example.org.", MX, true},
	}
	total := 0
	for _, full := range []bool{true, false} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) {
			cup, nup := plUpstream(t), plUpstream(t)
			dir := t.TempDir()
			ccol := dnstest.StartCollector(t, "unix", filepath.Join(dir, "coredns.sock"))
			ncol := dnstest.StartCollector(t, "unix", filepath.Join(dir, "nodedns.sock"))
			fullArg, fullKey := "", ""
			if full {
				fullArg, fullKey = " full", "\n    full: true"
			}
			cdns := startCoreDNSPlugins(t, coredns, fmt.Sprintf("  dnstap unix://%s%s {\n    identity node-a\n    version v-test\n    extra cluster=prod\n  }", ccol.Addr, fullArg), cup.Addr)
			ndns, _ := startDropinAgent(t, fmt.Sprintf("upstream: [%s]\ndnstap:\n  - socket: unix://%s%s\n    identity: node-a\n    version: v-test\n    extra: cluster=prod\n",
				nup.Addr, ncol.Addr, fullKey))
			// CoreDNS's ready probe and nodedns's start send nothing to
			// the collectors; anything there now is not ours.
			for _, c := range []*dnstest.Collector{ccol, ncol} {
				if stray := c.Drain(); len(stray) > 0 {
					t.Fatalf("%d messages before the first question", len(stray))
				}
			}
			for _, q := range questions {
				_, cport := tapAsk(t, cdns, q.name, q.qtype, q.tcp)
				_, nport := tapAsk(t, ndns, q.name, q.qtype, q.tcp)
				// Four messages each: the client's query and reply, the
				// exchange upstream and its reply.
				cm, nm := ccol.Take(4, 5*time.Second), ncol.Take(4, 5*time.Second)
				var want, got []string
				for _, d := range cm {
					want = append(want, tapRender(t, d, cup.Addr, cport, q.tcp, full))
				}
				for _, d := range nm {
					got = append(got, tapRender(t, d, nup.Addr, nport, q.tcp, full))
				}
				total++
				if total == 1 || total == 6 {
					// What is compared, once with full and once without.
					t.Logf("%s %s: CoreDNS and nodedns sent\n    %s", q.name, dns.TypeToString[q.qtype], strings.ReplaceAll(strings.Join(got, "\n"), "\n", "\n    "))
				}
				if w, g := strings.Join(want, "\n"), strings.Join(got, "\n"); w != g || len(cm) != 4 {
					t.Errorf("%s %s tcp=%v:\n  CoreDNS (%d messages):\n    %s\n  nodedns (%d messages):\n    %s", q.name, dns.TypeToString[q.qtype], q.tcp,
						len(cm), strings.ReplaceAll(w, "\n", "\n    "), len(nm), strings.ReplaceAll(g, "\n", "\n    "))
				}
			}
			// A stray message (a duplicate, say) would have shifted a
			// later question's four; the last question's reply came
			// after every message it caused was queued.
			for name, c := range map[string]*dnstest.Collector{"CoreDNS": ccol, "nodedns": ncol} {
				if extra := c.Drain(); len(extra) > 0 {
					t.Errorf("%s: %d messages after the last question's, the first %v", name, len(extra), extra[0].GetMessage().GetType())
				}
				if errs := c.Errors(); len(errs) > 0 {
					t.Errorf("%s collector: %v", name, errs)
				}
			}
		})
	}
	t.Logf("FIGURE dnstap differential: %d questions, full and not, message for message alike", total)
}
