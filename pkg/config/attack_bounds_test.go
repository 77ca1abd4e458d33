package config

// Numeric flags and keys without an upper bound, and list flags accepted
// silently: --udp-sockets=10500 started 10,500 reader threads and died with
// "thread exhaustion"; --gomaxprocs=100000 took 2.2 GB and stopped serving;
// the others made the agent hold, wait or keep things for absurd amounts (a
// lameduck of 114 years, a repair of the rules every 11 years, a cache
// bound of a TiB in a 256 MiB container, a search list of a thousand
// domains each walked per query, ...). Every one is refused by the check
// of its setting, so serve, `config validate` and a reload all refuse it,
// with an error naming the flag (or key) and the bound.

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestAttackFlagBounds(t *testing.T) {
	thousand := make([]string, 1000)
	for i := range thousand {
		thousand[i] = fmt.Sprintf("d%d.example", i)
	}
	hundred := make([]string, 100)
	for i := range hundred {
		hundred[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	for _, tc := range []struct {
		name string
		args []string
		flag string // the flag the error must name
	}{
		// Numbers.
		{"udp-sockets", []string{"--udp-sockets=10500"}, "udp-sockets"},
		{"gomaxprocs", []string{"--gomaxprocs=100000"}, "gomaxprocs"},
		{"max-inflight", []string{"--max-inflight=100000000"}, "max-inflight"},
		{"max-client-inflight over max-inflight", []string{"--max-client-inflight=1000000"}, "max-client-inflight"},
		{"max-client-inflight negative but -1", []string{"--max-client-inflight=-7"}, "max-client-inflight"},
		{"max-tcp-conns", []string{"--max-tcp-conns=100000000"}, "max-tcp-conns"},
		{"cache-size", []string{"--cache-size=1000000000"}, "cache-size"},
		{"cache-max-bytes", []string{"--cache-max-bytes=1024Gi"}, "cache-max-bytes"},
		{"prefetch", []string{"--prefetch=1000000000"}, "prefetch"},
		{"max-ttl", []string{"--max-ttl=100000h"}, "max-ttl"},
		{"min-ttl", []string{"--min-ttl=100000h", "--max-ttl=100000h"}, "min-ttl"},
		{"max-negative-ttl", []string{"--max-negative-ttl=100000h"}, "max-negative-ttl"},
		{"serve-stale", []string{"--serve-stale=100000h"}, "serve-stale"},
		{"sync-interval", []string{"--sync-interval=100000h"}, "sync-interval"},
		{"cluster-sync-wait", []string{"--cluster-sync-wait=100000h"}, "cluster-sync-wait"},
		{"lameduck", []string{"--lameduck=999999h"}, "lameduck"},
		// Lists.
		{"search with an empty label", []string{"--search=a..b"}, "search"},
		{"search of 1000 domains", []string{"--search=" + strings.Join(thousand, ",")}, "search"},
		{"namespaces of empty items", []string{"--namespaces=,,"}, "namespaces"},
		{"namespaces not a name", []string{"--namespaces=Not_A_Namespace"}, "namespaces"},
		{"listen twice the same", []string{"--listen=127.0.0.1:5300,127.0.0.1:5300"}, "listen"},
		{"local-ip twice the same", []string{"--local-ip=169.254.20.10,169.254.20.10"}, "local-ip"},
		{"upstream twice the same", []string{"--upstream=192.0.2.1,192.0.2.1"}, "upstream"},
		{"upstream 100 servers", []string{"--upstream=" + strings.Join(hundred, ",")}, "upstream"},
		{"cluster-domain with an empty label", []string{"--cluster-domain=cluster..local"}, "cluster-domain"},
		{"fallthrough with an empty label", []string{"--fallthrough=in-addr..arpa"}, "fallthrough"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !strings.HasPrefix(strings.Join(args, " "), "--listen") {
				args = append([]string{"--listen=127.0.0.1:5300"}, args...)
			}
			_, err := Load(args, io.Discard)
			if err == nil {
				t.Errorf("%s: accepted; want an error naming --%s and its bound", shorten(strings.Join(tc.args, " ")), tc.flag)
				return
			}
			if !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("%s: error %q does not name --%s", shorten(strings.Join(tc.args, " ")), err, tc.flag)
			}
		})
	}
}

// The same bounds apply to the file's keys.
func TestAttackKeyBounds(t *testing.T) {
	for _, kv := range []string{"udp-sockets: 10500", "gomaxprocs: 100000", "lameduck: 999999h", "max-ttl: 100000h",
		"sync-interval: 100000h", "cache-max-bytes: 1024Gi", "search: [a..b]", "namespaces: [\"\", \"\"]"} {
		_, err := loadFile(t, "listen: [\"127.0.0.1:5300\"]\n"+kv+"\n")
		key, _, _ := strings.Cut(kv, ":")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("file key %q: err %v; want an error naming the key and its bound", kv, err)
		}
	}
}

// A stub-domain table with no bound: every cache miss walks all of it
// (the forwarder's group lookup is a linear scan of the zones).
func TestAttackStubDomainCount(t *testing.T) {
	var b strings.Builder
	b.WriteString("listen: [\"127.0.0.1:5300\"]\nstub-domains:\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "  z%d.example: [\"192.0.2.1\"]\n", i)
	}
	if _, err := loadFile(t, b.String()); err == nil || !strings.Contains(err.Error(), "stub") {
		t.Errorf("5000 stub domains: err %v; want an error naming stub-domains and its bound", err)
	}
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
