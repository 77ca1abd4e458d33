package k8s

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
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

// DefaultFallthrough are the zones whose NXDOMAIN goes on to the cache and
// the upstream when Config.Fallthrough is nil: the reverse zones, as in
// kubeadm's Corefile (`fallthrough in-addr.arpa ip6.arpa`), so PTR queries
// for addresses the cluster does not know are answered by the upstream.
var DefaultFallthrough = []string{dnsname.ReverseV4, dnsname.ReverseV6}

// reverseZones are the reverse zones the index answers PTR queries in.
var reverseZones = [...]string{dnsname.ReverseV4, dnsname.ReverseV6}

// Config configures an Index. The zero value of each optional field selects
// its default; TTL is used as given (0 is valid: answers are not cached),
// so callers set DefaultTTL explicitly when they have no value.
//
// The options below Pods follow the CoreDNS kubernetes plugin's options of
// the same meaning (named in each comment).
type Config struct {
	Zone string // cluster domain, e.g. "cluster.local" (with or without trailing dot)
	// Zones lists every cluster domain the index answers, from one set of
	// records (CoreDNS: several zones on the kubernetes line). The first
	// is the primary zone: PTR targets name it and the search-path walk
	// uses it. Answers in the other zones name the zone asked (SRV
	// targets, the apex NS), as CoreDNS does. Empty means [Zone]; when
	// both are set, Zone must be Zones[0].
	Zones    []string
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

	// EndpointPodNames names endpoints without a hostname after the pod
	// in their targetRef instead of their address
	// (`endpoint_pod_names`). A pod name that is not a DNS label (longer
	// than 63 bytes, or with a dot) keeps the address label.
	EndpointPodNames bool
	// IgnoreEmptyService answers NXDOMAIN for every name of a ClusterIP
	// Service (NodePort, LoadBalancer) without ready endpoints
	// (`ignore empty_service`). PTR of its ClusterIP still answers.
	IgnoreEmptyService bool
	// NoEndpoints runs without the EndpointSlice watch (`noendpoints`):
	// headless Services and endpoint names are NXDOMAIN, SRV of a
	// ClusterIP Service still answers, endpoint addresses get no PTR.
	NoEndpoints bool
	// Namespaces, when set, are the only namespaces whose names exist
	// (`namespaces`); the others' names are NXDOMAIN and their addresses
	// get no PTR.
	Namespaces []string
	// NamespaceLabels is a label selector (`namespace_labels`, the syntax
	// of kubectl -l): only namespaces whose labels match are exposed, as
	// with Namespaces. The two cannot both be set (as in CoreDNS).
	NamespaceLabels string
	// Fallthrough lists the zones in which a name the index would answer
	// NXDOMAIN goes on to the cache and the upstream instead
	// (`fallthrough`). Entries are domain names or CIDRs (10.0.0.0/8 is
	// 10.in-addr.arpa.); "." is every zone. nil means DefaultFallthrough;
	// an empty, non-nil list means none: the index is then authoritative
	// for every PTR query in the reverse zones.
	Fallthrough []string

	// MulticlusterZones are zones answered from the ServiceImports of
	// the Multi-Cluster Services API (multicluster.x-k8s.io/v1alpha1) and
	// the EndpointSlices labelled multicluster.kubernetes.io/service-name,
	// as CoreDNS's `multicluster` option answers them (multicluster.go).
	// They are not cluster zones: Services are not visible there.
	MulticlusterZones []string
	// Imports lists and watches ServiceImports (custom resources, served
	// as JSON only); New needs it with MulticlusterZones.
	Imports dynamic.Interface

	// PodsOnly watches nothing but this node's pods (NodeName), for
	// PodNamespace: no Services, EndpointSlices or Namespaces. The index
	// then answers nothing of the zone; it serves the search-path walk
	// when the cluster zone itself is forwarded to the central cluster
	// DNS (--cluster-zone forward), whatever Pods says.
	PodsOnly bool

	// Set by normalize.
	nsSet map[string]struct{}
	nsSel labels.Selector
}

