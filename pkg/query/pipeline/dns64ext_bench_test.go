package pipeline

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/dns64"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// d64Index is a real index over a fake clientset: a Service with external
// IPs (lb) and one with only an IPv4 ClusterIP (v4), in team-x. Synced
// when run; New alone leaves it unsynced (enough for names of no zone).
func d64Index(tb testing.TB, run bool) *k8s.Index {
	tb.Helper()
	tcp := corev1.ProtocolTCP
	ports := []corev1.ServicePort{{Name: "http", Protocol: tcp, Port: 80}}
	objs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", Name: "lb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: "fd00:10:96::20", ClusterIPs: []string{"fd00:10:96::20"}, ExternalIPs: []string{"192.0.2.101", "fd00:100::1"}, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", Name: "v4"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: "192.0.2.50", ClusterIPs: []string{"192.0.2.50"}, Ports: ports}},
	}
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-x"}}, objs[0], objs[1])
	ix, err := k8s.New(client, k8s.Config{Zone: "cluster.local", TTL: 5, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	if run {
		dnstest.RunUntilCleanup(tb, "index Run", ix.Run)
		dnstest.WaitFor(tb, 10*time.Second, "index sync", ix.Synced)
	}
	return ix
}

// withDNS64External configures the plugins of withPlugins, dns64 (every
// answer translated, IPv6 clients only: the hot path's client is IPv4)
// and the external zone example.org of ix.
func withDNS64External(tb testing.TB, ix *k8s.Index, d dns64.Config) func(*Config) {
	var c Config
	withPlugins(tb)(&c)
	pl := *c.Plugins
	pl.DNS64 = mustDNS64(tb, d)
	x, err := ix.External(k8s.ExternalConfig{Zones: []string{"example.org."}, TTL: 5})
	if err != nil {
		tb.Fatal(err)
	}
	pl.External = x
	return func(c *Config) { c.Plugins = &pl }
}

// TestHotPathAllocsDNS64External: with dns64 and k8s_external configured,
// the hot path's queries (none for the external zone, none translated)
// still cost no allocation.
func TestHotPathAllocsDNS64External(t *testing.T) {
	s := hotServer(t, withDNS64External(t, d64Index(t, false), dns64.Config{TranslateAll: true}))
	out := make([]byte, 0, 4096)
	for _, c := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"cache hit", "Www.Example.Test.", dns.TypeA},
		{"cluster answer", "web.team-a.svc.cluster.local.", dns.TypeA},
		{"cache hit of 3 addresses", "pool.example.test.", dns.TypeA},
		{"template's fixed answer (AAAA from an IPv4 client)", "Www.Example.Test.", dns.TypeAAAA},
	} {
		pkt := packet(t, c.qname, c.qtype, true)
		if _, v := serveOnce(s, pkt, out); v != server.Reply {
			t.Fatalf("%s: verdict %d, want a reply on the reader", c.name, v)
		}
		if n := testing.AllocsPerRun(200, func() { serveOnce(s, pkt, out) }); n != 0 {
			t.Errorf("%s: %.1f allocations per query, want 0", c.name, n)
		}
	}
}

// resolveOnce runs pkt through the slow path (a worker's Resolve).
func resolveOnce(p *Pipeline, pkt, out []byte) []byte {
	reqs.Read("udp", 0, client, time.Now(), pkt)
	return p.Resolve(context.Background(), out[:0], reqs)
}

// BenchmarkDNS64External: the cost of a query when the plugins match,
// against the same server's nearest plain answers: k8s_external's A on
// the reader (an answer assembled per query) against a cluster answer;
// dns64's synthesized AAAA (allow_ipv4: the benchmark's client is IPv4)
// on the slow path, where such queries go, against a plain A there.
func BenchmarkDNS64External(b *testing.B) {
	ix := d64Index(b, true)
	c, err := cache.New(cache.Config{Size: 1000}, noUpstream{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	cfg := Config{Resolver: c, Cluster: ix}
	withDNS64External(b, ix, dns64.Config{AllowIPv4: true})(&cfg)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, 0, 4096)
	for _, q := range []struct {
		name   string
		qname  string
		qtype  uint16
		reader bool
	}{
		{"reader/cluster A (reference)", "v4.team-x.svc.cluster.local.", dns.TypeA, true},
		{"reader/k8s_external A", "lb.team-x.example.org.", dns.TypeA, true},
		{"slow/k8s_external AAAA, not translated", "lb.team-x.example.org.", dns.TypeAAAA, false},
		{"slow/cluster A (reference)", "v4.team-x.svc.cluster.local.", dns.TypeA, false},
		{"slow/dns64 synthesized AAAA", "v4.team-x.svc.cluster.local.", dns.TypeAAAA, false},
	} {
		pkt := packet(b, q.qname, q.qtype, true)
		var r dns.Msg
		if q.reader {
			o, v := serveOnce(s, pkt, out)
			if v != server.Reply {
				b.Fatalf("%s: verdict %d", q.name, v)
			}
			if err := r.Unpack(o); err != nil {
				b.Fatal(err)
			}
		} else if err := r.Unpack(resolveOnce(s, pkt, out)); err != nil {
			b.Fatal(err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			b.Fatalf("%s: %v", q.name, &r)
		}
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if q.reader {
					serveOnce(s, pkt, out)
				} else {
					resolveOnce(s, pkt, out)
				}
			}
		})
	}
}
