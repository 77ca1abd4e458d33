package kubedns

// The kube-dns ConfigMap's stubDomains: each file is bounded (1 MiB), but
// what it holds was not: some 20,000 zones fit, each a forwarder group the
// forwarder walks on every cache miss, and a zone could list any number of
// servers, each an upstream tried in turn within one exchange's budget.
// upstreamNameservers is bounded already (3, as kube-dns). Both bounds
// are errors naming the zone and the bound; Read names the file.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAttackStubDomainsUnbounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 10000; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q: [\"192.0.2.1\"]", fmt.Sprintf("z%d.example", i))
	}
	b.WriteString("}")
	if m, err := parseStubDomains([]byte(b.String())); err == nil {
		t.Errorf("stubDomains with %d zones (%d KiB) accepted; want a bound on the zones", len(m), b.Len()>>10)
	} else if !strings.Contains(err.Error(), fmt.Sprint(MaxStubZones)) {
		t.Errorf("stubDomains with 10000 zones: %v; want the bound named", err)
	}
	servers := make([]string, 500)
	for i := range servers {
		servers[i] = fmt.Sprintf("%q", fmt.Sprintf("192.0.%d.%d", i/250, i%250+1))
	}
	one := `{"corp.example": [` + strings.Join(servers, ",") + `]}`
	if m, err := parseStubDomains([]byte(one)); err == nil {
		t.Errorf("a stub domain with %d servers accepted; want a bound on the servers per zone", len(m["corp.example"]))
	} else if !strings.Contains(err.Error(), "corp.example") || !strings.Contains(err.Error(), fmt.Sprint(MaxStubServers)) {
		t.Errorf("a stub domain with 500 servers: %v; want the zone and the bound named", err)
	}

	// At the bounds: accepted. Through Read: the file named.
	var ok strings.Builder
	ok.WriteString("{")
	for i := range MaxStubZones {
		if i > 0 {
			ok.WriteString(",")
		}
		fmt.Fprintf(&ok, "%q: [%s]", fmt.Sprintf("z%d.example", i), strings.Join(servers[:MaxStubServers], ","))
	}
	ok.WriteString("}")
	if _, err := parseStubDomains([]byte(ok.String())); err != nil {
		t.Errorf("%d zones of %d servers: %v; want them accepted", MaxStubZones, MaxStubServers, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StubDomainsKey), []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, StubDomainsKey)) {
		t.Errorf("Read: %v; want the file named", err)
	}
}
