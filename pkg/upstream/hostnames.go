package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Servers given by a name outside the cluster zones (dns.example.net,
// tls://dns.quad9.net, https://dns.google) are resolved by asking the
// node's resolvers (Config.NameServers: --upstream-resolver, else the
// nameservers of the node's resolv.conf, never the agent itself) for A
// and AAAA of the name as an absolute name, as CoreDNS 1.15 resolves a
// forward's TO names (with its resolver option, or the system's). Every
// address is a server.
//
// Two departures from CoreDNS, on purpose: CoreDNS resolves once, at
// start, and does not start when a name does not resolve; here the first
// resolution is tried when the forwarder is built (for at most
// hostStartWait) and a name that does not resolve leaves its group
// without that server (SERVFAIL if it has no other) while it is tried
// again every hostRetry; and a resolved name is asked again when its
// answer's TTL runs out (hostMinTTL to hostMaxTTL), so a resolver that
// moves is followed without a restart.
const (
	hostStartWait = 2 * time.Second
	hostTimeout   = 2 * time.Second // one question to one resolver, as CoreDNS's
	hostRetry     = 5 * time.Second
	hostMinTTL    = 30 * time.Second
	hostMaxTTL    = 5 * time.Minute
)

// hostNames holds the names of external servers and their addresses.
type hostNames struct {
	servers []string // ip:port
	log     *slog.Logger
	// ask asks one resolver one question: exchangeHost, or a test's
	// stand-in.
	ask func(ctx context.Context, server string, q *dns.Msg) (*dns.Msg, error)

	mu    sync.Mutex
	names map[string]*hostEntry
}

type hostEntry struct {
	addrs []netip.Addr
	known bool      // resolved at least once
	due   time.Time // when to ask again
	busy  bool      // a resolution is under way
}

func newHostNames(servers []string, log *slog.Logger) (*hostNames, error) {
	h := &hostNames{log: log, names: map[string]*hostEntry{}, ask: exchangeHost}
	for _, s := range servers {
		a, err := NormalizeAddr(s)
		if err != nil {
			return nil, fmt.Errorf("resolver of upstream names: %w", err)
		}
		h.servers = append(h.servers, a)
	}
	return h, nil
}

// lookup returns the addresses of name (a lower-case FQDN): ok is false
// while it has never resolved. The first lookup of a name resolves it,
// waiting at most hostStartWait.
func (h *hostNames) lookup(name string) ([]netip.Addr, bool) {
	h.mu.Lock()
	e, ok := h.names[name]
	if !ok {
		e = &hostEntry{busy: true}
		h.names[name] = e
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), hostStartWait)
		h.resolve(ctx, name, e)
		cancel()
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	return e.addrs, e.known
}

// maintain resolves again, in the background, the names whose time has
// come; ctx (the forwarder's Run) ends what is under way.
func (h *hostNames) maintain(ctx context.Context, now time.Time) {
	if ctx == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, e := range h.names {
		if e.busy || now.Before(e.due) {
			continue
		}
		e.busy = true
		go func() {
			rctx, cancel := context.WithTimeout(ctx, time.Duration(len(h.servers))*hostTimeout+time.Second)
			defer cancel()
			h.resolve(rctx, name, e)
		}()
	}
}

// resolve asks the resolvers in turn for A and AAAA of name until one
// answers both, and records what it says.
func (h *hostNames) resolve(ctx context.Context, name string, e *hostEntry) {
	addrs, ttl, err := h.query(ctx, name)
	h.mu.Lock()
	defer h.mu.Unlock()
	e.busy = false
	if err != nil {
		e.due = time.Now().Add(hostRetry)
		if e.known {
			h.log.Warn("upstream name not resolved again; keeping its addresses", "server", name, "addresses", fmt.Sprint(e.addrs), "err", err)
		} else {
			h.log.Warn("upstream name not resolved; its group has no server from it until it is", "server", name, "err", err)
		}
		return
	}
	e.due = time.Now().Add(min(max(ttl, hostMinTTL), hostMaxTTL))
	e.addrs, e.known = addrs, true
}

// query returns the A and AAAA addresses of name from the first resolver
// that answers both questions, and the smallest TTL among them.
func (h *hostNames) query(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	if len(h.servers) == 0 {
		return nil, 0, errors.New("no resolver to ask (--upstream-resolver, or nameservers in --resolv-conf)")
	}
	var errs []error
	for _, srv := range h.servers {
		var addrs []netip.Addr
		ttl := hostMaxTTL
		ok := true
		for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
			q := new(dns.Msg)
			q.SetQuestion(name, t)
			r, err := h.ask(ctx, srv, q)
			if err == nil && r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
				err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s from %s: %w", name, dns.TypeToString[t], srv, err))
				ok = false
				break
			}
			for _, rr := range r.Answer {
				var a netip.Addr
				switch v := rr.(type) {
				case *dns.A:
					a, _ = netip.AddrFromSlice(v.A.To4())
				case *dns.AAAA:
					a, _ = netip.AddrFromSlice(v.AAAA)
				default:
					continue
				}
				if a.IsValid() && !slices.Contains(addrs, a.Unmap()) {
					addrs = append(addrs, a.Unmap())
				}
				ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
			}
		}
		if ok {
			return addrs, ttl, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, errors.Join(errs...)
}

// exchangeHost asks server q over UDP, read as the forwarder reads its
// servers (exchangeUDP: the datagram whole whatever its size, strays and
// garbage skipped), and over TCP when the reply is truncated; a reply
// still truncated over TCP answers nothing (errTruncated): taken as an
// answer it would say the name has no address.
func exchangeHost(ctx context.Context, server string, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, hostTimeout)
	defer cancel()
	r, err := exchangeUDP(ctx, server, q)
	if err != nil || !r.Truncated {
		return r, err
	}
	c := &dns.Client{Net: "tcp"}
	if r, _, err = c.ExchangeContext(ctx, q, server); err != nil {
		return nil, fmt.Errorf("retrying %s over TCP after truncation: %w", server, err)
	}
	if err := Validate(q, r); err != nil {
		return nil, fmt.Errorf("reply from %s over TCP: %w: %w", server, errMismatch, err)
	}
	if r.Truncated {
		return nil, fmt.Errorf("retrying %s over TCP after truncation: %w", server, errTruncated)
	}
	return r, nil
}
