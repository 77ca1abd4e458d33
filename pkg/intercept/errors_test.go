package intercept

import (
	"errors"
	"net/netip"
	"testing"
)

// lockErr is what go-iptables returns when iptables waited for the xtables
// lock in vain: exit status 4.
type lockErr struct{}

func (lockErr) Error() string {
	return "Another app is currently holding the xtables lock. Stopped waiting after 5s."
}
func (lockErr) ExitStatus() int { return 4 }

// Failures are counted by kind, as node-cache's
// coredns_nodecache_setup_errors_total{errortype}: each failed rule
// operation once, the xtables lock apart, link failures apart.
func TestErrorsCountedByKind(t *testing.T) {
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4}, SetupIptables: true})
	if st := h.ic.Status(); st.Errors != nil {
		t.Fatalf("errors before any failure: %v", st.Errors)
	}
	h.r4.fail["Insert"] = errors.New("iptables: Resource temporarily unavailable")
	if err := h.ic.EnsureRules(); err == nil {
		t.Fatal("EnsureRules: no error")
	}
	wanted := h.ic.Status().RulesWanted
	if got := h.ic.Status().Errors; got[ErrIptables] != uint64(wanted) || len(got) != 1 {
		t.Errorf("after every insert failed: %v, want %d %s", got, wanted, ErrIptables)
	}
	h.r4.fail["Insert"] = lockErr{}
	h.ic.reconcile("test")
	if got := h.ic.Status().Errors; got[ErrIptablesLock] != uint64(wanted) || got[ErrIptables] != uint64(wanted) {
		t.Errorf("after the lock was held: %v", got)
	}
	// The snapshot is a copy.
	st := h.ic.Status()
	st.Errors[ErrIptables] = 0
	if h.ic.Status().Errors[ErrIptables] == 0 {
		t.Error("Status shares its Errors map")
	}
}

// refusingLinks fails what the test says.
type refusingLinks struct {
	*fakeLinks
	add, get error
}

func (r refusingLinks) Add(name, kind string) error {
	if r.add != nil {
		return r.add
	}
	return r.fakeLinks.Add(name, kind)
}

func (r refusingLinks) Get(name string) (linkInfo, bool, error) {
	if r.get != nil {
		return linkInfo{}, false, r.get
	}
	return r.fakeLinks.Get(name)
}

func TestLinkErrorsCounted(t *testing.T) {
	h := newHarness(t, allOn)
	h.links.noDummy = true
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if st := h.ic.Status(); st.Errors != nil {
		t.Fatalf("a bridge instead of a dummy is no error: %v", st.Errors)
	}
	delete(h.links.links, DefaultInterface)
	h.ic.links = refusingLinks{fakeLinks: h.links, add: errors.New("operation not permitted")}
	if err := h.ic.EnsureLink(); err == nil {
		t.Fatal("EnsureLink: no error")
	}
	h.ic.links = refusingLinks{fakeLinks: h.links, get: errors.New("netlink: receive timeout")}
	h.ic.reconcile("test")
	if got := h.ic.Status().Errors; got[ErrInterfaceAdd] != 1 || got[ErrInterfaceCheck] != 1 || len(got) != 2 {
		t.Errorf("errors %v, want one %s and one %s", got, ErrInterfaceAdd, ErrInterfaceCheck)
	}
}
