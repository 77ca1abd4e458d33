package migrate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/config"
)

func TestReadManifest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "manifest", "nodelocaldns-cilium-lrp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.NetworkMode() != config.NetworkPod || !slices.Equal(m.LocalIPs, []string{"169.254.20.10", "10.96.0.10"}) ||
		m.HostNetwork || m.SetupInterface || m.SetupIptables || !m.SkipTeardown || m.DaemonSet != "node-local-dns" ||
		!strings.Contains(string(m.Corefile), "bind 0.0.0.0") || m.CorefileFrom != "ConfigMap node-local-dns" {
		t.Fatalf("%+v", m)
	}

	ds := func(hostNetwork bool, args string) string {
		return "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: nlc}\nspec:\n  template:\n    spec:\n      hostNetwork: " +
			map[bool]string{true: "true", false: "false"}[hostNetwork] + "\n      containers:\n      - name: node-cache\n        args: " + args + "\n"
	}
	for _, c := range []struct {
		doc  string
		mode string
		ips  []string
		err  string
	}{
		// The iptables variant: on the host network, sets up link and rules.
		{doc: ds(true, `["-localip", "169.254.20.10,10.96.0.10", "-conf", "/etc/Corefile"]`), mode: "host", ips: []string{"169.254.20.10", "10.96.0.10"}},
		// On the host network but neither link nor rules: a redirect brings the queries.
		{doc: ds(true, `["--localip=169.254.20.10", "-setupinterface=false", "-setupiptables=0"]`), mode: "pod", ips: []string{"169.254.20.10"}},
		{doc: ds(true, `["-localip=169.254.20.10", "-setupiptables=false"]`), mode: "host", ips: []string{"169.254.20.10"}},
		{doc: ds(false, `["-localip", "169.254.20.10,__PILLAR__DNS__SERVER__", "-setupinterface"]`), mode: "pod", ips: []string{"169.254.20.10", "__PILLAR__DNS__SERVER__"}},
		{doc: ds(false, `["-setupinterface=maybe"]`), err: "-setupinterface=maybe: not a boolean"},
		{doc: ds(false, `["-localip"]`), err: "-localip without a value"},
		{doc: "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", err: "not a NodeLocal DNSCache manifest"},
		{doc: ds(false, `[]`) + "---\n" + ds(true, `[]`), err: "two DaemonSets"},
		// kubectl get -o yaml's List.
		{doc: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: nlc}\n  data: {Corefile: '.:53 {}'}\n", mode: ""},
	} {
		m, err := ReadManifest([]byte(c.doc))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.doc, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.doc, err)
			continue
		}
		if m.NetworkMode() != c.mode || !slices.Equal(m.LocalIPs, c.ips) {
			t.Errorf("%s: mode %q ips %v, want %q %v", c.doc, m.NetworkMode(), m.LocalIPs, c.mode, c.ips)
		}
	}
}

// Pod mode: the Corefile's bind 0.0.0.0 is the pod's addresses (nothing
// dropped, no listen), the redirect's frontends are local-ip, and an
// unfilled pillar among them is a note.
func TestMigratePodMode(t *testing.T) {
	m, err := ReadManifest(mustRead(t, filepath.Join("testdata", "manifest", "nodelocaldns-cilium-lrp.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Migrate(m.Corefile, Options{ClusterDomain: "cluster.local", ClusterDNS: "10.96.0.11", NetworkMode: m.NetworkMode(), RedirectedIPs: append(m.LocalIPs, "__PILLAR__DNS__SERVER__")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.NetworkMode != config.NetworkPod || !slices.Equal(res.Config.LocalIP, config.List{"169.254.20.10", "10.96.0.10"}) || slices.Contains(res.Keys, "listen") {
		t.Errorf("network-mode %s local-ip %v keys %v", res.Config.NetworkMode, res.Config.LocalIP, res.Keys)
	}
	if len(res.Dropped) != 1 || !strings.Contains(res.Dropped[0].Text, "-localip __PILLAR__DNS__SERVER__: not an address") {
		t.Errorf("dropped %v", res.Dropped)
	}
	// Without the manifest's word, the same Corefile is host mode as ever.
	res, err = Migrate(m.Corefile, Options{ClusterDomain: "cluster.local", ClusterDNS: "10.96.0.11"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(res.Keys, "network-mode") || !slices.Contains(res.Keys, "local-ip") {
		t.Errorf("host: keys %v", res.Keys)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
