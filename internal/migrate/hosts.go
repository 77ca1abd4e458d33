package migrate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// hosts maps the hosts directive onto the hosts key: nodedns has one table
// of static records for every zone.
func (m *migrator) hosts(b *block, d *Directive) {
	if o := m.origins[m.key(&m.cfg.Hosts)]; o != nil {
		m.drop(d.Line, "second hosts directive: not carried; nodedns has one hosts table (line %d)", o.line)
		return
	}
	h := &config.HostsConfig{File: "/etc/hosts"}
	args := d.ArgTexts()
	if len(args) > 0 {
		h.File = args[0]
		for _, z := range args[1:] {
			h.Zones = append(h.Zones, trimDot(dnsname.Canonical(z)))
		}
	}
	if len(h.Zones) == 0 && !b.root {
		for _, z := range b.zones {
			h.Zones = append(h.Zones, trimDot(z))
		}
	}
	if slices.Contains(h.Zones, ".") {
		h.Zones = nil
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		if _, err := netip.ParseAddr(o.Name); err == nil {
			h.Entries = append(h.Entries, strings.Join(append([]string{o.Name}, oa...), " "))
			continue
		}
		switch o.Name {
		case "ttl":
			if n, ok := seconds(firstArg(oa)); ok && n > 0 {
				h.TTL = secs(n)
			} else {
				m.drop(o.Line, "hosts %s: want a positive number of seconds", o.String())
			}
		case "no_reverse":
			h.NoReverse = true
		case "reload":
			if dur, err := time.ParseDuration(firstArg(oa)); err == nil && dur >= 0 {
				reload := config.Duration(dur)
				h.Reload = &reload
			} else {
				m.drop(o.Line, "hosts %s: not a duration", o.String())
			}
		case "fallthrough":
			h.Fallthrough = config.ZoneList{Set: true, Zones: []string{}}
			for _, z := range oa {
				h.Fallthrough.Zones = append(h.Fallthrough.Zones, trimDot(dnsname.Canonical(z)))
			}
		default:
			m.drop(o.Line, "hosts option %s: not known to nodedns", o.String())
		}
	}
	set(m, &m.cfg.Hosts, h, d.Line, fmt.Sprintf("line %d: %s (the file is read in the agent's pod: mount it there)", d.Line, d.String()))
}

func (m *migrator) rewrite(b *block, d *Directive) {
	args := d.ArgTexts()
	mode := ""
	if len(args) > 0 && (args[0] == "stop" || args[0] == "continue") {
		mode, args = args[0], args[1:]
	}
	if len(args) == 0 && d.HasBlock {
		// The old block form: rewrite [stop|continue] { name ...; answer ... }.
		for _, o := range d.Block {
			switch o.Name {
			case "name":
				m.nameRule(b, d, o.Line, mode, o.ArgTexts())
			case "answer":
				// nodedns maps answers back itself.
			default:
				m.drop(o.Line, "rewrite %s: not carried; nodedns rewrites query names only", o.String())
			}
		}
		return
	}
	if len(args) == 0 {
		m.drop(d.Line, "%s: nothing to rewrite", d.String())
		return
	}
	if args[0] != "name" {
		m.drop(d.Line, "%s: not carried; nodedns rewrites query names only (this rewrites the %s)", d.String(), args[0])
		return
	}
	m.nameRule(b, d, d.Line, mode, args[1:])
}

func (m *migrator) nameRule(b *block, d *Directive, line int, mode string, args []string) {
	typ := "exact"
	if len(args) > 0 && slices.Contains([]string{"exact", "prefix", "suffix", "substring", "regex"}, args[0]) {
		typ, args = args[0], args[1:]
	}
	if len(args) < 2 {
		m.drop(line, "%s: wants FROM and TO", d.String())
		return
	}
	from, to, opts := args[0], args[1], args[2:]
	for i := 0; i < len(opts); i++ {
		switch opts[i] {
		case "metadata":
			m.drop(line, "%s: request metadata in TO is not carried; the rule is dropped", d.String())
			return
		case "answer":
			if i+1 < len(opts) && opts[i+1] == "auto" {
				i++
				continue
			}
			// answer name/value FROM TO: nodedns maps every rewritten name
			// back (answer auto).
			i += 3
		}
	}
	if !b.root && !ruleInZones(typ, from, b.zones) {
		m.drop(line, "%s: a %s rule in the block for %s would apply to every zone in nodedns; not carried", d.String(), typ, strings.Join(trimAll(b.zones), " "))
		return
	}
	r := config.RewriteRule{Type: typ, From: from, To: to, Mode: mode}
	if !m.isSet(&m.cfg.Rewrite) {
		set(m, &m.cfg.Rewrite, []config.RewriteRule{r}, line)
		return
	}
	m.cfg.Rewrite = append(m.cfg.Rewrite, r)
}

func trimAll(zs []string) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = trimDot(z)
	}
	return out
}

// ruleInZones: a rule from a zone's block keeps its meaning globally only
// when it can match nothing outside the zone.
func ruleInZones(typ, from string, zones []string) bool {
	var name string
	switch typ {
	case "exact":
		name = dnsname.Canonical(from)
	case "suffix":
		name = dnsname.Canonical(strings.TrimPrefix(from, "."))
	default:
		return false
	}
	return dnsname.InZones(name, zones)
}
