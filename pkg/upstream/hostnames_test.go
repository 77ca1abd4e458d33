package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// TestHostNames: a server given by a name outside the cluster zones is
// resolved through the resolvers (A and AAAA of the absolute name), every
// address a server; a name that does not resolve leaves the group without
// it (not an error), and is tried again; a resolved name is asked again
// when its time comes, and the group follows the new address.
func TestHostNames(t *testing.T) {
	up1, _ := dnstest.StartPair(t, dnstest.Zone(60), func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.2")
		m.Answer = []dns.RR{rr}
		_ = w.WriteMsg(m)
	})
	port := up1.Addr[strings.LastIndexByte(up1.Addr, ':')+1:]
	var target atomic.Value
	target.Store("127.0.0.1")
	var mu sync.Mutex
	var asked []string
	resolver := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%s %s rd=%v", q.Name, dns.TypeToString[q.Qtype], r.RecursionDesired))
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		if q.Name == "dns.example.net." && q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR("dns.example.net. 1 IN A " + target.Load().(string))
			m.Answer = []dns.RR{rr}
		}
		_ = w.WriteMsg(m)
	})
	f, err := New(Config{Servers: []string{"dns.example.net:" + port}, NameServers: []string{resolver.Addr},
		ClusterZones: []string{"cluster.local"}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if fmt.Sprint(asked) != "[dns.example.net. A rd=true dns.example.net. AAAA rd=true]" {
		t.Fatalf("resolver asked %v", asked)
	}
	mu.Unlock()
	r, err := f.Exchange(context.Background(), stage.Origin{}, testQuery("x.example.test."))
	if err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("exchange: %v %v", r, err)
	}

	// Its time comes: the name is asked again and the new address used.
	target.Store("127.0.0.2")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f.hosts.mu.Lock()
	f.hosts.names["dns.example.net."].due = time.Now()
	f.hosts.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := f.Exchange(context.Background(), stage.Origin{}, testQuery(fmt.Sprintf("x%d.example.test.", time.Now().UnixNano())))
		if err == nil && len(r.Answer) == 1 && r.Answer[0].(*dns.A).A.String() == "192.0.2.2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not follow the name to its new address: %v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e := f.hosts.names["dns.example.net."]; time.Until(e.due) < 25*time.Second {
		t.Errorf("next resolution in %s; a TTL of 1s is raised to %s", time.Until(e.due), hostMinTTL)
	}

	// A name that does not resolve: the forwarder is built, its group has
	// no server from it.
	dead := dnstest.Start(t, dnstest.Drop)
	g, err := New(Config{Servers: []string{"nowhere.example.net"}, NameServers: []string{dead.Addr}, Logger: quietLog})
	if err != nil {
		t.Fatalf("an unresolvable name stopped the forwarder: %v", err)
	}
	if _, err := g.Exchange(context.Background(), stage.Origin{}, testQuery("y.example.test.")); !errors.Is(err, ErrNoUpstream) {
		t.Fatalf("exchange with the name unresolved: %v, want ErrNoUpstream", err)
	}
	if e := g.hosts.names["nowhere.example.net."]; e.known || time.Until(e.due) > hostRetry {
		t.Fatalf("unresolved name: known %v, again in %s", e.known, time.Until(e.due))
	}
}
