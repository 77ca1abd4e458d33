//go:build integration

package integration

// Differential test of split horizon (CoreDNS's view): a Corefile of four
// blocks on one port, two views and two blocks without, CoreDNS 1.15 runs
// it; `nodedns migrate` carries it (nothing dropped) and the nodedns
// binary runs what it wrote (its views and stub domains); both are asked
// the same questions from three source addresses, and must give the same
// answers (each upstream answers with addresses of its own, so the
// answer says which was asked).

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/internal/migrate"
)

// viewUpstream answers every question with a record naming it: A
// 192.0.2.ID, AAAA 2001:db8::ID, MX ID mxID.example., TXT "ID"; NXDOMAIN
// with the parent's SOA (serial ID) for names starting nx.
func viewUpstream(t *testing.T, id int) *dnstest.Server {
	return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		q := r.Question[0]
		if strings.HasPrefix(strings.ToLower(q.Name), "nx.") {
			// The SOA of the name's parent (in bailiwick: nodedns keeps
			// no other).
			_, zone, _ := strings.Cut(strings.ToLower(q.Name), ".")
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{dnstest.MustRRf("%s 300 IN SOA ns.%s h.%s %d 60 60 60 60", zone, zone, zone, id)}
			_ = w.WriteMsg(m)
			return
		}
		var rr string
		switch q.Qtype {
		case dns.TypeA:
			rr = fmt.Sprintf("192.0.2.%d", id)
		case dns.TypeAAAA:
			rr = fmt.Sprintf("2001:db8::%d", id)
		case dns.TypeMX:
			rr = fmt.Sprintf("%d mx%d.example.", id, id)
		default:
			rr = fmt.Sprintf("\"%d\"", id)
		}
		m.Answer = []dns.RR{dnstest.MustRRf("%s 300 IN %s %s", q.Name, dns.TypeToString[q.Qtype], rr)}
		_ = w.WriteMsg(m)
	})
}

// splitCorefile is the split-horizon Corefile: the VPN's clients
// (127.0.40.0/24) ask corp.example of the inside servers, the others of
// the outside ones; the office's (127.0.41.0/24) A and AAAA questions of
// every other name go to a filtering resolver, the rest to the default.
func splitCorefile(port, ready int, inside, outside, office, def string) string {
	return fmt.Sprintf(`corp.example:%[1]d {
  bind 127.0.0.1
  view inside {
    expr incidr(client_ip(), '127.0.40.0/24') || client_ip() == '127.0.42.9'
  }
  forward . %[3]s
}
corp.example:%[1]d {
  bind 127.0.0.1
  forward . %[4]s
}
.:%[1]d {
  bind 127.0.0.1
  view office {
    expr incidr(client_ip(), '127.0.41.0/24')
    expr type() in ['A', 'AAAA'] && !(name() matches '^nx[.]')
  }
  forward . %[5]s
}
.:%[1]d {
  bind 127.0.0.1
  ready 127.0.0.1:%[2]d
  forward . %[6]s
}
`, port, ready, inside, outside, office, def)
}

// TestViewDifferential: split horizon, CoreDNS 1.15 and nodedns (as
// migrated) alike.
func TestViewDifferential(t *testing.T) {
	coredns := coreDNSBin(t)
	ups := map[string][4]*dnstest.Server{}
	for _, who := range []string{"coredns", "nodedns"} {
		ups[who] = [4]*dnstest.Server{viewUpstream(t, 1), viewUpstream(t, 2), viewUpstream(t, 3), viewUpstream(t, 4)}
	}
	cu := ups["coredns"]
	cdns, _ := startCoreDNSCorefile(t, coredns, func(port, ready int) string {
		return splitCorefile(port, ready, cu[0].Addr, cu[1].Addr, cu[2].Addr, cu[3].Addr)
	})

	// nodedns: what `nodedns migrate` makes of the same Corefile, with
	// nodedns's upstreams.
	nu := ups["nodedns"]
	res, err := migrate.Migrate([]byte(splitCorefile(53, 8181, nu[0].Addr, nu[1].Addr, nu[2].Addr, nu[3].Addr)), migrate.Options{ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dropped) > 0 {
		t.Fatalf("migrate dropped %v", res.Dropped)
	}
	if len(res.Config.Views) != 2 {
		t.Fatalf("migrate made %d views, want 2", len(res.Config.Views))
	}
	keys := map[string]any{"upstream": res.Config.Upstream, "stub-domains": res.Config.Stubs, "views": res.Config.Views,
		"upstream-failover": res.Config.UpstreamFailover}
	var b strings.Builder
	for _, k := range []string{"upstream", "stub-domains", "views", "upstream-failover"} {
		j, err := json.Marshal(keys[k])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s\n", k, j)
	}
	ndns, _ := startDropinAgent(t, b.String())

	A, AAAA, MX, TXT := dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT
	total := 0
	for _, src := range []string{"127.0.0.1", "127.0.40.7", "127.0.41.7", "127.0.42.9"} {
		for _, q := range []plQuestion{
			{name: "www.corp.example.", qtype: A}, {name: "WWW.Corp.Example.", qtype: AAAA}, {name: "db.corp.example.", qtype: TXT},
			{name: "nx.corp.example.", qtype: A}, {name: "www.example.com.", qtype: A}, {name: "www.example.com.", qtype: AAAA},
			{name: "www.example.com.", qtype: MX}, {name: "nx.example.com.", qtype: A}, {name: "www.example.net.", qtype: TXT},
		} {
			q.src = src
			want, got := "no reply", "no reply"
			if a, err := plAsk(cdns, q); err == nil {
				want = plRender(plConfig{}, q, a)
			} else {
				t.Fatalf("CoreDNS %s: %v", q, err)
			}
			if a, err := plAsk(ndns, q); err == nil {
				got = plRender(plConfig{}, q, a)
			} else {
				t.Fatalf("nodedns %s: %v", q, err)
			}
			total++
			if want != got {
				t.Errorf("%s:\n  CoreDNS: %s\n  nodedns: %s", q, strings.ReplaceAll(want, "\n", "\n           "), strings.ReplaceAll(got, "\n", "\n           "))
			}
		}
	}
	t.Logf("FIGURE view differential: %d questions from 4 client addresses, 2 views, zero differences allowed", total)
}
