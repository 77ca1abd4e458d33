package pipeline

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/conformance"
	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// The protocol conformance table (internal/conformance: RFC 8906 sections
// 3 and 8, RFC 1035, 6891, 6895, 6840). Each case is sent over UDP and TCP
// to (a) a cluster name, answered authoritatively, and (b) an external name
// through the real cache and forwarder, twice: the first goes to the
// upstream, the second is a cache hit. Every reply is checked for rcode,
// every header flag, the question, and the OPT record.

// confTarget is where a case's question goes.
type confTarget struct {
	name  string
	cache bool // the name goes through cache and upstream (not authoritative)
	// question returns the name and type for case i, protocol proto.
	question func(c conformance.Case, i int, proto string) (string, uint16)
}

// conformanceServer runs a server with the fake cluster zone (plus a name
// whose answer is over 512 octets) and the real cache and forwarder in
// front of a test upstream.
func conformanceServer(t *testing.T) (udp, tcp string, up *dnstest.Server) {
	t.Helper()
	// big*: 40 A records, ~700 octets, over 512 and under 1232; truncated
	// over UDP, so the forwarder retries over TCP.
	up = dnstest.Start(t, dnstest.BigAZone(300))
	fwd, err := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Size: 1000}, fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl := testCluster()
	var many []dns.RR
	for i := 0; i < 40; i++ { // 40 A records: ~700 octets
		many = append(many, dnstest.MustRRf("many.team-a.svc.cluster.local. 5 IN A 10.96.1.%d", i))
	}
	cl.names["many.team-a.svc.cluster.local."] = many
	s, addr := start(t, Config{Resolver: c, Cluster: cl})
	return addr, s.TCPAddrs()[0].String(), up
}

func conformanceTargets() []confTarget {
	return []confTarget{
		{name: "cluster", question: func(c conformance.Case, i int, proto string) (string, uint16) {
			if c.Big {
				return "Many.Team-A.svc.cluster.local.", dns.TypeA
			}
			if c.Qtype != 0 {
				return "web.team-a.svc.cluster.local.", c.Qtype
			}
			return "Web.Team-A.svc.Cluster.Local.", dns.TypeA
		}},
		// A fresh name per case and protocol, so that the first query is a
		// miss (upstream) and the second a hit (cache).
		{name: "external", cache: true, question: func(c conformance.Case, i int, proto string) (string, uint16) {
			if c.Big {
				return fmt.Sprintf("Big%d-%s.Example.test.", i, proto), dns.TypeA
			}
			qt := c.Qtype
			if qt == 0 {
				qt = dns.TypeA
			}
			return fmt.Sprintf("C%d-%s.Example.test.", i, proto), qt
		}},
	}
}

// TestConformance runs the table; a failing case names every problem of
// its reply.
func TestConformance(t *testing.T) {
	udp, tcp, _ := conformanceServer(t)
	for _, tgt := range conformanceTargets() {
		for i, c := range conformance.Cases() {
			for _, proto := range []string{"udp", "tcp"} {
				t.Run(tgt.name+"/"+proto+"/"+c.Name, func(t *testing.T) {
					qname, qtype := tgt.question(c, i, proto)
					passes := []string{"first"}
					if tgt.cache {
						passes = []string{"miss", "hit"}
					}
					for j, pass := range passes {
						pkt := conformance.Query(c, uint16(1000+i*4+j), qname, qtype)
						var b []byte
						if proto == "udp" {
							b = dnstest.ExchangeRawUDP(t, udp, pkt)
						} else {
							b = rawTCP(t, tcp, pkt)
						}
						for _, p := range conformance.Check(c, !tgt.cache, proto, pkt, b) {
							t.Errorf("%s: %s", pass, p)
						}
					}
				})
			}
		}
	}
}
