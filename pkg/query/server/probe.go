package server

import (
	"context"
	"net"
	"time"

	"github.com/miekg/dns"
)

// Answering reports the first of addrs (ip:port) where a DNS server already
// answers, over UDP within timeout: during a rolling update, the agent that
// is being replaced. Any reply counts (the probe, class CHAOS, is refused
// by most servers at once and never forwarded).
func Answering(ctx context.Context, addrs []string, timeout time.Duration) (string, bool) {
	q := new(dns.Msg)
	q.SetQuestion("id.server.", dns.TypeTXT)
	q.Question[0].Qclass = dns.ClassCHAOS
	type result struct {
		addr string
		ok   bool
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := make(chan result, len(addrs))
	for _, a := range addrs {
		go func() {
			c := &dns.Client{Net: "udp", Timeout: timeout, Dialer: &net.Dialer{Timeout: timeout}}
			r, _, err := c.ExchangeContext(ctx, q, a)
			res <- result{a, err == nil && r != nil && r.Response}
		}()
	}
	found := ""
	for range addrs {
		if r := <-res; r.ok && found == "" {
			found = r.addr
		}
	}
	return found, found != ""
}
