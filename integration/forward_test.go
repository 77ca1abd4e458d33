//go:build integration

package integration

// --cluster-zone forward through the real agent: NodeLocal DNSCache's
// arrangement, which clusters moving from it keep. The pods, API server and upstream are those of
// the autopath test; a fake central cluster DNS on loopback answers the
// cluster zone as CoreDNS would and counts what it is asked, and over
// which transport. The agent must send it the cluster and reverse zones
// over TCP, cache its answers for the cluster TTL, keep walking the pods'
// search lists itself (one query per type from the pod), and ask the API
// server for nothing but this node's pods.

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// centralDNS is the fake central CoreDNS: web.<nsA> and db.<nsB> exist
// (A only), and so does custom.<nsA>, which only this server knows (a name
// a customized Corefile would add); the ClusterIP of web has a PTR; every
// other name in the zone is NXDOMAIN with the zone's SOA.
type centralDNS struct {
	srv  *dnstest.Server
	mu   sync.Mutex
	seen []string // "name TYPE"
}

func newCentralDNS(t *testing.T, e *apEnv) *centralDNS {
	c := &centralDNS{}
	web, db := "web."+e.nsA+".svc."+apZone+".", "db."+e.nsB+".svc."+apZone+"."
	custom := "custom." + e.nsA + ".svc." + apZone + "."
	webPTR, _ := dns.ReverseAddr(e.webIP)
	c.srv = dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		c.mu.Lock()
		c.seen = append(c.seen, name+" "+dns.TypeToString[q.Qtype])
		c.mu.Unlock()
		soa := dnstest.MustRR(apZone + ". 30 IN SOA ns.dns." + apZone + ". hostmaster." + apZone + ". 1 7200 1800 86400 30")
		switch {
		case name == web && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 5 IN A " + e.webIP)}
		case name == db && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 5 IN A " + e.dbIP)}
		case name == custom && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 5 IN A " + centralOnlyIP)}
		case name == web || name == db || name == custom:
			m.Ns = []dns.RR{soa}
		case name == webPTR && q.Qtype == dns.TypePTR:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 5 IN PTR " + web)}
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		}
		_ = w.WriteMsg(m)
	})
	return c
}

func (c *centralDNS) since(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen[n:]...)
}

func (c *centralDNS) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// centralOnlyIP is the address of custom.<nsA> (data in answers only).
const centralOnlyIP = "169.254.77.77"

func TestClusterZoneForward(t *testing.T) {
	e := newAutopathEnv(t)
	central := newCentralDNS(t, e)
	e.agentArgs = []string{"--cluster-zone", "forward", "--cluster-dns", central.srv.Addr, "--cluster-ttl", "30s"}
	agent, adminAddr := e.startAgent(t, true, e.specA.nodeV4, e.specB.nodeV4)
	e.waitAgent(t, agent, adminAddr, true, e.podB)

	// A name only the central DNS knows, by its short name: the pod sends
	// A and AAAA once each; the agent asks the central DNS for the first
	// search step, which exists.
	n := central.count()
	r := apGetent(t, e.podA, "custom")
	if r.status != "ok" || strings.Join(r.addrs, ",") != centralOnlyIP || r.queries != 2 {
		t.Fatalf("getent custom: %s", r)
	}
	if got := central.since(n); len(got) != 2 || !strings.HasPrefix(got[0], "custom."+e.nsA+".svc.") || !strings.HasPrefix(got[1], "custom."+e.nsA+".svc.") {
		t.Fatalf("central asked %q for custom, want the A and AAAA of the first search step", got)
	}
	if r := apGetent(t, e.podA, "web"); r.status != "ok" || strings.Join(r.addrs, ",") != e.webIP || r.queries != 2 {
		t.Fatalf("getent web: %s", r)
	}

	// An external name: the agent walks the pod's search list, asking the
	// forwarded zone for each cluster step and the upstream for the rest;
	// the pod sends one query per type.
	n, upN := central.count(), e.up.count()
	r = apGetent(t, e.podA, apExternal)
	if r.status != "ok" || r.queries != 2 || len(r.addrs) != 2 {
		t.Fatalf("getent %s: %s", apExternal, r)
	}
	steps := central.since(n)
	for _, want := range []string{
		apExternal + "." + e.nsA + ".svc." + apZone + ". A",
		apExternal + ".svc." + apZone + ". A",
		apExternal + "." + apZone + ". A",
	} {
		found := false
		for _, s := range steps {
			found = found || s == want
		}
		if !found {
			t.Errorf("central not asked %q; asked %q", want, steps)
		}
	}
	for _, s := range steps {
		if !strings.HasSuffix(strings.Fields(s)[0], "."+apZone+".") {
			t.Errorf("central asked about %q, outside the cluster zone", s)
		}
	}
	if got := e.up.since(upN); len(got) == 0 {
		t.Error("the upstream was not asked for the external name")
	}
	for _, s := range e.up.since(upN) {
		if strings.Contains(s, "."+apZone+".") {
			t.Errorf("the upstream was asked about a cluster name: %q", s)
		}
	}

	// Again: every step is cached (for the cluster TTL), the central DNS
	// is not asked.
	n = central.count()
	if r := apGetent(t, e.podA, apExternal); r.status != "ok" || r.queries != 2 {
		t.Fatalf("second getent %s: %s", apExternal, r)
	}
	if got := central.since(n); len(got) != 0 {
		t.Errorf("central asked %q again within the cluster TTL", got)
	}

	// Reverse zones go to the central DNS too.
	n = central.count()
	if d := apDigQuery(t, e.podA, false, mustReverse(t, e.webIP), "PTR"); d.status != "NOERROR" || len(d.chain) != 1 ||
		!strings.HasSuffix(d.chain[0], "PTR web."+e.nsA+".svc."+apZone+".") {
		t.Fatalf("PTR of web's ClusterIP: %s", d)
	}
	if central.count() == n {
		t.Error("the PTR query did not reach the central DNS")
	}

	// Every query reached the central DNS over TCP.
	if central.srv.Count() == 0 || central.srv.TCPCount() != central.srv.Count() {
		t.Errorf("central DNS: %d queries, %d over TCP; want all over TCP", central.srv.Count(), central.srv.TCPCount())
	}

	// The API server is asked for this node's pods only.
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + adminAddr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Informers struct {
			Objects map[string]int `json:"objects"`
		} `json:"informers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if o := st.Informers.Objects; o["services"] != 0 || o["namespaces"] != 0 || o["endpointslices"] != 0 || o["pods"] < 2 {
		t.Errorf("informer objects %v: want this node's pods only", o)
	}
	t.Logf("FIGURE forward: central DNS asked %d questions (all over TCP: %v) for the lookups above", central.srv.Count(),
		central.srv.TCPCount() == central.srv.Count())
}

func mustReverse(t *testing.T, ip string) string {
	t.Helper()
	r, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
