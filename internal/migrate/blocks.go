package migrate

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// addr is one server block key.
type addr struct {
	scheme string
	zones  []string // lower-case FQDNs ("." the root)
	port   int
}

// parseKey reads [scheme://]zone[:port]; zone may be a CIDR (its reverse
// zones).
func parseKey(k string) (addr, error) {
	a := addr{scheme: "dns"}
	if s, rest, ok := strings.Cut(k, "://"); ok {
		a.scheme = strings.ToLower(s)
		k = rest
	}
	defPort := map[string]int{"dns": 53, "tls": 853, "https": 443, "https3": 443, "quic": 853, "grpc": 443}
	p, known := defPort[a.scheme]
	if !known {
		return a, fmt.Errorf("unknown scheme %q", a.scheme)
	}
	a.port = p
	zone := k
	if i := strings.LastIndexByte(k, ':'); i >= 0 && !strings.Contains(k[:i], ":") {
		n, err := strconv.Atoi(k[i+1:])
		if err != nil || n < 1 || n > 65535 {
			return a, fmt.Errorf("port %q", k[i+1:])
		}
		a.port, zone = n, k[:i]
	}
	if zone == "" {
		zone = "."
	}
	if pfx, err := netip.ParsePrefix(zone); err == nil {
		a.zones = dnsname.ReverseZones(pfx)
		return a, nil
	}
	z := dnsname.Canonical(zone)
	if _, ok := dns.IsDomainName(z); !ok || strings.ContainsFunc(z, isControl) {
		return a, fmt.Errorf("zone %q", zone)
	}
	a.zones = []string{z}
	return a, nil
}

// block is a server block with its keys read.
type block struct {
	sb    *ServerBlock
	zones []string
	port  int
	root  bool
	kube  bool
}

func (m *migrator) run(f *File) error {
	var blocks []*block
	for _, sb := range f.Blocks {
		b := &block{sb: sb}
		ok := true
		for _, k := range sb.Keys {
			a, err := parseKey(k.Text)
			if err != nil {
				m.drop(k.Line, "server block key %q: %v; the block is not carried", k.Text, err)
				ok = false
				break
			}
			if a.scheme != "dns" {
				m.drop(k.Line, "server block %q serves DNS over %s: nodedns serves plain DNS on UDP and TCP only; its %d directives are not carried", k.Text, strings.ToUpper(a.scheme), len(sb.Directives))
				ok = false
				break
			}
			if b.port != 0 && a.port != b.port {
				m.drop(k.Line, "server block key %q: port %d besides %d in one block; nodedns answers every zone on one port", k.Text, a.port, b.port)
			}
			if b.port == 0 {
				b.port = a.port
			}
			for _, z := range a.zones {
				if z == "." {
					b.root = true
				}
				b.zones = append(b.zones, z)
			}
		}
		if !ok {
			continue
		}
		for _, d := range sb.Directives {
			if d.Name == "kubernetes" {
				b.kube = true
			}
		}
		blocks = append(blocks, b)
	}
	if err := m.findClusterZones(blocks); err != nil {
		return err
	}
	// Blocks with a view are carried apart (view.go); the others as
	// ever, among themselves.
	inOrder := slices.Clone(blocks)
	plain := slices.DeleteFunc(slices.Clone(blocks), hasView)
	m.otherBlocks = countOtherBlocks(plain)
	// The root block first: where one value serves every zone, the root
	// block's is the one that applies to most names.
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].root && !blocks[j].root })
	sort.SliceStable(plain, func(i, j int) bool { return plain[i].root && !plain[j].root })
	for _, b := range blocks {
		if m.port == 0 {
			m.port, m.portLine = b.port, b.sb.Line
		} else if b.port != m.port {
			m.drop(b.sb.Line, "server block %s listens on port %d, and line %d on %d: nodedns answers every zone on the same addresses (port %d kept)", keysText(b.sb), b.port, m.portLine, m.port, m.port)
		}
		if hasView(b) {
			m.viewBlock(b, inOrder[:slices.Index(inOrder, b)])
			continue
		}
		m.block(b)
		m.blockForwards(b, plain)
	}
	m.finish(plain)
	m.nsidZones(plain)
	m.dns64Except(plain)
	m.viewsDepart()
	return nil
}

func keysText(sb *ServerBlock) string {
	var ks []string
	for _, k := range sb.Keys {
		ks = append(ks, k.Text)
	}
	return strings.Join(ks, " ")
}

