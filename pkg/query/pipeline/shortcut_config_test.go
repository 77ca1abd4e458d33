package pipeline

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// nameACL blocks one name, for one client or (client invalid) for all.
type nameACL struct {
	name   string
	client netip.Addr
}

func (a nameACL) Decide(name string, _ uint16, client netip.Addr) stage.ACLAction {
	if name == a.name && (!a.client.IsValid() || client == a.client) {
		return stage.ACLBlock
	}
	return stage.ACLPass
}

func (nameACL) ByName() bool { return true }

// nameTemplate answers A for one name.
type nameTemplate struct{ name, ip string }

func (tp nameTemplate) Lookup(name string, qtype, _ uint16, _ netip.Addr, _ uint16) (stage.TemplateAnswer, bool) {
	if name != tp.name {
		return stage.TemplateAnswer{}, false
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}}
	if qtype == dns.TypeA {
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A %s", name, tp.ip)}
	}
	return stage.TemplateAnswer{Msg: m}, true
}

// corpUpstream is ppUpstream, except that it knows
// api.example.com.corp.example.
type corpUpstream struct{}

func (corpUpstream) Exchange(ctx context.Context, o stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	if q.Question[0].Name != "api.example.com.corp.example." {
		return ppUpstream{}.Exchange(ctx, o, q)
	}
	m := new(dns.Msg)
	m.SetReply(q)
	if q.Question[0].Qtype == dns.TypeA {
		m.Answer = []dns.RR{dnstest.MustRRf("api.example.com.corp.example. 300 IN A 192.0.2.88")}
	} else {
		m.Ns = []dns.RR{dnstest.MustRRf("corp.example. 300 IN SOA ns.corp.example. h.corp.example. 1 2 3 4 300")}
	}
	return m, nil
}

const scName = "api.example.com.team-a.svc.cluster.local."

// A reload whose access list blocks the shortcut's winner: the expansion
// is no longer answered from it (CoreDNS's autopath asks each name
// through acl), and the pod, walking its list itself, meets the block.
// The shortcut used to be served until the cached winner expired.
func TestShortcutACLReload(t *testing.T) {
	e := newSCEnv(t, nil)
	e.warm(t, scName, dns.TypeA)
	e.s.SetPlugins(&Plugins{ACL: nameACL{name: "api.example.com."}})
	m, sc := e.ask(t, scName, dns.TypeA)
	if sc || cnameTarget(m) != "" || m.Rcode != dns.RcodeNameError {
		t.Fatalf("after the ACL blocks the winner: shortcut %v, %v; want NXDOMAIN as asked", sc, m)
	}
	// Lifted again: walked, and kept again.
	e.s.SetPlugins(nil)
	e.warm(t, scName, dns.TypeA)
}

// An access list that blocks the winner for one client only: another pod
// of the namespace, whose shortcut it is, does not get it through it.
func TestShortcutACLPerClient(t *testing.T) {
	other := netip.MustParseAddr("127.0.0.2")
	e := newSCEnv(t, nil)
	e.pods.set(other, "team-a")
	e.s.SetPlugins(&Plugins{ACL: nameACL{name: "api.example.com.", client: other}})
	e.warm(t, scName, dns.TypeA)
	m, sc := e.askFrom(t, other, scName, dns.TypeA)
	if sc || cnameTarget(m) != "" || m.Rcode != dns.RcodeNameError {
		t.Fatalf("a client the ACL blocks the winner for: shortcut %v, %v; want NXDOMAIN as asked", sc, m)
	}
	// The shortcut stays for the client it was built for.
	if _, sc := e.ask(t, scName, dns.TypeA); !sc {
		t.Fatal("the allowed client lost its shortcut")
	}
}

// A template that now answers an earlier step: the pod walking its list
// would stop there, so the walk does, at once.
func TestShortcutTemplateReload(t *testing.T) {
	e := newSCEnv(t, nil)
	e.warm(t, scName, dns.TypeA)
	e.s.SetPlugins(&Plugins{Templates: nameTemplate{name: "api.example.com.svc.cluster.local.", ip: "192.0.2.66"}})
	m, sc := e.ask(t, scName, dns.TypeA)
	if sc || cnameTarget(m) != "api.example.com.svc.cluster.local." {
		t.Fatalf("after a template answers step 1: shortcut %v, %v", sc, m)
	}
}

// Static records that now answer an earlier step (a reload of the hosts
// key, or the hosts file re-read by its own watcher, which the pipeline
// is not told of): the shortcut and the walk's decision go.
func TestShortcutHostsChange(t *testing.T) {
	h, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.50 other.example"}, Fallthrough: []string{}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	e := newSCEnvHosts(t, nil, h)
	e.warm(t, scName, dns.TypeA)
	if err := h.Update(hosts.Config{Entries: []string{"192.0.2.50 other.example", "192.0.2.55 api.example.com.svc.cluster.local"},
		Fallthrough: []string{}, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	for _, qt := range []uint16{dns.TypeA, dns.TypeA} {
		m, sc := e.ask(t, scName, qt)
		if sc || cnameTarget(m) != "api.example.com.svc.cluster.local." || len(m.Answer) != 2 || m.Answer[1].(*dns.A).A.String() != "192.0.2.55" {
			t.Fatalf("after the hosts record for step 1: shortcut %v, %v", sc, m)
		}
	}
}

// The upstreams replaced (a reload): the cache drops their answers and the
// pipeline the decisions made from them. A node search domain's step
// that the new upstream answers wins now, as it would for a pod walking
// its own list; the old decision (the bare name) used to stand for the
// memo's lifetime.
func TestShortcutUpstreamChange(t *testing.T) {
	e := newSCEnv(t, []string{"corp.example."})
	e.warm(t, scName, dns.TypeA)
	if m, _ := e.ask(t, scName, dns.TypeA); cnameTarget(m) != "api.example.com." {
		t.Fatalf("before: %v", m)
	}
	e.c.SetExchanger(corpUpstream{})
	e.c.Forget(func(string) bool { return true })
	e.s.Invalidate()
	m, sc := e.ask(t, scName, dns.TypeA)
	if sc || cnameTarget(m) != "api.example.com.corp.example." {
		t.Fatalf("after the upstream change: shortcut %v, %v; want the corp.example step", sc, m)
	}
}
