package config

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

// TestBoundsEdges: each bound is inclusive (the value at it is taken, the
// next one refused with the flag and the bound named), and the values with
// a meaning of their own below the bounds keep it.
func TestBoundsEdges(t *testing.T) {
	listen := "--listen=127.0.0.1:5300"
	rules := func(n int) string {
		var b strings.Builder
		b.WriteString("rewrite:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {from: a%d.example., to: b.example.}\n", i)
		}
		return b.String()
	}
	for _, c := range []struct {
		args []string
		file string
		want string // "": accepted
	}{
		{args: []string{"--udp-sockets=64"}},
		{args: []string{"--udp-sockets=65"}, want: "--udp-sockets 65: want 0 to 64"},
		{args: []string{"--udp-sockets=-1"}, want: "--udp-sockets -1: want 0 to 64"},
		{args: []string{"--gomaxprocs=256"}},
		{args: []string{"--gomaxprocs=257"}, want: "--gomaxprocs 257: want 0 to 256"},
		{args: []string{"--max-inflight=10000", "--max-client-inflight=10000"}},
		{args: []string{"--max-client-inflight=-1"}},
		{args: []string{"--max-client-inflight=2001"}, want: "--max-client-inflight 2001: want -1 (no per-client bound), 0 (max-inflight/8) or 1 to max-inflight (2000)"},
		{args: []string{"--max-tcp-conns=4097"}, want: "--max-tcp-conns 4097: want 1 to 4096"},
		{args: []string{"--cache-max-bytes=1Gi"}},
		{args: []string{"--cache-max-bytes=1025Mi"}, want: "--cache-max-bytes 1025Mi: want 64Ki to 1Gi"},
		{args: []string{"--max-ttl=168h"}},
		{args: []string{"--max-ttl=169h"}, want: "--max-ttl 169h0m0s: want 0s to 168h0m0s"},
		{args: []string{"--min-ttl=50m", "--max-ttl=10m"}, want: "--min-ttl 50m0s is above --max-ttl 10m0s"},
		{args: []string{"--sync-interval=1s"}},
		{args: []string{"--sync-interval=500ms"}, want: "--sync-interval 500ms: want 1s to 1h0m0s"},
		{args: []string{"--lameduck=5m"}},
		{args: []string{"--lameduck=-1s"}, want: "--lameduck -1s: want 0s to 5m0s"},
		// Readers over every listen address.
		{args: []string{"--listen=127.0.0.1:5300,127.0.0.2:5300,127.0.0.3:5300,127.0.0.4:5300,127.0.0.5:5300", "--udp-sockets=64"},
			want: "--udp-sockets 64 x 5 listen addresses: 320 UDP readers: want at most 256"},
		// Lists: the empty string is the empty list; an empty item, a
		// repetition in another spelling, too many items are refused.
		{args: []string{"--fallthrough="}},
		{args: []string{"--namespaces=a,b,"}, want: `invalid value "a,b," for flag -namespaces: "a,b,": item 3 is empty`},
		{args: []string{"--listen=127.0.0.1:5300,[::ffff:127.0.0.1]:5300"}, want: `--listen "[::ffff:127.0.0.1]:5300": given twice`},
		{args: []string{"--upstream=192.0.2.1,192.0.2.1:53"}, want: `--upstream "192.0.2.1:53": the same server as "192.0.2.1", given twice`},
		{args: []string{"--search=a.example,A.Example."}, want: `--search "A.Example.": given twice`},
		{args: []string{"--fallthrough=in-addr.arpa,IN-ADDR.ARPA."}, want: `--fallthrough "IN-ADDR.ARPA.": given twice`},
		{args: []string{"--log-queries-class=error,error"}, want: `--log-queries-class "error": given twice`},
		{args: []string{"--search=" + strings.Repeat("a", 64) + ".example"}, want: `not a domain name`}, // a label over 63
		{args: []string{"--cluster-domain=10.in-addr.arpa"}, want: `--cluster-domain "10.in-addr.arpa": a reverse zone cannot be the cluster domain`},
		{args: []string{"--node-name=node-a.example"}},
		{args: []string{"--node-name=Node_A"}, want: `--node-name "Node_A": not a node name`},
		{args: []string{"--stub-domain=corp.example=192.0.2.1,192.0.2.1"}, want: `stub domain "corp.example" "192.0.2.1": the same server as "192.0.2.1", given twice`},
		{file: "stub-domains:\n  corp.example: [192.0.2.1]\n  Corp.Example.: [192.0.2.2]\n", want: `the same zone as`},
		{file: "stub-domains:\n  corp.example: [" + strings.TrimSuffix(servers(16), ",") + "]\n", want: `stub domain "corp.example": 16 servers: want at most 15`},
		{file: rules(64)},
		{file: rules(65), want: "rewrite: 65 rules: want at most 64"},
		{file: "hosts:\n  entries: [\"192.0.2.1 a.example\"]\n  reload: 1ms\n", want: "hosts reload 1ms: want 0s (never) or 100ms to 1h0m0s"},
		{file: "hosts:\n  entries: [\"192.0.2.1 a.example\"]\n  reload: 0s\n"},
	} {
		var err error
		if c.file != "" {
			_, err = loadFile(t, "listen: [127.0.0.1:5300]\n"+c.file, c.args...)
		} else {
			args := c.args
			if !strings.HasPrefix(args[0], "--listen") {
				args = append([]string{listen}, args...)
			}
			_, err = Load(args, io.Discard)
		}
		name := strings.Join(c.args, " ") + c.file
		if len(name) > 100 {
			name = name[:100] + "..."
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want an error containing %q", name, err, c.want)
		}
	}
}

