package pipeline

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// The cluster DNS asked before the index syncs answers without the cache
// in between: TTLs of 2^31 and more (RFC 2181 §8: 0) must not reach the
// client as they are.
func TestAttackHugeTTLBeforeSync(t *testing.T) {
	up := dnstest.Start(t, dnstest.Records(dns.RcodeSuccess, "{q} 4294967295 IN A 10.96.0.1"))
	central, err := upstream.New(upstream.Config{Servers: []string{up.Addr}, ForceTCP: true, TryTimeout: time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	cl := testCluster()
	cl.notSynced = true
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: cl, ClusterDNS: central})
	r := dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 0 {
		t.Errorf("before the sync, the cluster DNS's TTL 2^32-1 reached the client as %v; want TTL 0 (RFC 2181 §8)", r.Answer)
	}
}
