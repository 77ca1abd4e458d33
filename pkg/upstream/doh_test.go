package upstream_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// TestDoH: an https:// server is asked over HTTP/2, POST /dns-query with
// ID 0 and application/dns-message (GET with the option), the reply gets
// the query's ID; one connection carries the queries; the certificate is
// verified for the server name or the address.
func TestDoH(t *testing.T) {
	ca := dnstest.NewCA(t)
	srv := dnstest.StartDoH(t, dnstest.Zone(60), ca.Issue(t, []string{"doh.test"}, netip.MustParseAddr("127.0.0.1")))
	caFile := ca.File(t)
	port := srv.Addr[strings.LastIndexByte(srv.Addr, ':')+1:]

	f := newForwarder(t, upstream.Config{Servers: []string{"https://" + srv.Addr}, CAFile: caFile})
	for _, name := range []string{"a.example.test.", "b.example.test.", "c.example.test."} {
		if r := forward(t, f, name, dns.TypeA); answerA(r) != "192.0.2.1" {
			t.Fatalf("%s: %v", name, r)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("requests %v", reqs)
	}
	for _, r := range reqs {
		if r.Proto != "HTTP/2.0" || r.Method != http.MethodPost || r.Path != "/dns-query" || r.ID != 0 ||
			r.ContentType != "application/dns-message" || r.Accept != "application/dns-message" || r.Host != srv.Addr {
			t.Fatalf("request %s", r)
		}
	}
	if srv.Conns() != 1 {
		t.Fatalf("%d connections for 3 queries, want 1", srv.Conns())
	}
	if s := f.Servers()[0]; s.Transport() != "https" || s.Addr != "https://"+srv.Addr {
		t.Fatalf("server %s over %s", s.Addr, s.Transport())
	}

	// GET, and the server name for the certificate and Host.
	g := newForwarder(t, upstream.Config{Servers: []string{"https://127.0.0.1:" + port + "#doh.test"}, CAFile: caFile,
		Options: upstream.GroupOptions{DoHMethod: http.MethodGet}})
	if r := forward(t, g, "get.example.test.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("GET: %v", r)
	}
	if last := srv.Requests()[len(srv.Requests())-1]; last.Method != http.MethodGet || last.Host != "doh.test" || last.ID != 0 || last.Name != "get.example.test." {
		t.Fatalf("GET request %s", last)
	}

	// A certificate for another name fails, and counts as a failure.
	bad := newForwarder(t, upstream.Config{Servers: []string{"https://" + srv.Addr + "#other.test"}, CAFile: caFile,
		Budget: 2 * time.Second})
	if _, err := bad.Exchange(context.Background(), stage.Origin{}, query("x.example.test.", dns.TypeA)); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("wrong server name: %v", err)
	}

	// A server that does not answer: two attempts of the read timeout.
	hole := dnstest.StartDoH(t, dnstest.Drop, ca.Issue(t, nil, netip.MustParseAddr("127.0.0.1")))
	h := newForwarder(t, upstream.Config{Servers: []string{"https://" + hole.Addr}, CAFile: caFile,
		Options: upstream.GroupOptions{ReadTimeout: 100 * time.Millisecond}})
	start := time.Now()
	if _, err := h.Exchange(context.Background(), stage.Origin{}, query("y.example.test.", dns.TypeA)); err == nil {
		t.Fatal("no error from a DoH server that does not answer")
	}
	if took := time.Since(start); took > 2*time.Second || hole.Count() != 2 {
		t.Fatalf("%s, %d requests; want 2 attempts of 100ms", took, hole.Count())
	}
}
