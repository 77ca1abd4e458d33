package upstream

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// Upstream address forms (ParseServer):
//
//	IP[:port]                  plain DNS: UDP, TCP when the reply is truncated
//	dns://IP[:port]            the same, spelled as in a Corefile
//	tcp://IP[:port]            plain DNS over TCP only (force-tcp for this server)
//	tls://IP[:port][#name]     DNS over TLS (RFC 7858), port 853 by default; the
//	                           certificate is verified for name, or for the IP
//	                           address when no name is given
//	https://IP[:port][#name]   DNS over HTTPS (RFC 8484), port 443 by default,
//	                           POST (or GET) to /dns-query over HTTP/2; the
//	                           certificate is verified as for tls://
//	NAME[:port], tls://NAME... a name: in the cluster zone (a Service), resolved
//	                           from the cluster index and re-resolved as it
//	                           changes; elsewhere, resolved through the node's
//	                           resolvers and re-resolved periodically (hostnames.go)
//
// IPv6 addresses with a port are written in brackets: [fd00::53]:5353.
const (
	schemeDNS   = "dns"
	schemeTCP   = "tcp"
	schemeTLS   = "tls"
	schemeHTTPS = "https"
)

// Spec is one parsed upstream address.
type Spec struct {
	// Scheme is "dns" (UDP first, the group's default), "tcp", "tls" or
	// "https".
	Scheme string
	// Addr is the server's address; invalid when the server is given by
	// Name.
	Addr netip.AddrPort
	// Name is the server's name (lower-case FQDN) when it was given by
	// name; Port is then its port.
	Name string
	Port uint16
	// ServerName is what a TLS or HTTPS server's certificate is verified
	// for (set only for tls and https; "" means the IP address itself).
	ServerName string
}

// ParseServer parses one upstream address (see the forms above).
func ParseServer(s string) (Spec, error) {
	raw := s
	s = strings.TrimSpace(s)
	sp := Spec{Scheme: schemeDNS}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case schemeDNS, schemeTCP, schemeTLS, schemeHTTPS:
			sp.Scheme = strings.ToLower(scheme)
		default:
			return Spec{}, fmt.Errorf("upstream %q: scheme %q: want dns://, tcp://, tls:// or https://", raw, scheme)
		}
		s = rest
		if sp.Scheme == schemeHTTPS {
			// RFC 8484's path is fixed here, as in CoreDNS: /dns-query.
			host, _, _ := strings.Cut(s, "#")
			if strings.Contains(host, "/") {
				return Spec{}, fmt.Errorf("upstream %q: a path is not allowed (queries go to /dns-query)", raw)
			}
		}
	}
	if host, name, ok := strings.Cut(s, "#"); ok {
		if !sp.secure() {
			return Spec{}, fmt.Errorf("upstream %q: #server-name is only for tls:// and https:// upstreams", raw)
		}
		name = strings.TrimSuffix(strings.TrimSpace(name), ".")
		if _, ok := dns.IsDomainName(name); !ok || name == "" || strings.ContainsAny(name, " /\\") {
			return Spec{}, fmt.Errorf("upstream %q: server name %q is not a domain name", raw, name)
		}
		sp.ServerName = strings.ToLower(name)
		s = host
	}
	port := uint16(53)
	switch sp.Scheme {
	case schemeTLS:
		port = 853
	case schemeHTTPS:
		port = 443
	}
	if s == "" {
		return Spec{}, fmt.Errorf("upstream %q: no address", raw)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Addr().Zone() != "" {
			return Spec{}, fmt.Errorf("upstream %q: addresses with a zone are not supported", raw)
		}
		if ap.Port() == 0 {
			return Spec{}, fmt.Errorf("upstream %q: port 0", raw)
		}
		sp.Addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		return sp, nil
	}
	h := s
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return Spec{}, fmt.Errorf("upstream %q: addresses with a zone are not supported", raw)
		}
		sp.Addr = netip.AddrPortFrom(a.Unmap(), port)
		return sp, nil
	}
	// A name, with an optional port.
	name := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || p == 0 {
			return Spec{}, fmt.Errorf("upstream %q: port %q: want 1-65535", raw, s[i+1:])
		}
		name, port = s[:i], uint16(p)
	}
	if strings.ContainsAny(name, ":[]/ ") {
		return Spec{}, fmt.Errorf("upstream %q: want an IP address or a name, with an optional :port", raw)
	}
	fq := dnsname.Canonical(name)
	if _, ok := dns.IsDomainName(fq); !ok || fq == "." || strings.HasPrefix(fq, ".") || strings.Contains(fq, "..") {
		return Spec{}, fmt.Errorf("upstream %q: want an IP address or a name, with an optional :port", raw)
	}
	sp.Name, sp.Port = fq, port
	if sp.secure() && sp.ServerName == "" {
		// A server's certificate names the server: verify for the name
		// it was given by.
		sp.ServerName = strings.TrimSuffix(fq, ".")
	}
	return sp, nil
}

// secure reports whether the server is asked over TLS (DoT or DoH).
func (s Spec) secure() bool { return s.Scheme == schemeTLS || s.Scheme == schemeHTTPS }

// ByName reports whether the server is given by a name to resolve.
func (s Spec) ByName() bool { return s.Name != "" }

// At returns the spec for one resolved address of a server given by name.
func (s Spec) At(a netip.Addr) Spec {
	out := s
	out.Name, out.Port = "", 0
	out.Addr = netip.AddrPortFrom(a.Unmap(), s.Port)
	return out
}

// String is the canonical form: "ip:port" for plain DNS, with the scheme
// otherwise ("tcp://ip:port", "tls://ip:port#name",
// "https://ip:port#name"). Servers of one
// forwarder with the same canonical form are one server.
func (s Spec) String() string {
	var b strings.Builder
	if s.Scheme != schemeDNS {
		b.WriteString(s.Scheme)
		b.WriteString("://")
	}
	if s.ByName() {
		b.WriteString(strings.TrimSuffix(s.Name, "."))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(int(s.Port)))
	} else {
		b.WriteString(s.Addr.String())
	}
	if s.secure() && s.ServerName != "" && !(s.ByName() && s.ServerName == strings.TrimSuffix(s.Name, ".")) {
		b.WriteByte('#')
		b.WriteString(s.ServerName)
	}
	return b.String()
}

// dialAddr is the address connections go to.
func (s Spec) dialAddr() string { return s.Addr.String() }
