package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestReloadDNS64: the dns64 key changes live with the config file (as
// CoreDNS's reload re-reads its Corefile); a k8s-external key without the
// cluster zone is a rejected reload naming the key, the old
// configuration kept.
func TestReloadDNS64(t *testing.T) {
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{dnstest.MustRR(r.Question[0].Name + " 300 IN A 192.0.2.1")}
		} else {
			m.Ns = []dns.RR{dnstest.MustRR("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60")}
		}
		_ = w.WriteMsg(m)
	})
	base := "lameduck: 0s\nupstream: [" + up.Addr + "]\n"
	ta := startTestAgent(t, base)
	aaaa := func(name string) string {
		c := &dns.Client{Timeout: time.Second}
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeAAAA)
		r, _, err := c.Exchange(m, ta.addr)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, rr := range r.Answer {
			out = append(out, rr.(*dns.AAAA).AAAA.String())
		}
		return strings.Join(out, ",")
	}
	waitAAAA := func(want string) {
		i := 0
		dnstest.Eventually(t, 5*time.Second, "AAAA "+want, func() error {
			i++
			if got := aaaa(fmt.Sprintf("n%d-%d.example.", time.Now().UnixNano(), i)); got != want {
				return fmt.Errorf("AAAA %q, want %q", got, want)
			}
			return nil
		})
	}
	waitAAAA("") // serving, without dns64: NODATA
	ta.write(base + "dns64: {allow-ipv4: true}\n")
	waitAAAA("64:ff9b::c000:201")
	ta.write(base + "dns64: {allow-ipv4: true, prefix: 'fd00:64::/96'}\n")
	waitAAAA("fd00:64::c000:201")
	ta.write(base + "dns64: {allow-ipv4: true, prefix: 'fd00:64::/96'}\nk8s-external: {zones: [example.org]}\n")
	if line := ta.waitLog("config reload rejected"); !strings.Contains(line, "k8s-external") {
		t.Errorf("rejection does not name k8s-external: %s", line)
	}
	waitAAAA("fd00:64::c000:201")
}