// ErrConfig is wrapped by every validation error of New.
var ErrConfig = errors.New("invalid cluster zone configuration")

// normalize validates c and fills in defaults.
func (c Config) normalize() (Config, error) {
	zones := c.Zones
	if len(zones) == 0 {
		zones = []string{c.Zone}
	}
	norm := make([]string, 0, len(zones))
	for _, raw := range zones {
		z, err := normalizeZone(raw)
		if err != nil {
			return c, err
		}
		if slices.Contains(norm, z) {
			return c, fmt.Errorf("%w: cluster-domain %q given twice", ErrConfig, raw)
		}
		norm = append(norm, z)
	}
	if c.Zone != "" && len(c.Zones) > 0 {
		if z, err := normalizeZone(c.Zone); err != nil || z != norm[0] {
			return c, fmt.Errorf("%w: zone %q is not the first of zones %q", ErrConfig, c.Zone, c.Zones)
		}
	}
	c.Zone, c.Zones = norm[0], norm
	mc := make([]string, 0, len(c.MulticlusterZones))
	for _, raw := range c.MulticlusterZones {
		z, err := normalizeZone(raw)
		if err != nil {
			return c, fmt.Errorf("%w (multicluster)", err)
		}
		if slices.Contains(norm, z) {
			return c, fmt.Errorf("%w: multicluster zone %q is also a cluster domain: a zone is answered from Services or from ServiceImports, not both", ErrConfig, raw)
		}
		if slices.Contains(mc, z) {
			return c, fmt.Errorf("%w: multicluster zone %q given twice", ErrConfig, raw)
		}
		mc = append(mc, z)
	}
	c.MulticlusterZones = mc
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
	if err := c.normalizeNamespaces(); err != nil {
		return c, err
	}
	fall, err := normalizeFallthrough(c.Fallthrough, append(slices.Clone(c.Zones), c.MulticlusterZones...))
	if err != nil {
		return c, err
	}
	c.Fallthrough = fall
	return c, nil
}

// Validate reports whether New would accept c, with an error naming the
// bad value.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// normalizeZone returns z as a lower-case FQDN, checked for use as a
// cluster domain. "" is DefaultZone.
func normalizeZone(raw string) (string, error) {
	z := strings.ToLower(strings.TrimSpace(raw))
	if z == "" {
		z = DefaultZone
	}
	z = dns.Fqdn(z)
	if z == "." {
		return "", fmt.Errorf("%w: zone %q: the root zone cannot be the cluster zone", ErrConfig, raw)
	}
	if _, ok := dns.IsDomainName(z); !ok || strings.Contains(z, "..") {
		return "", fmt.Errorf("%w: zone %q is not a domain name", ErrConfig, raw)
	}
	if dnsname.IsReverse(z) {
		return "", fmt.Errorf("%w: zone %q: a reverse zone cannot be a cluster domain (PTR queries are always answered for the addresses the cluster knows)", ErrConfig, raw)
	}
	return z, nil
}

// normalizeNamespaces checks Namespaces and NamespaceLabels and prepares
// their lookup forms.
func (c *Config) normalizeNamespaces() error {
	if len(c.Namespaces) > 0 && strings.TrimSpace(c.NamespaceLabels) != "" {
		return fmt.Errorf("%w: namespaces %q and namespace-labels %q cannot both be set (as in CoreDNS): pick one", ErrConfig, c.Namespaces, c.NamespaceLabels)
	}
	c.nsSet, c.nsSel = nil, nil
	if len(c.Namespaces) > 0 {
		c.nsSet = make(map[string]struct{}, len(c.Namespaces))
		for _, n := range c.Namespaces {
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				return fmt.Errorf("%w: namespaces: %q is not a namespace name: %s", ErrConfig, n, errs[0])
			}
			c.nsSet[n] = struct{}{}
		}
	}
	if sel := strings.TrimSpace(c.NamespaceLabels); sel != "" {
		// kubectl's syntax: every expression CoreDNS's namespace_labels
		// accepts, and also != (which CoreDNS's parser refuses).
		var err error
		if c.nsSel, err = labels.Parse(sel); err != nil {
			return fmt.Errorf("%w: namespace-labels %q is not a label selector: %v", ErrConfig, c.NamespaceLabels, err)
		}
	}
	return nil
}

