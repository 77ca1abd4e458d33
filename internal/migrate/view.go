package migrate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/view"
)

// Server blocks with `view NAME { expr EXPRESSION }`: CoreDNS serves a
// query from the first block of the most specific zone whose view holds.
// nodedns carries such a block as an entry of the views key when it
// forwards: its condition (pkg/query/view's forms), its zones and its
// forward (a cache of its own comes with it). Blocks that do anything
// else are not carried, whole.

// viewGlobal are the directives of a view block that configure the
// agent as a whole: carried as from any other block.
var viewGlobal = map[string]bool{"errors": true, "log": true, "health": true, "ready": true, "prometheus": true,
	"reload": true, "loop": true, "bind": true, "any": true, "cancel": true}

// hasView reports whether the block has a view directive.
func hasView(b *block) bool { return hasDirective(b.sb, "view") }

// viewBlock carries block b, which has a view; earlier are the blocks
// before it in the Corefile.
func (m *migrator) viewBlock(b *block, earlier []*block) {
	where := fmt.Sprintf("server block %s (line %d)", keysText(b.sb), b.sb.Line)
	notCarried := func(line int, format string, args ...any) {
		m.drop(line, "%s: %s; the block is not carried", where, fmt.Sprintf(format, args...))
	}
	// A block without a view of the same zones before it takes every
	// query first: CoreDNS never reaches this one.
	for _, e := range earlier {
		if !hasView(e) && e.port == b.port && slices.Equal(e.zones, b.zones) {
			notCarried(b.sb.Line, "the block of line %d, without a view, takes every query of %s first, so this view never applies", e.sb.Line, strings.Join(trimAll(b.zones), " "))
			return
		}
	}
	v := config.ViewConfig{Zones: blockZones(b)}
	var fwds []*Directive
	var comments []string
	for _, d := range b.sb.Directives {
		switch {
		case d.Name == "view":
			if v.Name != "" {
				notCarried(d.Line, "a second view (CoreDNS refuses it)")
				return
			}
			args := d.ArgTexts()
			if len(args) != 1 {
				notCarried(d.Line, "%s: want one name", d.String())
				return
			}
			v.Name = args[0]
			for _, o := range d.Block {
				if o.Name != "expr" || len(o.Args) == 0 {
					notCarried(o.Line, "view option %s: not known to nodedns", o.String())
					return
				}
				// As CoreDNS reads it: the arguments joined by spaces.
				expr := strings.Join(o.ArgTexts(), " ")
				if _, err := view.Parse(expr); err != nil {
					notCarried(o.Line, "view %s expr %s: %v (nodedns carries the simple forms: incidr(client_ip(), 'CIDR'), client_ip(), name(), type(), class() and proto() compared with == and !=, in a list, name() matches, && || !)", v.Name, expr, err)
					return
				}
				v.Expr = append(v.Expr, expr)
			}
		case d.Name == "forward":
			fwds = append(fwds, d)
		case d.Name == "cache":
			if len(d.Args) > 0 || len(d.Block) > 0 {
				comments = append(comments, fmt.Sprintf("line %d: %s: the view's cache has the agent's cache settings", d.Line, d.String()))
			}
		case d.Name == "kubernetes":
			// The cluster zone is answered from the agent's one index,
			// before any view.
		case d.Name == "dnstap":
			// One tap logs every query: the view's block's too.
			m.directive(b, d, false, false)
			if m.isSet(&m.cfg.Dnstap) {
				m.comment(&m.cfg.Dnstap, fmt.Sprintf("line %d: the dnstap of a view's block logs every query, not only the view's", d.Line))
			}
		case viewGlobal[d.Name]:
			m.directive(b, d, false, false)
		default:
			notCarried(d.Line, "%s in a view block: not carried (nodedns carries a view's forward, with its own cache, only)", d.Name)
			return
		}
	}
	if v.Name == "" || len(v.Expr) == 0 {
		notCarried(b.sb.Line, "a view without an expr")
		return
	}
	if len(fwds) != 1 {
		notCarried(b.sb.Line, "view %s: %d forward directives: nodedns carries a view that forwards, once", v.Name, len(fwds))
		return
	}
	d := fwds[0]
	before := len(m.dropped)
	f, ok := m.readForward(d)
	if !ok {
		notCarried(d.Line, "view %s: its forward is not carried", v.Name)
		return
	}
	switch {
	case f.srv.resolvConf:
		m.dropped = m.dropped[:before]
		notCarried(d.Line, "view %s: %s: a view's servers are named, not read from resolv.conf", v.Name, d.String())
		return
	case f.from != "." && !slices.Contains(b.zones, f.from):
		notCarried(d.Line, "view %s: %s: a forward of part of the block's zones", v.Name, d.String())
		return
	case f.o.hasChainOptions():
		notCarried(d.Line, "view %s: %s: next and except are not carried in a view", v.Name, d.String())
		return
	}
	m.hostNames = append(m.hostNames, f.hostNames...)
	v.Forward = m.groupOf(f)
	if !hasDirective(b.sb, "kubernetes") && len(m.clusterZones) > 0 && (b.root || slices.ContainsFunc(b.zones, m.isClusterZone)) {
		comments = append(comments, fmt.Sprintf("line %d: view %s: cluster names are answered from the cluster index for its clients too (CoreDNS would forward them: the view's block has no kubernetes)", b.sb.Line, v.Name))
	}
	for _, o := range m.cfg.Views {
		if o.Name == v.Name {
			v.Name = fmt.Sprintf("%s-line%d", v.Name, b.sb.Line)
		}
	}
	comments = append([]string{fmt.Sprintf("line %d: view %s", b.sb.Line, v.Name)}, comments...)
	if !m.isSet(&m.cfg.Views) {
		set(m, &m.cfg.Views, []config.ViewConfig{v}, b.sb.Line, comments...)
	} else {
		m.cfg.Views = append(m.cfg.Views, v)
		for _, c := range comments {
			m.comment(&m.cfg.Views, c)
		}
	}
}

// viewsDepart says in a comment what of the rest of the configuration
// also applies to the views' queries: one list of templates, static
// records, access rules and rewrites serves every query, where CoreDNS's
// view block has only its own plugins.
func (m *migrator) viewsDepart() {
	if !m.isSet(&m.cfg.Views) {
		return
	}
	var also []string
	for _, k := range []struct {
		field any
		name  string
	}{{&m.cfg.Templates, "templates"}, {&m.cfg.Hosts, "hosts"}, {&m.cfg.ACL, "acl"}, {&m.cfg.Rewrite, "rewrite"},
		{&m.cfg.Local, "local"}, {&m.cfg.Chaos, "chaos"}, {&m.cfg.Header, "header"}} {
		if m.isSet(k.field) {
			also = append(also, k.name)
		}
	}
	if len(also) > 0 {
		m.comment(&m.cfg.Views, fmt.Sprintf("%s of the other blocks apply to the views' queries too (before the view's forward); CoreDNS's view blocks have only their own plugins", strings.Join(also, ", ")))
	}
}