func servers(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "192.0.2.%d,", i+1)
	}
	return b.String()
}

// The stub zones of the file and of the kube-dns ConfigMap are the
// forwarder's groups together: their bound holds for both.
func TestKubeDNSStubZonesWithTheFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("listen: [127.0.0.1:5300]\nstub-domains:\n")
	for i := range 600 {
		fmt.Fprintf(&b, "  f%d.example: [192.0.2.1]\n", i)
	}
	cfg, err := loadFile(t, b.String())
	if err != nil {
		t.Fatal(err)
	}
	kd := kubedns.Config{StubDomains: map[string][]string{}}
	for i := range 400 {
		kd.StubDomains[fmt.Sprintf("k%d.example", i)] = []string{"192.0.2.2"}
	}
	kd.StubDomains["f1.example"] = []string{"192.0.2.2"} // the file's: counted once
	if err := cfg.CheckKubeDNS(kd); err != nil {
		t.Errorf("1000 zones together: %v", err)
	}
	kd.StubDomains["k400.example"] = []string{"192.0.2.2"}
	if err := cfg.CheckKubeDNS(kd); err == nil || !strings.Contains(err.Error(), "want at most 1000 together") {
		t.Errorf("1001 zones together: %v; want the bound named", err)
	}
}

// A lameduck near the pod's grace period is taken, with a warning.
func TestLameduckWarning(t *testing.T) {
	for _, c := range []struct {
		d    string
		warn bool
	}{{"5s", false}, {"24s", false}, {"25s", true}, {"5m", true}} {
		_, res, err := Parse([]string{"--listen=127.0.0.1:5300", "--lameduck=" + c.d}, false, nil)
		if err != nil || res.Err() != nil {
			t.Fatalf("--lameduck=%s: %v %v", c.d, err, res.Err())
		}
		got := strings.Contains(strings.Join(res.Warnings, "\n"), "terminationGracePeriodSeconds")
		if got != c.warn {
			t.Errorf("--lameduck=%s: warnings %q; want a grace period warning: %v", c.d, res.Warnings, c.warn)
		}
	}
}
