package k8s

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fuzzSuffixes are appended to the fuzzed label(s) so that the fuzzer
// spends its time inside the zone's grammar and the reverse zones rather
// than on names the index hands back at once.
var fuzzSuffixes = []string{
	"",
	".ns1.svc.cluster.local.",
	".svc.cluster.local.",
	".cluster.local.",
	".ns1.pod.cluster.local.",
	".in-addr.arpa.",
	".ip6.arpa.",
	".web.ns1.svc.cluster.local.",
	".hl.ns1.svc.cluster.local.",
}

// FuzzLookup synthesizes records for fuzzed names against an index built
// from the fixture cluster (fake clientset, real informers), in the
// default pod mode and in verified mode. Lookup must not panic; a name in
// the zone is always the index's to answer; an answer must be one a client
// can receive (it packs with the question and unpacks again), its first
// record must be owned by the name asked, an ExternalName target must be a
// lower-case FQDN, and the shared message must not change under a second
// look.
func FuzzLookup(f *testing.F) {
	seeds := []struct {
		label  string
		qtype  uint16
		suffix uint8
	}{
		{"web", dns.TypeA, 1}, {"web", dns.TypeAAAA, 1}, {"web", dns.TypeSRV, 1},
		{"_http._tcp.web", dns.TypeSRV, 1}, {"_https._tcp.hl", dns.TypeSRV, 1},
		{"web-0", dns.TypeA, 8}, {"10-244-1-6", dns.TypeA, 8}, {"fd00-244--5", dns.TypeAAAA, 8},
		{"10-244-2-9", dns.TypeA, 7}, {"hl", dns.TypeA, 1}, {"hl-empty", dns.TypeA, 1},
		{"ext", dns.TypeA, 1}, {"ext-in", dns.TypeA, 1}, {"ext-chain", dns.TypeA, 1},
		{"loop-a", dns.TypeA, 1}, {"ext-ip", dns.TypeA, 1}, {"ext", dns.TypeSRV, 1},
		{"ns1", dns.TypeA, 2}, {"nosuch", dns.TypeA, 2}, {"dns-version", dns.TypeTXT, 3},
		{"cluster", dns.TypeSOA, 0}, {"cluster.local", dns.TypeNS, 0}, {"ns.dns", dns.TypeA, 3},
		{"10-244-1-5", dns.TypeA, 4}, {"fd00-10-96--a", dns.TypeAAAA, 4},
		{"10.0.96.10", dns.TypePTR, 5}, {"5.1.244.10", dns.TypePTR, 5}, {"9.9.244.10", dns.TypePTR, 5},
		{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.d.f", dns.TypePTR, 6},
		{"a.b.c.d.e.f", dns.TypeA, 1}, {"WEB", dns.TypeA, 1}, {"web", dns.TypeAXFR, 1},
	}
	for _, s := range seeds {
		f.Add(s.label, s.qtype, s.suffix, false)
		f.Add(s.label, s.qtype, s.suffix, true)
	}
	objs := append(fixture(),
		testPod("ns1", "p1", "node-a", time.Unix(1, 0), "10.244.1.5"),
		testPod("ns1", "p2", "node-b", time.Unix(1, 0), "fd00:244::5"))
	insecure, _ := startIndex(f, Config{TTL: DefaultTTL, NodeName: "node-a"}, objs...)
	verified, _ := startIndex(f, Config{TTL: DefaultTTL, Pods: PodsVerified}, objs...)

	f.Fuzz(func(t *testing.T, label string, qtype uint16, suffix uint8, verify bool) {
		name := strings.ToLower(dns.Fqdn(label + fuzzSuffixes[int(suffix)%len(fuzzSuffixes)]))
		if strings.HasPrefix(name, ".") && name != "." {
			name = name[1:]
		}
		if _, ok := dns.IsDomainName(name); !ok || len(name) > 254 {
			return // the server never hands Lookup such a name
		}
		// Only what a query can carry: the wire form must fit too.
		if _, err := dns.PackDomainName(name, make([]byte, 256), 0, nil, false); err != nil {
			return
		}
		ix := insecure
		if verify {
			ix = verified
		}
		res, ok := ix.Lookup(name, qtype)
		inZone := name == "cluster.local." || strings.HasSuffix(name, ".cluster.local.")
		if inZone && !ok {
			t.Fatalf("%s %d: a name in the zone was not answered", name, qtype)
		}
		if !ok {
			return
		}
		if res.Msg == nil {
			t.Fatalf("%s %d: ok without a message", name, qtype)
		}
		before := res.Msg.String()
		if res.ExternalTarget != "" {
			if res.ExternalTarget != strings.ToLower(dns.Fqdn(res.ExternalTarget)) {
				t.Fatalf("%s: ExternalTarget %q not a lower-case FQDN", name, res.ExternalTarget)
			}
			if _, ok := dns.IsDomainName(res.ExternalTarget); !ok {
				t.Fatalf("%s: ExternalTarget %q not a domain name", name, res.ExternalTarget)
			}
		}
		if len(res.Msg.Answer) > 0 && res.Msg.Answer[0].Header().Name != name {
			t.Fatalf("%s %d: first answer owned by %q", name, qtype, res.Msg.Answer[0].Header().Name)
		}
		// What the server sends: the question plus the sections.
		out := &dns.Msg{MsgHdr: res.Msg.MsgHdr, Compress: true, Answer: res.Msg.Answer, Ns: res.Msg.Ns, Extra: res.Msg.Extra}
		out.Response = true
		out.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
		wire, err := out.Pack()
		if err != nil {
			t.Fatalf("%s %d: answer does not pack: %v\n%v", name, qtype, err, res.Msg)
		}
		back := new(dns.Msg)
		if err := back.Unpack(wire); err != nil {
			t.Fatalf("%s %d: packed answer does not unpack: %v", name, qtype, err)
		}
		again, ok2 := ix.Lookup(name, qtype)
		if !ok2 || again.Msg.String() != before || res.Msg.String() != before {
			t.Fatalf("%s %d: answer changed under a second look:\n%s\n%s", name, qtype, before, again.Msg)
		}
	})
}
