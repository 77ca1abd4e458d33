package migrate

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// file maps `file DBFILE [ZONES...] { reload DURATION; fallthrough
// [ZONES...]; upstream }` onto an entry of the zone-files key. The zones
// default to the server block's, as CoreDNS's; the path is carried as
// written (a mounted ConfigMap's path stays that path: mount it in the
// agent's pod at the same place).
func (m *migrator) file(b *block, d *Directive) {
	args := d.ArgTexts()
	if len(args) == 0 {
		m.drop(d.Line, "%s: no zone file; not carried", d.String())
		return
	}
	zf := config.ZoneFileConfig{File: args[0]}
	zones := args[1:]
	if len(zones) == 0 {
		zones = b.zones
	}
	for _, z := range zones {
		zf.Zones = append(zf.Zones, trimDot(dnsname.Canonical(z)))
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "reload":
			dur, err := time.ParseDuration(firstArg(oa))
			if err != nil || dur < 0 {
				m.drop(o.Line, "file %s: not a duration", o.String())
				continue
			}
			reload := config.Duration(dur)
			zf.Reload = &reload
		case "fallthrough":
			zf.Fallthrough = config.ZoneList{Set: true, Zones: []string{}}
			for _, z := range oa {
				zf.Fallthrough.Zones = append(zf.Fallthrough.Zones, trimDot(dnsname.Canonical(z)))
			}
		case "upstream":
			// Obsolete in CoreDNS: out-of-zone CNAME targets are always
			// looked up through the server, as in nodedns.
		default:
			m.drop(o.Line, "file option %s: not known to nodedns", o.String())
		}
	}
	comments := []string{fmt.Sprintf("line %d: %s (the file is read in the agent's pod: mount it there, e.g. the same ConfigMap at the same path)", d.Line, d.String())}
	if !filepath.IsAbs(zf.File) {
		comments = append(comments, fmt.Sprintf("%s is relative: nodedns reads it from its working directory (CoreDNS from its root directory)", zf.File))
	}
	if !m.isSet(&m.cfg.ZoneFiles) {
		set(m, &m.cfg.ZoneFiles, []config.ZoneFileConfig{zf}, d.Line, comments...)
		return
	}
	m.cfg.ZoneFiles = append(m.cfg.ZoneFiles, zf)
	for _, c := range comments {
		m.comment(&m.cfg.ZoneFiles, c)
	}
}

// nsid maps `nsid [DATA...]`: the words joined by spaces, as CoreDNS's.
// Without data CoreDNS answers the host's name; nodedns answers the node's
// name, the same on the host network.
func (m *migrator) nsid(d *Directive) {
	m.noBlock(d)
	set(m, &m.cfg.NSID, true, d.Line)
	if args := d.ArgTexts(); len(args) > 0 {
		set(m, &m.cfg.NSIDData, strings.Join(args, " "), d.Line)
	} else {
		m.comment(&m.cfg.NSID, "the NSID is the node's name (NODE_NAME), where CoreDNS's is the host's name: the same on the host network")
	}
}

// nsidZones sets nsid-zones and nsid-except from the server blocks with
// and without nsid (after every block is read): CoreDNS answers a query
// from the block of the most specific zone holding its name, so the
// NSID goes on a name's answers when that block has nsid.
func (m *migrator) nsidZones(blocks []*block) {
	o := m.origins[m.key(&m.cfg.NSID)]
	if o == nil {
		return
	}
	var on, off config.List
	for _, b := range blocks {
		has := hasDirective(b.sb, "nsid")
		for _, z := range b.zones {
			switch {
			case has && !slices.Contains(on, trimDot(z)):
				on = append(on, trimDot(z))
			case !has && !slices.Contains(off, trimDot(z)):
				off = append(off, trimDot(z))
			}
		}
	}
	if len(on) == 1 && on[0] == "." {
		on = nil // every name: the default
	}
	if len(on) > 0 {
		set(m, &m.cfg.NSIDZones, on, o.line)
	}
	if len(off) > 0 {
		set(m, &m.cfg.NSIDExcept, off, o.line, "the zones of the server blocks without nsid")
	}
}