// filtersNamespaces reports whether only some namespaces are exposed.
func (c *Config) filtersNamespaces() bool { return c.nsSet != nil || c.nsSel != nil }

// exposes reports whether names in namespace n (with labels lbl) exist.
func (c *Config) exposes(n string, lbl map[string]string) bool {
	if c.nsSet != nil {
		if _, ok := c.nsSet[n]; !ok {
			return false
		}
	}
	return c.nsSel == nil || c.nsSel.Matches(labels.Set(lbl))
}

// normalizeFallthrough returns the fallthrough zones as lower-case FQDNs:
// DefaultFallthrough for nil, CIDRs turned into their reverse zones.
// Zones that can contain no name the index answers are refused: they
// would do nothing.
func normalizeFallthrough(in, zones []string) ([]string, error) {
	if in == nil {
		return slices.Clone(DefaultFallthrough), nil
	}
	out := make([]string, 0, len(in))
	for _, raw := range in {
		s := strings.ToLower(strings.TrimSpace(raw))
		var add []string
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%w: fallthrough %q: not a zone or a CIDR: %v", ErrConfig, raw, err)
			}
			add = dnsname.ReverseZones(p)
		} else {
			z := dns.Fqdn(s)
			if _, ok := dns.IsDomainName(z); !ok || s == "" || strings.Contains(z, "..") {
				return nil, fmt.Errorf("%w: fallthrough %q is not a domain name", ErrConfig, raw)
			}
			add = []string{z}
		}
		for _, z := range add {
			if !related(z, zones) {
				return nil, fmt.Errorf("%w: fallthrough %q: no name the cluster zone answers is under it (zones %s)",
					ErrConfig, raw, strings.Join(append(slices.Clone(zones), reverseZones[:]...), " "))
			}
			if !slices.Contains(out, z) {
				out = append(out, z)
			}
		}
	}
	return out, nil
}

// related reports whether zone z overlaps a zone the index answers: it is
// one of them, above one (it holds all its names) or below one.
func related(z string, zones []string) bool {
	for _, a := range append(slices.Clone(zones), reverseZones[:]...) {
		if dns.IsSubDomain(z, a) || dns.IsSubDomain(a, z) {
			return true
		}
	}
	return false
}

// RESTConfig returns the client configuration for kubeconfig, a kubeconfig
// file path, in the file's current context (RESTConfigContext).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	return RESTConfigContext(kubeconfig, "")
}

// RESTConfigContext returns the client configuration for kubeconfig, a
// kubeconfig file path, in its context kctx ("": the file's current
// context), loaded as CoreDNS's `kubeconfig FILE CONTEXT` loads it
// (client-go's deferred loading rules with the context as an override).
// With kubeconfig "" it returns the in-cluster configuration when running
// in a pod (KUBERNETES_SERVICE_HOST is set), and (nil, nil) otherwise: the
// caller then runs without a cluster zone. A context needs a kubeconfig.
//
// The returned config asks for protobuf: decoding a 10k-service list is
// several times cheaper in memory than JSON, and that list is the agent's
// peak allocation.
func RESTConfigContext(kubeconfig, kctx string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
		if err != nil {
			if kctx != "" {
				return nil, fmt.Errorf("loading kubeconfig %s, context %q: %w", kubeconfig, kctx, err)
			}
			return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
		}
	case kctx != "":
		return nil, fmt.Errorf("kubeconfig context %q without a kubeconfig file", kctx)
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
