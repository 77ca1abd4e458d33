// Command resolvstub is the DNS server of scripts/resolver-failover.sh: it
// answers on UDP and TCP port 53 of one or more addresses, each with a
// behaviour of its own, so that the script can put a pod's first nameserver
// into a failure state while the second one keeps answering.
//
//	resolvstub -serve 169.254.201.53=servfail -serve 169.254.201.54=answer
//
// Behaviours:
//
//	answer    a small authoritative server: names under cluster.local get
//	          NXDOMAIN with the zone's SOA (what kube-dns says about a
//	          search-list expansion of an external name); A is the address
//	          the question came in on and AAAA is that address under
//	          fd00:: (data only, so a client's answer says which server
//	          gave it); other types NODATA. A name whose first label starts
//	          with "tc" gets an empty truncated (TC) reply over UDP and its
//	          answer over TCP, to make clients fall back to TCP.
//	servfail  SERVFAIL to every query
//	refused   REFUSED to every query
//
// A server that does not answer at all is no behaviour of this program: the
// script drops its packets with iptables (a hung process still holding its
// socket) or does not bind the address (the kernel answers ICMP port
// unreachable). It prints "ready" once every socket is bound, stops on
// SIGINT or SIGTERM or after -for, and with -log appends one line per query
// ("ADDR PROTO NAME TYPE") to a file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// serveFlags collects repeated -serve ADDR=BEHAVIOUR flags.
type serveFlags []listener

type listener struct {
	ip   net.IP
	mode string
}

func (s *serveFlags) String() string { return fmt.Sprint(*s) }

func (s *serveFlags) Set(v string) error {
	addr, mode, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("-serve %q: want ADDR=BEHAVIOUR", v)
	}
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return fmt.Errorf("-serve %q: %q is not an IPv4 address", v, addr)
	}
	switch mode {
	case "answer", "servfail", "refused":
	default:
		return fmt.Errorf("-serve %q: behaviour %q: want answer, servfail or refused", v, mode)
	}
	*s = append(*s, listener{ip: ip, mode: mode})
	return nil
}

func main() {
	var serve serveFlags
	flag.Var(&serve, "serve", "ADDR=BEHAVIOUR (answer, servfail, refused) on port 53 of ADDR, UDP and TCP; repeatable")
	logPath := flag.String("log", "", "append one line per query to this file")
	limit := flag.Duration("for", time.Hour, "stop after this long (every server a script starts stops by itself)")
	flag.Parse()
	if err := run(serve, *logPath, *limit); err != nil {
		fmt.Fprintln(os.Stderr, "resolvstub:", err)
		os.Exit(1)
	}
}

func run(serve serveFlags, logPath string, limit time.Duration) error {
	switch {
	case len(serve) == 0:
		return errors.New("no -serve address")
	case len(serve) > 16:
		return fmt.Errorf("%d -serve addresses: at most 16", len(serve))
	case limit <= 0 || limit > 24*time.Hour:
		return fmt.Errorf("-for %v: want (0, 24h]", limit)
	}
	var ql *queryLog
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("opening query log: %w", err)
		}
		defer f.Close()
		ql = &queryLog{f: f}
	}

	var servers []*dns.Server
	defer func() {
		for _, s := range servers {
			if err := s.Shutdown(); err != nil {
				fmt.Fprintln(os.Stderr, "resolvstub: shutdown:", err)
			}
		}
	}()
	errc := make(chan error, 2*len(serve))
	for _, l := range serve {
		addr := net.JoinHostPort(l.ip.String(), "53")
		h := handler(l, ql)
		pc, err := net.ListenPacket("udp4", addr)
		if err != nil {
			return fmt.Errorf("listening on udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			pc.Close()
			return fmt.Errorf("listening on tcp %s: %w", addr, err)
		}
		for _, s := range []*dns.Server{
			{PacketConn: pc, Handler: h("udp")},
			{Listener: ln, Handler: h("tcp"), ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 5 * time.Second }},
		} {
			servers = append(servers, s)
			go func() { errc <- s.ActivateAndServe() }()
		}
	}
	fmt.Println("ready")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	}
}

// queryLog appends one line per query; writes from the UDP and TCP servers
// of every address are serialised.
type queryLog struct {
	mu sync.Mutex
	f  *os.File
}

func (q *queryLog) add(addr net.IP, proto string, qs dns.Question) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := fmt.Fprintf(q.f, "%s %s %s %s\n", addr, proto, qs.Name, dns.TypeToString[qs.Qtype]); err != nil {
		fmt.Fprintln(os.Stderr, "resolvstub: query log:", err)
	}
}

// clusterSOA is the negative answer's SOA for names under cluster.local.
var clusterSOA = &dns.SOA{
	Hdr:     dns.RR_Header{Name: "cluster.local.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 5},
	Ns:      "ns.dns.cluster.local.",
	Mbox:    "hostmaster.cluster.local.",
	Serial:  1,
	Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: 5,
}

func handler(l listener, ql *queryLog) func(proto string) dns.HandlerFunc {
	aaaa := net.ParseIP("fd00::" + l.ip.String())
	return func(proto string) dns.HandlerFunc {
		return func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg)
			if len(req.Question) != 1 {
				m.SetRcode(req, dns.RcodeFormatError)
				write(w, m)
				return
			}
			q := req.Question[0]
			ql.add(l.ip, proto, q)
			switch l.mode {
			case "servfail":
				m.SetRcode(req, dns.RcodeServerFailure)
			case "refused":
				m.SetRcode(req, dns.RcodeRefused)
			default:
				answer(m, req, q, proto, l.ip, aaaa)
			}
			write(w, m)
		}
	}
}

func answer(m, req *dns.Msg, q dns.Question, proto string, v4, v6 net.IP) {
	name := strings.ToLower(q.Name)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	if dns.IsSubDomain("cluster.local.", name) {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{dns.Copy(clusterSOA)}
		return
	}
	if proto == "udp" && strings.HasPrefix(name, "tc") {
		m.Truncated = true
		return
	}
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 30}
	switch q.Qtype {
	case dns.TypeA:
		hdr.Rrtype = dns.TypeA
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: v4}}
	case dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: v6}}
	}
}

func write(w dns.ResponseWriter, m *dns.Msg) {
	if err := w.WriteMsg(m); err != nil {
		fmt.Fprintln(os.Stderr, "resolvstub: writing reply:", err)
	}
}
