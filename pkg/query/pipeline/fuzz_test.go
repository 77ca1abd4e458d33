package pipeline

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// fuzzPod is the client address the fake Pods map to namespace team-a, so
// that fuzzed names under team-a.svc.cluster.local take the search-path
// walk.
var fuzzPod = netip.MustParseAddr("10.244.0.7")

// stubExchanger answers every query from the cache's upstream side with
// one A record (NXDOMAIN with an SOA for names starting "nx").
type stubExchanger struct{}

func (stubExchanger) Exchange(_ context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	name := q.Question[0].Name
	if strings.HasPrefix(name, "nx") {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{dnstest.MustRRf("example.test. 60 IN SOA ns.example.test. h.example.test. 1 2 3 4 60")}
		return m, nil
	}
	if q.Question[0].Qtype == dns.TypeA {
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", name)}
	}
	if q.Question[0].Qtype == dns.TypeTXT {
		for i := 0; i < 8; i++ {
			m.Answer = append(m.Answer, dnstest.MustRRf(`%s 60 IN TXT "%s"`, name, strings.Repeat("t", 200)))
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{dnstest.MustRRf("example.test. 60 IN SOA ns.example.test. h.example.test. 1 2 3 4 60")}
	}
	return m, nil
}

// fuzzServer is a pipeline without a transport: the fuzz target calls
// Answer and Resolve on it directly, with a real cache (holding a few
// entries, so that fuzzed queries hit it) as the Resolver, the fake
// cluster zone and a pod that walks search paths.
func fuzzServer(tb testing.TB) *Pipeline {
	tb.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := cache.New(cache.Config{Size: 64, Logger: quiet, PrefetchHits: -1}, stubExchanger{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	for _, name := range []string{"www.example.test.", "big.example.test.", "nx.example.test."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
			for _, do := range []bool{false, true} {
				if _, err := c.Resolve(context.Background(), stage.Origin{}, query(name, qt, do, false)); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	// The cluster keeps its messages, as the index does, so that search-
	// path shortcuts to cluster names are kept and served too.
	s, err := New(Config{Resolver: c, Cluster: &stableCluster{inner: testCluster()},
		Pods: fakePods{fuzzPod: "team-a"}, Autopath: true, Search: []string{"example.test."},
		QueryTimeout: time.Second, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// FuzzServe drives raw packets through the request path without sockets:
// Answer, then Resolve when Answer says Wait. It must never panic (the pipeline
// recovers panics into SERVFAIL, so the panic counter must stay zero),
// must drop exactly the packets without a header and the responses, and
// any reply must unpack with miekg/dns, carry the request's ID and QR, fit
// the client's size over UDP, and echo the question as the client spelled
// it.
func FuzzServe(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, false, false)
	}
	f.Add(dnstest.Pack(q("Web.Team-A.svc.cluster.local.", dns.TypeA)), false, false)
	f.Add(dnstest.Pack(q("www.example.test.team-a.svc.cluster.local.", dns.TypeA)), true, false)
	f.Add(dnstest.Pack(q("big.example.test.", dns.TypeTXT)), false, true)
	// Search-path shortcuts: an external winner (TXT too big for UDP), a
	// cluster winner, NODATA.
	f.Add(dnstest.Pack(q("big.example.test.team-a.svc.cluster.local.", dns.TypeTXT)), true, false)
	f.Add(dnstest.Pack(q("db.team-b.team-a.svc.cluster.local.", dns.TypeA)), true, false)
	f.Add(dnstest.Pack(q("www.example.test.team-a.svc.cluster.local.", dns.TypeAAAA)), true, false)
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, pkt []byte, fromPod, tcp bool) {
		client := netip.MustParseAddr("127.0.0.1")
		if fromPod {
			client = fuzzPod
		}
		proto := "udp"
		if tcp {
			proto = "tcp"
		}
		// The reader's buffer is reused: the request gets its own copy, as
		// the transport makes one.
		raw := append([]byte(nil), pkt...)
		r := new(server.Request)
		r.Read(proto, 0, client, time.Now(), raw)
		prefix := []byte("junk before the reply")
		out, v := s.Answer(append([]byte(nil), prefix...), r)
		if string(out[:len(prefix)]) != string(prefix) {
			t.Fatalf("Answer overwrote what dst held before the reply")
		}
		reply := out[len(prefix):]
		wantDrop := len(pkt) < dnswire.HeaderLen || binary.BigEndian.Uint16(pkt[2:])&dnswire.FlagQR != 0
		switch {
		case wantDrop && v != server.Drop:
			t.Fatalf("verdict %d for a packet that must be dropped", v)
		case !wantDrop && v == server.Drop:
			t.Fatalf("query dropped")
		case v == server.Wait:
			if len(reply) != 0 {
				t.Fatalf("verdict Wait with %d reply bytes", len(reply))
			}
			reply = s.Resolve(context.Background(), nil, r)
		}
		if n := s.cfg.Panics.Count(); n != 0 {
			t.Fatalf("%d panics recovered in the pipeline", n)
		}
		if v == server.Drop {
			return
		}
		checkReply(t, pkt, r, s.cfg.MaxUDPSize, reply)
	})
}

// checkReply checks a reply to the packet pkt, read into r, from a
// pipeline that caps UDP replies at maxUDP.
func checkReply(t *testing.T, pkt []byte, r *server.Request, maxUDP int, reply []byte) {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("reply does not unpack: %v\n% x", err, reply)
	}
	if m.Id != binary.BigEndian.Uint16(pkt) || !m.Response {
		t.Fatalf("reply ID %d QR %v, request ID %d", m.Id, m.Response, binary.BigEndian.Uint16(pkt))
	}
	c := call{req: r, q: &r.Query}
	c.setMaxSize(maxUDP)
	if r.Proto == "udp" && len(reply) > max(c.maxSize, dns.MinMsgSize) {
		t.Fatalf("UDP reply of %d bytes, client accepts %d", len(reply), c.maxSize)
	}
	if len(m.Question) > 1 {
		t.Fatalf("reply has %d questions", len(m.Question))
	}
	if len(m.Question) == 1 {
		asked, _, err := dns.UnpackDomainName(pkt, dnswire.HeaderLen)
		if err != nil {
			t.Fatalf("reply echoes a question that does not unpack from the request: %v", err)
		}
		if m.Question[0].Name != asked {
			t.Fatalf("reply question %q, asked %q", m.Question[0].Name, asked)
		}
	}
	if o := m.IsEdns0(); o != nil && !r.Query.EDNS {
		t.Fatalf("OPT in the reply to a query without one")
	}
}

// fuzzSeeds are the packets the seed corpus starts from: ordinary queries
// of every path and the bad packets of TestBadPackets.
func fuzzSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	add := func(m *dns.Msg) { out = append(out, dnstest.Pack(m)) }
	add(q("www.example.test.", dns.TypeA))
	add(q("WWW.Example.TEST.", dns.TypeAAAA))
	add(q("nx.example.test.", dns.TypeA))
	add(q("example.test.", dns.TypeANY))
	add(q("example.test.", dns.TypeAXFR))
	add(q("db.team-b.svc.cluster.local.", dns.TypeA))
	add(q("nope.team-a.svc.cluster.local.", dns.TypeA))
	add(q("ext.team-a.svc.cluster.local.", dns.TypeA))
	e := q("big.example.test.", dns.TypeTXT)
	e.SetEdns0(4096, true)
	add(e)
	v1 := q("www.example.test.", dns.TypeA)
	v1.SetEdns0(1232, false)
	v1.IsEdns0().SetVersion(1)
	add(v1)
	two := q("a.example.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	add(two)
	ch := q("version.bind.", dns.TypeTXT)
	ch.Question[0].Qclass = dns.ClassCHAOS
	add(ch)
	loop := dnstest.Pack(q("a.example.", dns.TypeA))
	out = append(out, append(loop[:12:12], 0xC0, 12, 0, 1, 0, 1))
	out = append(out, []byte{0, 1, 2})
	return out
}
