package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// TestViewsAndDnstap: an agent built from a file with views and a dnstap
// collector: a client of the view's network gets the view's upstream's
// answer, another the default's; the collector gets the client and
// forwarder messages of both, and /stats and /metrics report the tap.
func TestViewsAndDnstap(t *testing.T) {
	answer := func(ip string) *dnstest.Server {
		return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", r.Question[0].Name, ip))
			m.Answer = []dns.RR{rr}
			_ = w.WriteMsg(m)
		})
	}
	def, inside := answer("192.0.2.1"), answer("192.0.2.2")
	dir := t.TempDir()
	col := dnstest.StartCollector(t, "unix", filepath.Join(dir, "tap.sock"))
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	writeConfigMap(t, dir, fmt.Sprintf(`listen: [%s]
admin: ""
loop-check: false
lameduck: 0s
upstream: [%s]
views:
  - name: inside
    expr: ["incidr(client_ip(), '127.0.33.0/24')"]
    forward: {servers: [%s]}
dnstap:
  - {socket: "unix://%s", full: true, identity: node-t}
`, addr, def.Addr, inside.Addr, col.Addr))
	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Args: args, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
	ask := func(src string) string {
		t.Helper()
		c := &dns.Client{Timeout: time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}}
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		var got string
		dnstest.Eventually(t, 5*time.Second, "an answer to a query from "+src, func() error {
			r, _, err := c.Exchange(m, addr)
			if err == nil && len(r.Answer) == 1 {
				got = r.Answer[0].(*dns.A).A.String()
				return nil
			}
			return fmt.Errorf("from %s: %v %v", src, r, err)
		})
		return got
	}
	if got := ask("127.0.33.5"); got != "192.0.2.2" {
		t.Errorf("from the view's network: %s, want the view's upstream's 192.0.2.2", got)
	}
	if got := ask("127.0.0.1"); got != "192.0.2.1" {
		t.Errorf("from elsewhere: %s, want the default upstream's 192.0.2.1", got)
	}
	// Each question: the query, the exchange and its reply, the reply.
	msgs := col.Take(8, 5*time.Second)
	var types []string
	for _, m := range msgs {
		if string(m.GetIdentity()) != "node-t" || string(m.GetVersion()) != "nodedns-test" {
			t.Errorf("identity %q, version %q", m.GetIdentity(), m.GetVersion())
		}
		types = append(types, m.GetMessage().GetType().String())
	}
	want := []string{"CLIENT_QUERY", "FORWARDER_QUERY", "FORWARDER_RESPONSE", "CLIENT_RESPONSE"}
	if len(types) != 8 || fmt.Sprint(types[:4]) != fmt.Sprint(want) || fmt.Sprint(types[4:]) != fmt.Sprint(want) {
		t.Errorf("messages %v, want %v twice", types, want)
	}
	if len(msgs) == 8 && msgs[1].GetMessage().GetSocketProtocol() != dnstappb.SocketProtocol_UDP {
		t.Errorf("forwarded over %v", msgs[1].GetMessage().GetSocketProtocol())
	}
	// Counted once the writer's write returned, which may be after the
	// collector read it.
	dnstest.Eventually(t, 5*time.Second, "/stats dnstap to count 8 sent, connected", func() error {
		st := a.rec.Stats()
		if len(st.Dnstap) == 1 && st.Dnstap[0].Sent >= 8 && st.Dnstap[0].Connected {
			return nil
		}
		return fmt.Errorf("/stats dnstap %+v, want 8 sent, connected", st.Dnstap)
	})
}
