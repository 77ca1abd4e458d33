package config

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestNetworkModeListen(t *testing.T) {
	t.Setenv("POD_IPS", "")
	for _, c := range []struct {
		args []string
		want []string
		err  string
	}{
		// Host mode: port 53 of each local IP, pod IPs ignored (a stray
		// $POD_IPS, even a bad one, must not stop a host agent).
		{args: []string{"--local-ip=169.254.20.10", "--pod-ips=bogus"}, want: []string{"169.254.20.10:53"}},
		// Pod mode: port 53 of each pod IP; local-ip is never bound.
		{args: []string{"--network-mode=pod", "--local-ip=169.254.20.10", "--pod-ips=169.254.64.7,fdd5:6e6f:6465::7"},
			want: []string{"169.254.64.7:53", "[fdd5:6e6f:6465::7]:53"}},
		{args: []string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--listen=169.254.64.7:5353"}, want: []string{"169.254.64.7:5353"}},
		{args: []string{"--network-mode=pod", "--local-ip=169.254.20.10"}, err: "nothing to listen on: with --network-mode pod give --pod-ips"},
		{args: []string{"--network-mode=pod", "--pod-ips=not-an-ip"}, err: `--pod-ips "not-an-ip": want IP addresses`},
		{args: []string{"--network-mode=pod", "--pod-ips=127.0.0.1"}, err: `--pod-ips "127.0.0.1": unspecified, loopback`},
		{args: []string{"--network-mode=pod", "--pod-ips=169.254.64.7,169.254.64.8,fd00::1"}, err: "--pod-ips: 3 addresses: want at most 2"},
		{args: []string{"--network-mode=bridge", "--local-ip=169.254.20.10"}, err: `--network-mode "bridge": want one of [host pod]`},
		{args: []string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--fallback-dns=169.254.211.2"}, err: "--fallback-dns 169.254.211.2 with --network-mode pod"},
	} {
		name := strings.Join(c.args, " ")
		cfg, err := Load(c.args, io.Discard)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := cfg.ListenAddrs(); !slices.Equal(got, c.want) {
			t.Errorf("%s: listen %v, want %v", name, got, c.want)
		}
		if cfg.PodMode() && cfg.Intercepts() {
			t.Errorf("%s: pod mode intercepts", name)
		}
	}
}

// The pod IPs come from $POD_IPS, the downward API's status.podIPs
// (comma-separated, as kubelet writes it).
func TestPodIPsFromEnv(t *testing.T) {
	t.Setenv("POD_IPS", "169.254.64.9,fdd5:6e6f:6465::9")
	cfg, err := Load([]string{"--network-mode=pod"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"169.254.64.9:53", "[fdd5:6e6f:6465::9]:53"}; !slices.Equal(cfg.ListenAddrs(), want) {
		t.Fatalf("listen %v, want %v", cfg.ListenAddrs(), want)
	}
}

// In pod mode every server the agent would ask that the redirect sends
// back to it is refused, naming the value; the same servers are fine in
// host mode (there the agent binds the local IPs, and upstreams() refuses
// its own addresses at start) and other servers are fine in pod mode.
func TestPodModeRefusesRedirectedUpstreams(t *testing.T) {
	t.Setenv("POD_IPS", "")
	pod := []string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--local-ip=169.254.20.10,169.254.128.10"}
	for _, c := range []struct {
		args []string
		file string
		err  string // "": accepted
	}{
		{args: []string{"--upstream=169.254.20.10"}, err: `--upstream "169.254.20.10": with --network-mode pod 169.254.20.10 is an address the redirect sends to this agent`},
		// The kube-dns ClusterIP, given as a local IP, on any port and scheme.
		{args: []string{"--upstream=169.254.211.2,tcp://169.254.128.10:53"}, err: `--upstream "tcp://169.254.128.10:53"`},
		{args: []string{"--upstream=169.254.128.10:5353"}, err: `169.254.128.10 is an address the redirect sends`},
		{args: []string{"--upstream=::ffff:169.254.20.10"}, err: `169.254.20.10 is an address the redirect sends`},
		{args: []string{"--upstream=kube-dns.kube-system.svc.cluster.local"}, err: `--upstream "kube-dns.kube-system.svc.cluster.local": with --network-mode pod this name is the kube-dns Service`},
		{args: []string{"--cluster-dns=169.254.128.10"}, err: `--cluster-dns "169.254.128.10": with --network-mode pod`},
		{args: []string{"--cluster-zone=forward", "--cluster-dns=169.254.20.10:53"}, err: `--cluster-dns "169.254.20.10:53"`},
		{args: []string{"--upstream-resolver=169.254.20.10"}, err: `--upstream-resolver "169.254.20.10"`},
		{args: []string{"--stub-domain=corp.example=169.254.211.2,169.254.20.10"}, err: `stub domain "corp.example" "169.254.20.10"`},
		{file: "stub-domains:\n  corp.example:\n    servers: [169.254.211.2]\n    next: {when: [NXDOMAIN], servers: [169.254.128.10]}\n", err: `stub domain "corp.example" next "169.254.128.10"`},
		{file: "upstream-next: {when: [SERVFAIL], servers: [169.254.20.10]}\n", err: `upstream-next "169.254.20.10"`},
		// What pod mode wants instead.
		{args: []string{"--upstream=169.254.211.2", "--cluster-dns=169.254.128.11"}},
		{args: []string{"--upstream=kube-dns-upstream.kube-system.svc.cluster.local"}},
		{args: []string{"--stub-domain=corp.example=169.254.211.2"}},
	} {
		name := strings.Join(c.args, " ") + c.file
		var err error
		if c.file != "" {
			_, err = loadFile(t, "network-mode: pod\npod-ips: [169.254.64.7]\nlocal-ip: [169.254.20.10, 169.254.128.10]\n"+c.file, c.args...)
		} else {
			_, err = Load(append(slices.Clone(pod), c.args...), io.Discard)
		}
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err %v, want %q", name, err, c.err)
		}
		// Host mode takes what pod mode refused (but for the names of
		// its own addresses, which upstreams() refuses at start).
		if c.file == "" {
			host := append([]string{"--listen=127.0.0.1:5300"}, c.args...)
			if _, err := Load(host, io.Discard); err != nil {
				t.Errorf("host mode %s: %v", name, err)
			}
		}
	}
}

// 169.254.20.10 is a redirected address in pod mode even when local-ip
// does not list it: it is the address the addressMatcher policy sends.
func TestPodModeWellKnownAddressAlwaysRedirected(t *testing.T) {
	t.Setenv("POD_IPS", "")
	_, err := Load([]string{"--network-mode=pod", "--pod-ips=169.254.64.7", "--upstream=169.254.20.10:53"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--upstream "169.254.20.10:53"`) {
		t.Fatalf("err %v", err)
	}
	cfg := Default()
	if got := cfg.RedirectedAddrs(); got != nil {
		t.Fatalf("host mode redirected %v", got)
	}
}

// config validate runs the same check as serve (Parse's cross checks).
func TestValidateRefusesRedirectedUpstream(t *testing.T) {
	t.Setenv("POD_IPS", "")
	path := writeFile(t, "network-mode: pod\npod-ips: [169.254.64.7]\nupstream: [169.254.20.10]\n")
	var out, errOut strings.Builder
	err := Command([]string{"validate", path}, &out, &errOut)
	if err == nil || !strings.Contains(out.String()+errOut.String()+err.Error(), `169.254.20.10 is an address the redirect sends to this agent`) {
		t.Fatalf("validate: err %v, out %q, stderr %q", err, out.String(), errOut.String())
	}
}
