package pipeline

// An upstream that sets TC over UDP and again over TCP, end to end. The
// forwarder used to hand the truncated TCP reply back as an answer, the
// cache passed it on without keeping it, and the header patch cleared
// TC: the client got NOERROR with no records, over UDP and TCP alike,
// which it reads as "no such record". It must be SERVFAIL. Through the
// search-path walk the same reply made a node search domain's step a
// winner (NODATA for the whole name); through --cluster-dns (before the
// index syncs) it reached the client directly. The pipeline itself never
// turns a truncated message a stage hands it into an answer.

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func truncatedReply(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Truncated = true
	_ = w.WriteMsg(m)
}

func TestAttackTCTwiceReachesClientAsNoError(t *testing.T) {
	up := dnstest.Start(t, truncatedReply)
	fwd, err := upstream.New(upstream.Config{Servers: []string{up.Addr}, TryTimeout: time.Second, Budget: 2 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Size: 100, Logger: quietLog}, fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, addr := start(t, Config{Resolver: c})
	for i, proto := range []string{"udp", "tcp"} {
		a := addr
		if proto == "tcp" {
			a = s.TCPAddrs()[0].String()
		}
		r := dnstest.Exchange(t, a, proto, q(sprintf("tc%d.example.", i), dns.TypeA))
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: upstream truncated over UDP and TCP: client got %s (TC %v, %d answers), want SERVFAIL",
				proto, dns.RcodeToString[r.Rcode], r.Truncated, len(r.Answer))
		}
	}
}

// A node search domain whose upstream truncates over UDP and TCP: its
// step fails, so the walk cannot decide and the query is answered as
// asked (the client walks its list itself); never NODATA for the whole
// name.
func TestAttackTCTwiceWinsTheWalk(t *testing.T) {
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		if strings.HasSuffix(r.Question[0].Name, ".corp.example.") {
			truncatedReply(w, r)
			return
		}
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.1", r.Question[0].Name)}
		_ = w.WriteMsg(m)
	})
	fwd, err := upstream.New(upstream.Config{Servers: []string{up.Addr}, TryTimeout: time.Second, Budget: 2 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Size: 100, Logger: quietLog}, fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	_, addr := start(t, Config{Resolver: c, Cluster: testCluster(), Pods: pods, Autopath: true,
		Search: []string{"corp.example."}})
	r := dnstest.Exchange(t, addr, "udp", q("api.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0 {
		t.Errorf("walk through a search domain whose upstream truncates over UDP and TCP: NODATA for the whole name "+
			"(authority %v); want the walk to fail at that step (the client walks itself), never a winner", r.Ns)
	}
}

// truncatingExchanger answers every query with an empty, truncated NOERROR,
// as a stage that let a truncated reply through would.
type truncatingExchanger struct{}

func (truncatingExchanger) Exchange(_ context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Truncated = true
	return m, nil
}

// Whatever stage hands the pipeline a truncated message (the resolver, the
// cluster DNS before the sync, an ExternalName's target, a walk step), the
// client gets SERVFAIL: the pipeline clears TC when it writes a reply, so a
// truncated message passed on would be an empty NOERROR.
func TestTruncatedStageReplyIsServfail(t *testing.T) {
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		return truncatingExchanger{}.Exchange(ctx, stage.Origin{}, q)
	}}
	cl := testCluster()
	s, addr := start(t, Config{Resolver: res, Cluster: cl})
	cl2 := testCluster()
	cl2.notSynced = true
	_, addr2 := start(t, Config{Resolver: externalResolver(), Cluster: cl2, ClusterDNS: truncatingExchanger{}})
	for _, tc := range []struct{ what, addr, proto, name string }{
		{"resolver udp", addr, "udp", "tc.example."},
		{"resolver tcp", s.TCPAddrs()[0].String(), "tcp", "tc.example."},
		{"ExternalName target", addr, "udp", "ext.team-a.svc.cluster.local."},
		{"cluster DNS before the sync", addr2, "udp", "web.team-a.svc.cluster.local."},
	} {
		r := dnstest.Exchange(t, tc.addr, tc.proto, q(tc.name, dns.TypeA))
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: a truncated stage reply reached the client as %s (TC %v, %d answers); want SERVFAIL",
				tc.what, dns.RcodeToString[r.Rcode], r.Truncated, len(r.Answer))
		}
	}
}
