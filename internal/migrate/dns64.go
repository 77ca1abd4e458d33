package migrate

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dns64"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// dns64 maps `dns64 [PREFIX] { prefix PREFIX; translate_all; allow_ipv4 }`
// onto the dns64 key. nodedns's dns64 applies to every name: one of a
// zone's block, when other blocks serve other names, is not carried.
func (m *migrator) dns64(b *block, d *Directive) {
	if !b.root && m.otherBlocks > 0 {
		m.drop(d.Line, "%s: of the block of %v only; nodedns's dns64 applies to every name; not carried", d.String(), b.zones)
		return
	}
	cfg := &config.DNS64Config{}
	args := d.ArgTexts()
	var comments []string
	block := d.Block
	switch len(args) {
	case 0:
	case 1:
		cfg.Prefix = args[0]
		if len(block) > 0 {
			// CoreDNS 1.15's setup reads the block only when the line
			// has no prefix: with one, its options have no effect.
			comments = append(comments, fmt.Sprintf("line %d: the options of the block are not set: CoreDNS 1.15 ignores them when the prefix is on the dns64 line", d.Line))
			block = nil
		}
	default:
		m.drop(d.Line, "%s: at most one prefix; not carried", d.String())
		return
	}
	for _, o := range block {
		oa := o.ArgTexts()
		switch o.Name {
		case "prefix":
			if len(oa) != 1 {
				m.drop(o.Line, "dns64 %s: want one prefix; dns64 not carried", o.String())
				return
			}
			cfg.Prefix = oa[0]
		case "translate_all":
			cfg.TranslateAll = true
		case "allow_ipv4":
			cfg.AllowIPv4 = true
		default:
			m.drop(o.Line, "dns64 option %s: not known to nodedns; dns64 not carried", o.String())
			return
		}
	}
	if cfg.Prefix == "64:ff9b::/96" {
		cfg.Prefix = "" // the default
	}
	probe := config.Config{DNS64Opts: cfg}
	if _, err := probe.DNS64(); err != nil {
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
		return
	}
	set(m, &m.cfg.DNS64Opts, cfg, d.Line, comments...)
}

// dns64Except sets the dns64 key's except zones (after every block is
// read): the zones of the server blocks without dns64, whose names
// CoreDNS answers from their own blocks, never translated by the root
// block's dns64.
func (m *migrator) dns64Except(blocks []*block) {
	if m.cfg.DNS64Opts == nil || !m.isSet(&m.cfg.DNS64Opts) {
		return
	}
	var off config.List
	for _, b := range blocks {
		if b.root || hasDirective(b.sb, "dns64") {
			continue
		}
		for _, z := range b.zones {
			if z := trimDot(z); z != "" && z != "." && !slices.Contains(off, z) {
				off = append(off, z)
			}
		}
	}
	if len(off) == 0 {
		return
	}
	if len(off) > dns64.MaxExcept {
		m.drop(m.origins[m.key(&m.cfg.DNS64Opts)].line, "dns64: %d other server blocks' zones, at most %d are kept apart; not carried", len(off), dns64.MaxExcept)
		m.unset(&m.cfg.DNS64Opts)
		return
	}
	m.cfg.DNS64Opts.Except = off
	m.comment(&m.cfg.DNS64Opts, "except: the zones of the server blocks without dns64 (CoreDNS answers those from their own blocks)")
}

// k8sExternal maps `k8s_external [ZONES...] { apex; ttl; headless;
// fallthrough [ZONES...] }` onto the k8s-external key; the zones default
// to the block's, as CoreDNS's.
func (m *migrator) k8sExternal(b *block, d *Directive) {
	cfg := &config.K8sExternalConfig{}
	args := d.ArgTexts()
	zones := args
	if len(zones) == 0 {
		zones = b.zones
	}
	for _, z := range zones {
		cfg.Zones = append(cfg.Zones, trimDot(dnsname.Canonical(z)))
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "apex":
			if len(oa) == 0 {
				m.drop(o.Line, "k8s_external %s: want a label; k8s_external not carried", o.String())
				return
			}
			cfg.Apex = oa[0]
		case "ttl":
			if len(oa) == 0 {
				m.drop(o.Line, "k8s_external %s: want seconds; k8s_external not carried", o.String())
				return
			}
			n, err := strconv.Atoi(oa[0])
			if err != nil {
				m.drop(o.Line, "k8s_external %s: %v; k8s_external not carried", o.String(), err)
				return
			}
			cfg.TTL = &n
		case "headless":
			cfg.Headless = true
		case "fallthrough":
			cfg.Fallthrough = config.ZoneList{Set: true, Zones: []string{}}
			for _, z := range oa {
				cfg.Fallthrough.Zones = append(cfg.Fallthrough.Zones, trimDot(dnsname.Canonical(z)))
			}
		default:
			m.drop(o.Line, "k8s_external option %s: not known to nodedns; k8s_external not carried", o.String())
			return
		}
	}
	probe := config.Config{K8sExternalOpts: cfg}
	if _, _, err := probe.K8sExternal(); err != nil {
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
		return
	}
	set(m, &m.cfg.K8sExternalOpts, cfg, d.Line, fmt.Sprintf("line %d: ns1.%s.<zone> (the apex's NS) has the cluster DNS Service's external IPs, as a CoreDNS in the cluster answers; a CoreDNS outside it gives its listen addresses (docs/plugins.md#departures)", d.Line, apexOf(cfg)))
}

func apexOf(c *config.K8sExternalConfig) string {
	if c.Apex == "" {
		return "dns"
	}
	return c.Apex
}
