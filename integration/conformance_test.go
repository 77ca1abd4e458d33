//go:build integration

package integration

// Protocol conformance through the binary, for the clients that are not
// glibc or musl (the unit tests reach the pipeline, not the binary): the
// table of
// internal/conformance (RFC 8906 sections 3 and 8, RFC 1035, 6891, 6895,
// 6840) sent over UDP and TCP to the nodedns agent and, side by side, to
// CoreDNS 1.15 set up the same way: (a) a name answered authoritatively
// from local data (hosts entries: the binary's authoritative path without a
// cluster; pkg/query/pipeline's TestConformance covers the cluster zone), and (b)
// an external name through cache and forward, asked twice (miss, hit).
// nodedns must pass every case; CoreDNS's departures from the table are
// reported (logged and counted), not failed: it is the reference for
// answers, not for the RFCs.

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/conformance"
	"github.com/nodedns/nodedns/internal/dnstest"
)

// confUpstream is dnstest.BigAZone: authoritative, as a stub domain's
// server may be, plus big*: 40 A records, between 512 and 1232 octets.
func confUpstream(t *testing.T) *dnstest.Server {
	return dnstest.Start(t, dnstest.BigAZone(300))
}

// confExchange sends pkt and returns the reply, nil when none came.
func confExchange(addr, proto string, pkt []byte) []byte {
	c, err := net.DialTimeout(proto, addr, 2*time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if proto == "udp" {
		if _, err := c.Write(pkt); err != nil {
			return nil
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		return buf[:n]
	}
	if _, err := c.Write(append([]byte{byte(len(pkt) >> 8), byte(len(pkt))}, pkt...)); err != nil {
		return nil
	}
	var l [2]byte
	if _, err := readFull(c, l[:]); err != nil {
		return nil
	}
	buf := make([]byte, int(l[0])<<8|int(l[1]))
	if _, err := readFull(c, buf); err != nil {
		return nil
	}
	return buf
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestConformance(t *testing.T) {
	coredns := coreDNSBin(t)
	up := confUpstream(t)
	var hosts []string
	hosts = append(hosts, "192.0.2.50 static.corp.example")
	for i := 0; i < 40; i++ {
		hosts = append(hosts, fmt.Sprintf("198.51.100.%d many.corp.example", i))
	}
	cdns := startCoreDNSPlugins(t, coredns, "  cache\n  hosts {\n    "+strings.Join(hosts, "\n    ")+"\n    fallthrough\n  }", up.Addr)
	ndns, _ := startDropinAgent(t, fmt.Sprintf("upstream: [%s]\nhosts:\n  entries: [%s]\n  fallthrough: []\n", up.Addr, strings.Join(hosts, ", ")))

	type target struct {
		name          string
		authoritative bool
		question      func(c conformance.Case, i int, proto, server string) (string, uint16)
	}
	targets := []target{
		{"authoritative", true, func(c conformance.Case, i int, proto, server string) (string, uint16) {
			qt := c.Qtype
			if qt == 0 {
				qt = dns.TypeA
			}
			if c.Big {
				return "Many.Corp.Example.", dns.TypeA
			}
			return "Static.Corp.Example.", qt
		}},
		// A fresh name per case, protocol and server: the first query is
		// a miss (upstream), the second a hit (cache).
		{"external", false, func(c conformance.Case, i int, proto, server string) (string, uint16) {
			qt := c.Qtype
			if qt == 0 {
				qt = dns.TypeA
			}
			if c.Big {
				return fmt.Sprintf("Big%d-%s-%s.Example.test.", i, proto, server), dns.TypeA
			}
			return fmt.Sprintf("C%d-%s-%s.Example.test.", i, proto, server), qt
		}},
	}
	cases, failed, diffs := 0, 0, 0
	for _, tgt := range targets {
		for i, c := range conformance.Cases() {
			for _, proto := range []string{"udp", "tcp"} {
				t.Run(tgt.name+"/"+proto+"/"+strings.ReplaceAll(c.Name, " ", "_"), func(t *testing.T) {
					for _, srv := range []struct{ name, addr string }{{"nodedns", ndns}, {"coredns", cdns}} {
						qname, qtype := tgt.question(c, i, proto, srv.name)
						passes := []string{"first"}
						if !tgt.authoritative {
							passes = []string{"miss", "hit"}
						}
						var problems []string
						for j, pass := range passes {
							pkt := conformance.Query(c, uint16(2000+i*4+j), qname, qtype)
							for _, p := range conformance.Check(c, tgt.authoritative, proto, pkt, confExchange(srv.addr, proto, pkt)) {
								problems = append(problems, pass+": "+p)
							}
						}
						if srv.name == "nodedns" {
							cases++
							if len(problems) > 0 {
								failed++
							}
							for _, p := range problems {
								t.Errorf("nodedns: %s", p)
							}
						} else if len(problems) > 0 {
							diffs++
							t.Logf("DIFF CoreDNS departs from the table: %s", strings.Join(problems, "; "))
						}
					}
				})
			}
		}
	}
	t.Logf("FIGURE conformance: nodedns passed %d of %d cases (UDP and TCP, authoritative and cache+upstream); CoreDNS 1.15 departed from the table in %d", cases-failed, cases, diffs)
}
