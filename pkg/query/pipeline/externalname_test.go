package pipeline

import (
	"context"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/query/template"
)

// rcodeExchanger answers every query with rcode and no records.
type rcodeExchanger int

func (r rcodeExchanger) Exchange(_ context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetRcode(q, int(r))
	return m, nil
}

// An ExternalName whose out-of-zone target the upstream could not resolve
// (SERVFAIL, REFUSED, NOTIMP; a SERVFAIL the cache kept) is a SERVFAIL:
// the CNAME alone with NOERROR reads as "no such record" to a client, which
// then stops looking (CoreDNS 1.15 answers so; a stated departure,
// docs/cluster-zone.md). A target that does not exist keeps CoreDNS's
// answer: NOERROR with the CNAME.
func TestExternalNameTargetFailure(t *testing.T) {
	for _, rc := range []int{dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNotImplemented, dns.RcodeNameError} {
		t.Run(dns.RcodeToString[rc], func(t *testing.T) {
			c, err := cache.New(cache.Config{Logger: quietLog}, rcodeExchanger(rc))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			_, addr := start(t, Config{Resolver: c, Cluster: testCluster()})
			want := dns.RcodeServerFailure
			if rc == dns.RcodeNameError {
				want = dns.RcodeSuccess
			}
			// Twice: the second finds the upstream's SERVFAIL (or NOTIMP)
			// in the cache.
			for i := range 2 {
				m := q("ext.team-a.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(1232, false)
				r := dnstest.Exchange(t, addr, "udp", m)
				if r.Rcode != want {
					t.Fatalf("query %d, target %s: %v; want %s", i, dns.RcodeToString[rc], r, dns.RcodeToString[want])
				}
				if want == dns.RcodeSuccess && (len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeCNAME) {
					t.Fatalf("target NXDOMAIN: %v; want the CNAME", r)
				}
				if want == dns.RcodeServerFailure && len(r.Answer) != 0 {
					t.Fatalf("a SERVFAIL with records: %v", r)
				}
			}
		})
	}
}

// A template's CNAME target the upstream could not resolve is a SERVFAIL
// too, as an ExternalName's: the template's CNAME alone with NOERROR would
// read as "no such record" (CoreDNS's template appends whatever its
// lookup gave, nothing for a SERVFAIL: a stated departure,
// docs/plugins.md). A target that does not exist keeps the template's
// answer.
func TestTemplateTargetFailure(t *testing.T) {
	for _, rc := range []int{dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNameError} {
		t.Run(dns.RcodeToString[rc], func(t *testing.T) {
			c, err := cache.New(cache.Config{Logger: quietLog}, rcodeExchanger(rc))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			pl := &Plugins{Templates: mustTemplates(t, template.Config{Class: "IN", Type: "A", Zones: []string{"ext.example"},
				Answer: []string{"{{ .Name }} 60 IN CNAME www.example.net."}})}
			_, addr := start(t, Config{Resolver: c, Plugins: pl})
			want := dns.RcodeServerFailure
			if rc == dns.RcodeNameError {
				want = dns.RcodeSuccess
			}
			for i := range 2 {
				r := dnstest.Exchange(t, addr, "udp", q("x.ext.example.", dns.TypeA))
				if r.Rcode != want || want == dns.RcodeSuccess && len(r.Answer) != 1 || want != dns.RcodeSuccess && len(r.Answer) != 0 {
					t.Fatalf("query %d, target %s: %v; want %s", i, dns.RcodeToString[rc], r, dns.RcodeToString[want])
				}
			}
		})
	}
}
