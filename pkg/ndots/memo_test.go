package ndots

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestMemo: a decision is found under the configuration generation it was
// made under and no other; a new decision for the key kills the old one
// (so do forget, eviction and Purge), and a dead or expired decision is
// not found.
func TestMemo(t *testing.T) {
	m := newMemo(2, time.Hour)
	a := m.put("team-a/web", 1, dns.TypeA, 7)
	if e, ok := m.get("team-a/web", 7); !ok || e != a || e.idx != 1 {
		t.Fatalf("get under its generation = %v, %v; want the decision", e, ok)
	}
	if _, ok := m.get("team-a/web", 8); ok {
		t.Fatal("a decision made under generation 7 was found under 8")
	}
	b := m.put("team-a/web", 2, dns.TypeAAAA, 7)
	if !a.dead.Load() {
		t.Fatal("a replaced decision is still alive: shortcuts built on it would be served")
	}
	if e, _ := m.get("team-a/web", 7); e != b {
		t.Fatalf("after a replacement get = %v, want the new decision", e)
	}
	m.forget(a) // not the one kept: b stays
	if e, _ := m.get("team-a/web", 7); e != b {
		t.Fatal("forgetting a replaced decision removed its successor")
	}
	m.forget(b)
	if _, ok := m.get("team-a/web", 7); ok || !b.dead.Load() || m.Len() != 0 {
		t.Fatalf("after forget: found %v, dead %v, %d kept", ok, b.dead.Load(), m.Len())
	}

	// Eviction (size 2) and Purge mark decisions dead.
	c1 := m.put("ns/1", 0, dns.TypeA, 1)
	m.put("ns/2", 0, dns.TypeA, 1)
	m.put("ns/3", 0, dns.TypeA, 1)
	if !c1.dead.Load() {
		t.Fatal("an evicted decision is still alive")
	}
	c3, _ := m.get("ns/3", 1)
	m.Purge()
	if c3 == nil || !c3.dead.Load() || m.Len() != 0 {
		t.Fatalf("after Purge: decision %v, %d kept", c3, m.Len())
	}

	// Expiry.
	short := newMemo(4, time.Nanosecond)
	d := short.put("ns/x", 0, dns.TypeA, 1)
	for time.Now().UnixNano() < d.expires {
		time.Sleep(time.Microsecond)
	}
	if _, ok := short.get("ns/x", 1); ok || d.alive(time.Now().UnixNano()) {
		t.Fatal("an expired decision was found")
	}
}

// TestMissed: an NXDOMAIN under the cluster zone or a node search domain
// is an expansion; under `<ns>.svc.<zone>` it is the pod's first, with the
// suffix's length; anything else is not.
func TestMissed(t *testing.T) {
	const zone = "cluster.local."
	search := []string{"corp.example."}
	cases := []struct {
		name       string
		exp, first bool
		cut        int
	}{
		{"web.team-a.svc.cluster.local.", true, true, len(".team-a.svc.cluster.local.")},
		{"web.svc.cluster.local.", true, false, 0},
		{"cluster.local.", false, false, 0},
		{"web.corp.example.", true, false, 0},
		{"corp.example.", false, false, 0},
		{"web.example.org.", false, false, 0},
	}
	for _, c := range cases {
		exp, first, cut := missed(c.name, "team-a", zone, search)
		if exp != c.exp || first != c.first || cut != c.cut {
			t.Errorf("missed(%s) = %v, %v, %d; want %v, %v, %d", c.name, exp, first, cut, c.exp, c.first, c.cut)
		}
	}
	if exp, _, _ := missed("web.team-a.svc.cluster.local.", "team-a", "", nil); exp {
		t.Error("an expansion of the cluster zone without a cluster zone")
	}
}
