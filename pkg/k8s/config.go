package k8s

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// PodMode says how `<a-b-c-d>.<namespace>.pod.<zone>` names are answered,
// as the `pods` option of CoreDNS's kubernetes plugin does.
type PodMode string

// Pod modes.
const (
	// PodsDisabled answers NXDOMAIN for every pod name.
	PodsDisabled PodMode = "disabled"
	// PodsInsecure echoes the address in the name back when it parses and
	// the namespace exists, without checking that such a pod exists (the
	// kube-dns default, and ours).
	PodsInsecure PodMode = "insecure"
	// PodsVerified answers only for a pod that exists in that namespace
	// with that address. It needs a watch on every pod of the cluster.
	PodsVerified PodMode = "verified"
)

// Defaults and limits of Config.
const (
	DefaultZone = "cluster.local"
	DefaultTTL  = 5
	MaxTTL      = 3600
	// DefaultDNSService is the Service whose name and ClusterIPs answer NS
	// queries at the zone apex, as CoreDNS answers with its own Service.
	DefaultDNSService = "kube-system/kube-dns"
)

// Config configures an Index. The zero value of each optional field selects
// its default; TTL is used as given (0 is valid: answers are not cached),
// so callers set DefaultTTL explicitly when they have no value.
type Config struct {
	Zone     string  // cluster domain, e.g. "cluster.local" (with or without trailing dot)
	TTL      uint32  // TTL of every cluster record, 0-3600 (flag default DefaultTTL)
	Pods     PodMode // "" means PodsInsecure
	NodeName string  // this node; when set, pods on this node are watched for PodNamespace
	Logger   *slog.Logger

	// DNSService ("namespace/name", default DefaultDNSService) names the
	// Service announced in the apex NS answer, with its ClusterIPs as glue.
	DNSService string
	// NSAddrs are the glue of ns.dns.<zone>, the NS target used while
	// DNSService does not exist (CoreDNS uses its own addresses there).
	// Optional.
	NSAddrs []netip.Addr
}

// ErrConfig is wrapped by every validation error of New.
var ErrConfig = errors.New("invalid cluster zone configuration")

// normalize validates c and fills in defaults.
func (c Config) normalize() (Config, error) {
	z := strings.ToLower(strings.TrimSpace(c.Zone))
	if z == "" {
		z = DefaultZone
	}
	z = dns.Fqdn(z)
	if z == "." {
		return c, fmt.Errorf("%w: zone %q: the root zone cannot be the cluster zone", ErrConfig, c.Zone)
	}
	if _, ok := dns.IsDomainName(z); !ok {
		return c, fmt.Errorf("%w: zone %q is not a domain name", ErrConfig, c.Zone)
	}
	c.Zone = z
	if c.TTL > MaxTTL {
		return c, fmt.Errorf("%w: ttl %d out of range 0-%d", ErrConfig, c.TTL, MaxTTL)
	}
	switch c.Pods {
	case "":
		c.Pods = PodsInsecure
	case PodsDisabled, PodsInsecure, PodsVerified:
	default:
		return c, fmt.Errorf("%w: pods mode %q (want disabled, insecure or verified)", ErrConfig, c.Pods)
	}
	if c.DNSService == "" {
		c.DNSService = DefaultDNSService
	}
	if ns, name, ok := strings.Cut(c.DNSService, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return c, fmt.Errorf("%w: dns service %q (want namespace/name)", ErrConfig, c.DNSService)
	}
	for _, a := range c.NSAddrs {
		if !a.IsValid() {
			return c, fmt.Errorf("%w: invalid address in NSAddrs", ErrConfig)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// RESTConfig returns the client configuration for kubeconfig, a kubeconfig
// file path. With "" it returns the in-cluster configuration when running in
// a pod (KUBERNETES_SERVICE_HOST is set), and (nil, nil) otherwise: the
// caller then runs without a cluster zone.
//
// The returned config asks for protobuf: decoding a 10k-service list is
// several times cheaper in memory than JSON, and that list is the agent's
// peak allocation.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("loading in-cluster config: %w", err)
		}
	default:
		return nil, nil
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if cfg.UserAgent == "" {
		cfg.UserAgent = "nodedns"
	}
	return cfg, nil
}
