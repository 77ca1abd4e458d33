// Command testupstream is the project's small authoritative test server: it
// answers dnstest.Zone (A, AAAA, MX, TXT for any name; NXDOMAIN for names
// starting "nx"; large TXT for names starting "big") on one address until
// it receives SIGINT or SIGTERM, or until -for has passed. Benchmarks and
// scripts use it as the upstream behind nodedns, unbound and dnsmasq.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:5300", "ip:port (UDP and TCP)")
	ttl := flag.Uint("ttl", 3600, "TTL of every record")
	limit := flag.Duration("for", time.Hour, "stop after this long (every server a script starts stops by itself)")
	flag.Parse()
	s, err := dnstest.Listen(*addr, dnstest.Zone(uint32(*ttl)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testupstream:", err)
		os.Exit(1)
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *limit)
	defer cancel()
	fmt.Println("testupstream listening on", s.Addr)
	<-ctx.Done()
}
