package ndots

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	const zone = "cluster.local."
	cases := []struct {
		name, ns, base string
		ok             bool
	}{
		{"api.example.com.default.svc.cluster.local.", "default", "api.example.com", true},
		{"web.default.svc.cluster.local.", "default", "web", true},
		{"svc.other.default.svc.cluster.local.", "default", "svc.other", true},
		{"default.svc.cluster.local.", "default", "", false},
		{"web.other.svc.cluster.local.", "default", "", false},
		{"web.xdefault.svc.cluster.local.", "default", "", false},
		{"web.default.svc.cluster.localx.", "default", "", false},
		{"web.default.svc.cluster.local.", "", "", false},
		{"example.com.", "default", "", false},
	}
	for _, c := range cases {
		base, ok := split(c.name, c.ns, zone)
		if base != c.base || ok != c.ok {
			t.Errorf("split(%q, %q) = %q, %v; want %q, %v", c.name, c.ns, base, ok, c.base, c.ok)
		}
	}
}

func TestExpansions(t *testing.T) {
	got := expansions("api.example.com", "team-a", "cluster.local.", []string{"corp.example.", "", "."})
	want := []string{
		"api.example.com.team-a.svc.cluster.local.",
		"api.example.com.svc.cluster.local.",
		"api.example.com.cluster.local.",
		"api.example.com.corp.example.",
		"api.example.com.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("expansions = %q, want %q", got, want)
	}
}

func TestSearch(t *testing.T) {
	got := Search([]string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "Corp.Example", ".", " lab.example. "}, "cluster.local.")
	want := []string{"corp.example.", "lab.example."}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Search = %q, want %q", got, want)
	}
}
