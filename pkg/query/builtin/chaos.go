package builtin

import (
	"math/rand/v2"
	"os"
	"slices"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Chaos answers the server's identity in class CH, as CoreDNS's chaos
// plugin (1.15): TXT version.bind. and version.server. (the version),
// authors.bind. (one record per author, in a random order each time),
// hostname.bind. and id.server. (the host's name), TTL 0, not
// authoritative. Other CH questions are not its own.
type Chaos struct {
	version  string
	authors  []string
	hostname string
}

// NewChaos returns the identity answers: version, and the authors (each
// once, sorted: CoreDNS deduplicates and sorts them). The host name is
// read now.
func NewChaos(version string, authors []string) *Chaos {
	a := make([]string, 0, len(authors))
	for _, s := range authors {
		a = append(a, trim(s))
	}
	slices.Sort(a)
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return &Chaos{version: trim(version), authors: slices.Compact(a), hostname: trim(host)}
}

// trim cuts s to a TXT string's 255 bytes.
func trim(s string) string {
	if len(s) < 256 {
		return s
	}
	return s[:255]
}

// Lookup implements stage.Builtin.
func (c *Chaos) Lookup(name string, qtype, qclass uint16) (stage.Result, bool) {
	if qclass != dns.ClassCHAOS || qtype != dns.TypeTXT {
		return stage.Result{}, false
	}
	txt := func(s string) dns.RR {
		return &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassCHAOS}, Txt: []string{s}}
	}
	m := new(dns.Msg)
	switch name {
	case "authors.bind.":
		for _, i := range rand.Perm(len(c.authors)) {
			m.Answer = append(m.Answer, txt(c.authors[i]))
		}
	case "version.bind.", "version.server.":
		m.Answer = []dns.RR{txt(c.version)}
	case "hostname.bind.", "id.server.":
		m.Answer = []dns.RR{txt(c.hostname)}
	default:
		return stage.Result{}, false
	}
	return stage.Result{Msg: m, Source: stage.SourceLocal}, true
}
