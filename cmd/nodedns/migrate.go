package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/miekg/dns"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/migrate"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

// Exit statuses of `nodedns migrate`.
const (
	migrateDropped  = 3 // the configuration was written, but something was not carried
	migrateBadInput = 2 // no configuration: bad flags, or a file that does not read or parse
)

// exitError ends a command with a given status; err, when set, is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// migrateCmd is `nodedns migrate`: a Corefile (and the kube-dns ConfigMap)
// in, a nodedns configuration file on stdout, and on stderr one line per
// directive or option that was not carried.
func migrateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	corefile := fs.String("corefile", "", "the CoreDNS Corefile to carry over (required unless --manifest has one)")
	manifest := fs.String("manifest", "", "a NodeLocal DNSCache manifest (nodelocaldns.yaml, or its Cilium Local Redirect Policy variant): its ConfigMap's Corefile (unless --corefile) and its DaemonSet's network and node-cache flags; off the host network, or with -setupinterface=false -setupiptables=false, the output is a network-mode pod configuration")
	kubeDNS := fs.String("kube-dns-config", "", "directory of the kube-dns ConfigMap (stubDomains, upstreamNameservers), as node-cache reads it")
	clusterDNS := fs.String("cluster-dns", "", "the kube-dns-upstream Service's ClusterIP, for node-cache's __PILLAR__CLUSTER__DNS__ (default $KUBE_DNS_UPSTREAM_SERVICE_HOST)")
	localIP := fs.String("local-ip", migrate.DefaultLocalIP, "the agent's address when the Corefile binds none")
	clusterDomain := fs.String("cluster-domain", "", "the cluster's DNS domain, kubelet's clusterDomain (required when the Corefile has no kubernetes directive, as NodeLocal DNSCache's: migrate never assumes cluster.local)")
	kubeletConfig := fs.String("kubelet-config", "", "a KubeletConfiguration file (/var/lib/kubelet/config.yaml) to read clusterDomain from, instead of --cluster-domain")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: nodedns migrate --corefile FILE | --manifest FILE
                       [--cluster-domain DOMAIN | --kubelet-config FILE]
                       [--kube-dns-config DIR] [flags]

