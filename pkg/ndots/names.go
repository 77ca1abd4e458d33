package ndots

import (
	"strings"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// split reports whether name (lower-case FQDN) is `<base>.<ns>.svc.<zone>`,
// the first element of the search list kubelet gives a pod in namespace ns,
// and returns base. A name equal to `<ns>.svc.<zone>` itself has no base
// and is not a walk (CoreDNS answers SERVFAIL there; we answer it as asked).
func split(name, ns, zone string) (base string, ok bool) {
	// suffix is ".<ns>.svc.<zone>"; zone ends in a dot.
	n := len(ns) + len(".svc.") + len(zone)
	if ns == "" || len(name) <= n+1 || name[len(name)-n-1] != '.' {
		return "", false
	}
	s := name[len(name)-n:]
	if !strings.HasPrefix(s, ns) || !strings.HasPrefix(s[len(ns):], ".svc.") || s[len(ns)+len(".svc."):] != zone {
		return "", false
	}
	return name[:len(name)-n-1], true
}

// expansions returns the names the search list expands base to, in order:
// `<base>.<ns>.svc.<zone>`, `<base>.svc.<zone>`, `<base>.<zone>`, then
// `<base>.<d>` for each extra search domain d, and finally `<base>.`.
// zone and every d are lower-case FQDNs; an empty or root d is skipped.
func expansions(base, ns, zone string, search []string) []string {
	out := make([]string, 0, 4+len(search))
	out = append(out, base+"."+ns+".svc."+zone, base+".svc."+zone, base+"."+zone)
	for _, d := range search {
		if d == "" || d == "." {
			continue
		}
		out = append(out, base+"."+d)
	}
	return append(out, base+".")
}

// Search returns the search domains of a resolv.conf that come after the
// cluster's own (`<ns>.svc.<zone>`, `svc.<zone>`, `<zone>`), lower-case and
// fully qualified: the node's domains that pods inherit. It is the default
// for the extra steps of the walk. zone is the cluster domain, a
// lower-case FQDN.
func Search(resolvConfSearch []string, zone string) []string {
	var out []string
	for _, d := range resolvConfSearch {
		d = strings.ToLower(strings.TrimSpace(d))
		if d == "" || d == "." {
			// The root: the walk's last step, the name itself, already.
			continue
		}
		if !strings.HasSuffix(d, ".") {
			d += "."
		}
		if dnsname.InZone(d, zone) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// missed reports whether name, an NXDOMAIN a pod of namespace ns got for a
// query the walk did not take up, is a search-path expansion: a name under
// one of the pod's search domains, the cluster zone (the first three) or
// the node's (search). first is set, with the length of the suffix
// `.<ns>.svc.<zone>`, for the pod's first expansion `<base>.<ns>.svc.<zone>`
// (which the pod then walks itself: autopath is off, or the walk could
// not decide). zone is "" when there is no cluster zone.
func missed(name, ns, zone string, search []string) (expansion, first bool, cut int) {
	if zone != "" && name != zone && dnsname.InZone(name, zone) {
		if base, ok := split(name, ns, zone); ok {
			return true, true, len(name) - len(base)
		}
		return true, false, 0
	}
	for _, d := range search {
		if name != d && dnsname.InZone(name, d) {
			return true, false, 0
		}
	}
	return false, false, 0
}
