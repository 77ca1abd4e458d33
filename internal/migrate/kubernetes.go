package migrate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// kubernetes maps the kubernetes directive: the cluster zone and its
// options, answered from the API server.
func (m *migrator) kubernetes(b *block, d *Directive) {
	if reverseKube(b, d) && len(d.Block) == 0 {
		// A block of its own for the cluster's reverse zones: nodedns
		// answers PTR for every address the cluster knows anyway.
		return
	}
	if m.kubeLine != 0 {
		m.drop(d.Line, "second kubernetes directive: nodedns has one cluster index, configured from line %d", m.kubeLine)
		return
	}
	m.kubeLine = d.Line
	m.seen["kubernetes"] = true
	var doms config.List
	for _, z := range m.clusterZones {
		doms = append(doms, trimDot(z))
	}
	if len(doms) == 0 {
		m.drop(d.Line, "%s: no cluster zone in it (the root zone cannot be one); cluster-domain left at cluster.local", d.String())
		doms = config.List{"cluster.local"}
	}
	set(m, &m.cfg.ClusterDomain, doms, d.Line, fmt.Sprintf("line %d: %s (nodedns answers PTR queries for every address the cluster knows)", d.Line, d.String()))
	pods, fall := false, false
	for _, o := range d.Block {
		args := o.ArgTexts()
		switch o.Name {
		case "endpoint_pod_names":
			set(m, &m.cfg.EndpointPodNames, true, o.Line)
		case "pods":
			pods = true
			if len(args) == 1 && slices.Contains([]string{"disabled", "insecure", "verified"}, args[0]) {
				set(m, &m.cfg.Pods, args[0], o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: want disabled, insecure or verified", o.String())
			}
		case "namespaces":
			set(m, &m.cfg.Namespaces, config.List(args), o.Line)
		case "namespace_labels":
			set(m, &m.cfg.NamespaceLabels, strings.Join(args, " "), o.Line)
		case "labels":
			m.drop(o.Line, "kubernetes %s: not carried; only Services matching the selector would have been answered", o.String())
		case "endpoint":
			m.drop(o.Line, "kubernetes %s: not carried; nodedns reaches the API server through its kubeconfig or the in-cluster configuration", o.String())
		case "tls":
			m.drop(o.Line, "kubernetes %s: not carried; client certificates for the API server come from the kubeconfig", o.String())
		case "kubeconfig":
			if len(args) < 1 || len(args) > 2 {
				m.drop(o.Line, "kubernetes %s: want FILE [CONTEXT]", o.String())
				break
			}
			set(m, &m.cfg.Kubeconfig, args[0], o.Line)
			if len(args) == 2 {
				set(m, &m.cfg.KubeconfigContext, args[1], o.Line)
			}
		case "fallthrough":
			fall = true
			zones := make(config.List, 0, len(args))
			for _, a := range args {
				zones = append(zones, trimDot(dnsname.Canonical(a)))
			}
			if len(zones) == 0 {
				zones = config.List{"."}
			}
			set(m, &m.cfg.Fallthrough, zones, o.Line)
		case "ttl":
			if n, ok := seconds(firstArg(args)); ok && n <= 3600 {
				set(m, &m.cfg.ClusterTTL, secs(n), o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: want 0 to 3600 seconds", o.String())
			}
		case "noendpoints":
			set(m, &m.cfg.NoEndpoints, true, o.Line)
		case "ignore":
			if len(args) == 1 && args[0] == "empty_service" {
				set(m, &m.cfg.IgnoreEmptyService, true, o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: not known to nodedns", o.String())
			}
		case "startup_timeout":
			if dur, err := time.ParseDuration(firstArg(args)); err == nil && dur >= 0 {
				set(m, &m.cfg.ClusterSyncWait, config.Duration(dur), o.Line)
			} else {
				m.drop(o.Line, "kubernetes %s: not a duration", o.String())
			}
		case "zonal":
			m.drop(o.Line, "kubernetes %s: not carried; it would have preferred endpoints of the client's zone", o.String())
		case "multicluster":
			var carried config.List
			for _, a := range args {
				z := dnsname.Canonical(a)
				if slices.Contains(m.mcZones, z) {
					carried = append(carried, trimDot(z))
				} else {
					m.drop(o.Line, "kubernetes multicluster %s: not a zone of the kubernetes directive, which CoreDNS refuses (it would not start)", a)
				}
			}
			if len(carried) > 0 {
				set(m, &m.cfg.MulticlusterDomain, carried, o.Line, fmt.Sprintf("line %d: %s (answered from ServiceImports; the agent's ServiceAccount needs list and watch on serviceimports.multicluster.x-k8s.io)", o.Line, o.String()))
			}
		case "apiserver_qps", "apiserver_burst", "apiserver_max_inflight":
			m.drop(o.Line, "kubernetes %s: not carried; nodedns lists once from the API server's watch cache and then watches", o.String())
		default:
			m.drop(o.Line, "kubernetes option %s: not known to nodedns", o.String())
		}
	}
	if !pods {
		set(m, &m.cfg.Pods, "disabled", d.Line, "the kubernetes directive has no pods option: CoreDNS then answers no pod names (nodedns's default is insecure)")
	}
	if !fall {
		set(m, &m.cfg.Fallthrough, config.List{}, d.Line, "the kubernetes directive has no fallthrough: a name the cluster does not know is NXDOMAIN, in the reverse zones too (nodedns's default falls through in-addr.arpa and ip6.arpa)")
	}
}