Prints a nodedns configuration file equivalent to the Corefile. Every
directive or option that cannot be carried is listed on stderr with its
line. Exit status: 0 everything carried, 3 something was not, 2 the input
does not read or parse.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: migrateBadInput}
	}
	if fs.NArg() > 0 {
		return &exitError{code: migrateBadInput, err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *corefile == "" && *manifest == "" {
		fs.Usage()
		return &exitError{code: migrateBadInput, err: errors.New("--corefile is required (or --manifest with a Corefile)")}
	}
	var man *migrate.Manifest
	if *manifest != "" {
		b, err := config.ReadConfigMapFile("manifest", *manifest)
		if err != nil {
			return &exitError{code: migrateBadInput, err: err}
		}
		if man, err = migrate.ReadManifest(b); err != nil {
			return &exitError{code: migrateBadInput, err: fmt.Errorf("--manifest %s: %w", *manifest, err)}
		}
	}
	var src []byte
	source := *corefile
	switch {
	case *corefile != "":
		// A Corefile comes from a ConfigMap too: the --config file's bound.
		b, err := config.ReadConfigMapFile("Corefile", *corefile)
		if err != nil {
			return &exitError{code: migrateBadInput, err: err}
		}
		src = b
	case man.Corefile == nil:
		return &exitError{code: migrateBadInput, err: fmt.Errorf("--manifest %s has no ConfigMap with a Corefile: give --corefile", *manifest)}
	default:
		src, source = man.Corefile, *manifest+" ("+man.CorefileFrom+")"
	}
	opts := migrate.Options{ClusterDNS: *clusterDNS, LocalIP: *localIP, Source: source}
	if man != nil && man.NetworkMode() == config.NetworkPod {
		opts.NetworkMode, opts.RedirectedIPs = config.NetworkPod, man.LocalIPs
		opts.NetworkModeWhy = fmt.Sprintf("%s: DaemonSet %s runs node-cache with hostNetwork %v, -setupinterface=%v, -setupiptables=%v",
			*manifest, man.DaemonSet, man.HostNetwork, man.SetupInterface, man.SetupIptables)
	}
	var err error
	if opts.ClusterDomain, opts.ClusterDomainFrom, err = migrateClusterDomain(*clusterDomain, *kubeletConfig); err != nil {
		return &exitError{code: migrateBadInput, err: err}
	}
	if *kubeDNS != "" {
		st, err := os.Stat(*kubeDNS)
		if err != nil {
			return &exitError{code: migrateBadInput, err: fmt.Errorf("--kube-dns-config: %w", err)}
		}
		if !st.IsDir() {
			return &exitError{code: migrateBadInput, err: fmt.Errorf("--kube-dns-config %s: not a directory", *kubeDNS)}
		}
		kd, err := kubedns.Read(*kubeDNS)
		if err != nil {
			return &exitError{code: migrateBadInput, err: err}
		}
		opts.KubeDNS, opts.KubeDNSDir = &kd, *kubeDNS
	}
	res, err := migrate.Migrate(src, opts)
	if err != nil {
		return &exitError{code: migrateBadInput, err: fmt.Errorf("%s: %w", source, err)}
	}
	if _, err := stdout.Write(res.YAML); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	for _, n := range res.Dropped {
		switch {
		case n.File != "":
			fmt.Fprintf(stderr, "%s: %s\n", n.File, n.Text)
		case n.Line > 0:
			fmt.Fprintf(stderr, "%s:%d: %s\n", source, n.Line, n.Text)
		default:
			fmt.Fprintf(stderr, "%s: %s\n", source, n.Text)
		}
	}
	if len(res.Dropped) > 0 {
		fmt.Fprintf(stderr, "nodedns migrate: %d directives or options not carried (listed above)\n", len(res.Dropped))
		return &exitError{code: migrateDropped}
	}
	return nil
}

// migrateClusterDomain is the cluster domain given to migrate: --cluster-domain,
// or the clusterDomain of the --kubelet-config file; with both, they must
// agree. from says where it came from, for the output's comments.
func migrateClusterDomain(flagValue, kubeletConfig string) (domain, from string, err error) {
	if flagValue != "" {
		if err := checkClusterDomain(flagValue); err != nil {
			return "", "", fmt.Errorf("--cluster-domain %q: %w", flagValue, err)
		}
		domain, from = strings.TrimSuffix(flagValue, "."), "--cluster-domain "+flagValue
	}
	if kubeletConfig == "" {
		return domain, from, nil
	}
	b, err := config.ReadConfigMapFile("kubelet config", kubeletConfig)
	if err != nil {
		return "", "", err
	}
	var kc struct {
		Kind          string `json:"kind"`
		ClusterDomain string `json:"clusterDomain"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return "", "", fmt.Errorf("--kubelet-config %s: %w", kubeletConfig, err)
	}
	if kc.Kind != "" && kc.Kind != "KubeletConfiguration" {
		return "", "", fmt.Errorf("--kubelet-config %s: kind %q: want KubeletConfiguration", kubeletConfig, kc.Kind)
	}
	kd := strings.TrimSuffix(kc.ClusterDomain, ".")
	switch {
	case kd == "":
		return "", "", fmt.Errorf("--kubelet-config %s: no clusterDomain in it (kubelet then gives pods no cluster search domain): give --cluster-domain", kubeletConfig)
	case domain != "" && !strings.EqualFold(domain, kd):
		return "", "", fmt.Errorf("--cluster-domain %s and --kubelet-config %s (clusterDomain %s) disagree", domain, kubeletConfig, kd)
	case domain == "":
		if err := checkClusterDomain(kd); err != nil {
			return "", "", fmt.Errorf("--kubelet-config %s: clusterDomain %q: %w", kubeletConfig, kd, err)
		}
		domain, from = kd, "clusterDomain of "+kubeletConfig
	}
	return domain, from, nil
}

// checkClusterDomain refuses what cannot be a cluster domain: not a domain
// name, or the root.
func checkClusterDomain(s string) error {
	if _, ok := dns.IsDomainName(s); !ok || strings.Trim(s, ".") == "" {
		return errors.New("want a domain name such as cluster.local")
	}
	return nil
}
