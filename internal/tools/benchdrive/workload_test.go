package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The query and name files the shell wrote before this program (commit
// cc3ee2c's bench.sh and bench-pod.sh with the search list below), by the
// first 16 hex digits of their SHA-256: the workloads did not change.
var shellFiles = map[int]map[string]string{
	100: {
		"hit.txt": "195d4c64fa0da493", "nx.txt": "1ece88a9d4a53f92", "cluster.txt": "d194c474a16f866e",
		"pod.txt": "d99bf6c0941a3f44", "pod-walk.txt": "0bb90be6ea7d1f04",
		"pod-shortcut.txt": "d8b09d671d5e29a9", "pod-shortcut-walk.txt": "074a99743839da93",
		"pod-hit.txt": "195d4c64fa0da493", "pod-hit-walk.txt": "195d4c64fa0da493", "glibc.txt": "3060fea7369c34e1",
	},
	1000: {
		"cluster.txt": "775fe6b60e72ebec", "pod.txt": "ed4280179c7505b8", "pod-walk.txt": "65730f0ca84d174a", "glibc.txt": "97dc5d891c42cddd",
	},
}

func TestWorkloadFilesAsTheShellWroteThem(t *testing.T) {
	for nsvc, want := range shellFiles {
		dir := t.TempDir()
		for _, wl := range []string{"hit", "nx", "cluster"} {
			if err := writeLines(filepath.Join(dir, wl+".txt"), loopbackQueries(wl, nsvc)); err != nil {
				t.Fatal(err)
			}
		}
		p := &pod{o: options{work: dir}, names: newPodNames(nsvc, strings.Fields("bench-0.svc.cluster.local svc.cluster.local cluster.local")), files: map[string]string{}}
		if err := p.writeFiles(); err != nil {
			t.Fatal(err)
		}
		for name, sum := range want {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("-n %d: %v", nsvc, err)
			}
			if got := fmt.Sprintf("%x", sha256.Sum256(b))[:16]; got != sum {
				t.Errorf("-n %d: %s has sha256 %s…, the shell's had %s… (%d lines, first %q)", nsvc, name, got, sum, strings.Count(string(b), "\n"), strings.SplitN(string(b), "\n", 2)[0])
			}
		}
		// Which file each server gets.
		if got, want := p.file("pod", "coredns"), filepath.Join(dir, "pod.txt"); got != want {
			t.Errorf("coredns (autopath) gets %s on pod, want %s", got, want)
		}
		if got, want := p.file("pod", "node-cache"), filepath.Join(dir, "pod-walk.txt"); got != want {
			t.Errorf("node-cache gets %s on pod, want %s", got, want)
		}
	}
}

func TestObjects(t *testing.T) {
	svcs, err := objects("services", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 100 {
		t.Fatalf("%d Services for -n 100", len(svcs))
	}
	if want := `/api/v1/namespaces/bench-2/services {"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-49"},"spec":{"clusterIP":"None",`; !strings.HasPrefix(svcs[49], want) {
		t.Errorf("Service 49 (headless) = %s, want it to start %s", svcs[49], want)
	}
	eps, err := objects("endpointslices", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || !strings.Contains(eps[1], `"10.244.0.5"`) || !strings.Contains(eps[1], `svc-99-a`) {
		t.Errorf("EndpointSlices for -n 100 = %q, want svc-49-a and svc-99-a (10.244.0.5-7)", eps)
	}
	if _, err := objects("pods", 1); err == nil || !strings.Contains(err.Error(), `"pods"`) {
		t.Errorf("objects(pods): %v, want an error naming it", err)
	}
}

func TestParseServer(t *testing.T) {
	s, err := parseServer("nodedns-1r@127.0.0.7:5353/1234/127.0.0.1:9298")
	if err != nil || s != (server{name: "nodedns-1r", addr: "127.0.0.7", port: 5353, pid: 1234, admin: "127.0.0.1:9298"}) {
		t.Errorf("parseServer = %+v, %v", s, err)
	}
	for _, bad := range []string{"nodedns", "nodedns@127.0.0.2:5353", "x@127.0.0.2:0/1", "x@127.0.0.2:53/none", "@1.2.3.4:53/1"} {
		if _, err := parseServer(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseServer(%q): %v, want an error naming it", bad, err)
		}
	}
}

func TestGaiLoopLine(t *testing.T) {
	v, err := gaiLoopLine("lookups 100 ok 98 failed 2 seconds 1.00 lookups_per_s 100 p50_us 500 p99_us 900")
	if err != nil || v["failed"] != 2 || v["lookups_per_s"] != 100 {
		t.Errorf("gaiLoopLine = %v, %v", v, err)
	}
	if _, err := gaiLoopLine("lookups 100 ok 100"); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Errorf("a line without failed: %v, want an error naming it", err)
	}
}