// findClusterZones: the kubernetes directive's zones, else the cluster
// domain given (Options.ClusterDomain), which a block forwarding to the
// cluster DNS (node-cache) is recognized by. Without a kubernetes
// directive and a given domain it fails: the Corefile does not say which
// zone is the cluster's. A given domain that the kubernetes directive
// answers becomes the primary one (pods' search path is built on it); one
// it does not answer is a note, and the Corefile's zones are kept.
func (m *migrator) findClusterZones(blocks []*block) error {
	given := ""
	if m.opts.ClusterDomain != "" {
		given = dnsname.Canonical(m.opts.ClusterDomain)
	}
	for _, b := range blocks {
		for _, d := range b.sb.Directives {
			if d.Name != "kubernetes" || reverseKube(b, d) {
				continue
			}
			var zs []string
			args := d.ArgTexts()
			if len(args) == 0 {
				args = b.zones
			}
			mc := multiclusterZones(d)
			for _, a := range args {
				z, err := parseKey(a)
				if err != nil {
					continue
				}
				for _, zz := range z.zones {
					switch {
					case zz == "." || dnsname.IsReverse(zz):
					case slices.Contains(mc, zz):
						// Answered from ServiceImports, not Services:
						// not a cluster domain.
						m.mcZones = append(m.mcZones, zz)
					default:
						zs = append(zs, zz)
					}
				}
			}
			switch i := slices.Index(zs, given); {
			case given == "":
			case i < 0:
				m.drop(d.Line, "%s: the cluster domain %s (%s) is not among its zones; the Corefile's zones are kept, but pods' search path is built on kubelet's clusterDomain: check which is right", d.String(), trimDot(given), m.opts.ClusterDomainFrom)
			case i > 0:
				zs = append([]string{given}, slices.Delete(zs, i, i+1)...)
			}
			m.clusterZones = zs
			return nil
		}
	}
	if given == "" {
		return ErrNoClusterDomain
	}
	m.clusterZones = []string{given}
	return nil
}

// multiclusterZones are the zones of the multicluster options of a
// kubernetes directive (lower-case FQDNs). Without zones the option names
// none: CoreDNS takes its zones from its arguments only.
func multiclusterZones(d *Directive) []string {
	var out []string
	for _, o := range d.Block {
		if o.Name != "multicluster" {
			continue
		}
		for _, a := range o.ArgTexts() {
			out = append(out, dnsname.Canonical(a))
		}
	}
	return out
}

// reverseKube: a kubernetes directive for reverse zones only.
func reverseKube(b *block, d *Directive) bool {
	zones := b.zones
	if len(d.Args) > 0 {
		zones = nil
		for _, a := range d.ArgTexts() {
			k, err := parseKey(a)
			if err != nil {
				return false
			}
			zones = append(zones, k.zones...)
		}
	}
	return allReverse(zones)
}

func (m *migrator) isClusterZone(z string) bool {
	for _, c := range m.clusterZones {
		if z == c {
			return true
		}
	}
	return false
}

// block maps one server block.
func (m *migrator) block(b *block) {
	// A block for the cluster zone without the kubernetes plugin that
	// forwards is NodeLocal DNSCache's: the zone is asked of the cluster
	// DNS.
	clusterFwd := false
	if !b.kube && !b.root {
		all := true
		any := false
		for _, z := range b.zones {
			switch {
			case m.isClusterZone(z):
				any = true
			case dnsname.IsReverse(z):
			default:
				all = false
			}
		}
		clusterFwd = any && all && hasDirective(b.sb, "forward")
	}
	reverseOnly := !b.root && !b.kube && allReverse(b.zones) && hasDirective(b.sb, "forward")
	for _, d := range b.sb.Directives {
		m.directive(b, d, clusterFwd, reverseOnly)
	}
}

func hasDirective(sb *ServerBlock, name string) bool {
	for _, d := range sb.Directives {
		if d.Name == name {
			return true
		}
	}
	return false
}

func allReverse(zs []string) bool {
	for _, z := range zs {
		if !dnsname.IsReverse(z) {
			return false
		}
	}
	return len(zs) > 0
}

// isControl: an ASCII control byte, which dns.IsDomainName lets through
// but nodedns's YAML config cannot hold (and no zone a cluster serves is
// spelled with).
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
