package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/pkg/config"
)

// Manifest is what migrate reads of a NodeLocal DNSCache manifest
// (nodelocaldns.yaml, or its variant for Cilium's Local Redirect Policy):
// the Corefile of its ConfigMap, and of its DaemonSet the pod's network
// and the node-cache container's flags that decide where it runs.
type Manifest struct {
	// Corefile is the ConfigMap's data.Corefile (nil: no ConfigMap with
	// one); CorefileFrom names the ConfigMap.
	Corefile     []byte
	CorefileFrom string
	// DaemonSet names the DaemonSet read ("": none).
	DaemonSet string
	// HostNetwork is the pod template's hostNetwork.
	HostNetwork bool
	// LocalIPs are node-cache's -localip addresses, as written (pillars
	// included).
	LocalIPs []string
	// SetupInterface, SetupIptables and SkipTeardown are node-cache's
	// flags of those names (node-cache's defaults: true, true, false).
	SetupInterface, SetupIptables, SkipTeardown bool
}

// maxManifestDocs bounds the documents read: nodelocaldns.yaml has five.
const maxManifestDocs = 64

// ReadManifest reads a multi-document manifest. Documents other than a
// ConfigMap with a Corefile and a DaemonSet (or a List of them, as
// `kubectl get -o yaml` writes) are skipped; two of either is an error
// (which one is meant would be a guess).
func ReadManifest(b []byte) (*Manifest, error) {
	m := &Manifest{SetupInterface: true, SetupIptables: true}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var docs []map[string]any
	for i := 0; ; i++ {
		if i == maxManifestDocs {
			return nil, fmt.Errorf("more than %d documents", maxManifestDocs)
		}
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if doc["kind"] == "List" {
			items, _ := doc["items"].([]any)
			for _, it := range items {
				if d, ok := it.(map[string]any); ok {
					docs = append(docs, d)
				}
			}
			continue
		}
		docs = append(docs, doc)
	}
	for _, doc := range docs {
		raw, err := yaml.Marshal(doc)
		if err != nil {
			return nil, err
		}
		switch doc["kind"] {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal(raw, &cm); err != nil {
				return nil, fmt.Errorf("ConfigMap: %w", err)
			}
			cf, ok := cm.Data["Corefile"]
			if !ok {
				continue
			}
			if m.Corefile != nil {
				return nil, fmt.Errorf("two ConfigMaps with a Corefile (%s and %s): give the one node-cache reads with --corefile", m.CorefileFrom, cm.Name)
			}
			m.Corefile, m.CorefileFrom = []byte(cf), "ConfigMap "+cm.Name
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal(raw, &ds); err != nil {
				return nil, fmt.Errorf("DaemonSet: %w", err)
			}
			if m.DaemonSet != "" {
				return nil, fmt.Errorf("two DaemonSets (%s and %s)", m.DaemonSet, ds.Name)
			}
			m.DaemonSet = ds.Name
			m.HostNetwork = ds.Spec.Template.Spec.HostNetwork
			for _, c := range ds.Spec.Template.Spec.Containers {
				if err := m.readArgs(append(append([]string{}, c.Command...), c.Args...)); err != nil {
					return nil, fmt.Errorf("DaemonSet %s, container %s: %w", ds.Name, c.Name, err)
				}
			}
		}
	}
	if m.Corefile == nil && m.DaemonSet == "" {
		return nil, errors.New("neither a ConfigMap with a Corefile nor a DaemonSet: not a NodeLocal DNSCache manifest")
	}
	return m, nil
}

// readArgs reads node-cache's flags (Go's flag syntax: -name value,
// -name=value, one or two dashes; booleans only as -name or -name=bool).
func (m *Manifest) readArgs(args []string) error {
	bools := map[string]*bool{"setupinterface": &m.SetupInterface, "setupiptables": &m.SetupIptables, "skipteardown": &m.SkipTeardown}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if p, ok := bools[name]; ok {
			v := true
			if hasVal {
				switch strings.ToLower(val) {
				case "true", "1", "t":
				case "false", "0", "f":
					v = false
				default:
					return fmt.Errorf("-%s=%s: not a boolean", name, val)
				}
			}
			*p = v
			continue
		}
		if name != "localip" {
			continue
		}
		if !hasVal {
			if i+1 == len(args) {
				return errors.New("-localip without a value")
			}
			i++
			val = args[i]
		}
		m.LocalIPs = nil
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				m.LocalIPs = append(m.LocalIPs, s)
			}
		}
	}
	return nil
}

// NetworkMode is the nodedns network mode the manifest's DaemonSet
// amounts to: pod when node-cache runs off the host network, or sets up
// neither its link nor its rules (the Local Redirect Policy variant: the
// redirect, not node-cache, brings the queries); else host. "" without a
// DaemonSet (nothing says).
func (m *Manifest) NetworkMode() string {
	switch {
	case m.DaemonSet == "":
		return ""
	case !m.HostNetwork || !m.SetupInterface && !m.SetupIptables:
		return config.NetworkPod
	}
	return config.NetworkHost
}

// podMode carries what pod mode needs of the addresses (finish): the
// redirect's frontends (node-cache's -localip) become local-ip, never
// bound, refused as upstreams; the Corefile's binds and port are not
// carried (the agent serves port 53 of the pod's addresses).
func (m *migrator) podMode() {
	why := "the manifest runs node-cache in the pod network behind a redirect (Cilium's Local Redirect Policy)"
	if w := m.opts.NetworkModeWhy; w != "" {
		why = w
	}
	set(m, &m.cfg.NetworkMode, config.NetworkPod, 0, why+": nodedns serves UDP and TCP port 53 of the pod's addresses ($POD_IPS, from status.podIPs) and installs no link, rules or teardown on the node; run it with the chart's networkMode pod")
	var ips config.List
	for _, s := range m.opts.RedirectedIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			m.drop(0, "-localip %s: not an address (a pillar the manifest's sed fills, e.g. __PILLAR__DNS__SERVER__ with the kube-dns ClusterIP?): not carried; add the address to local-ip so that nodedns refuses it as an upstream", s)
			continue
		}
		ips = append(ips, a.Unmap().String())
	}
	if len(ips) > 0 {
		set(m, &m.cfg.LocalIP, ips, 0, "node-cache's -localip: the addresses the redirect sends to the agent; in pod mode never bound, and refused as upstreams (a forwarding loop)")
	}
	var bound []string
	for _, ip := range m.binds {
		if a, err := netip.ParseAddr(ip); err != nil || !a.IsUnspecified() {
			bound = append(bound, ip)
		}
	}
	if len(bound) > 0 {
		m.drop(m.bindLine, "bind %s: in pod mode nodedns serves the pod's own addresses, where the redirect delivers the queries; not carried", strings.Join(bound, " "))
	}
	if m.port != 0 && m.port != 53 {
		m.drop(m.portLine, "port %d: in pod mode nodedns serves port 53 of the pod's addresses, the port the redirect's policies name; not carried", m.port)
	}
}
