package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

// This file checks what /metrics exports after mixed traffic through a
// whole agent (server, cache, upstreams, stub domains, health probes):
// the series the coredns-mixin's dashboards and alerts query, with the
// label names CoreDNS 1.15 gives them, and every series the shipped
// dashboard and alert rules query.

// mixinQueries are the series the coredns-mixin queries, with the labels
// each query filters or groups by. Read from github.com/coredns/coredns-mixin
// (as mirrored by grafana/coredns-mixin at 78e2f48, dashboards/coredns.libsonnet,
// and povilasv/coredns-mixin at 26c9044, alerts/coredns.libsonnet and
// alerts/forward.libsonnet), with its default configuration
// (kubernetesPlugin: false, pluginNameLabel "name"). Left out: up (made
// by Prometheus), and coredns_kubernetes_dns_programming_duration_seconds,
// queried only with kubernetesPlugin: true.
var mixinQueries = []struct {
	name   string
	labels []string
	where  string
}{
	// dashboards/coredns.libsonnet
	{"coredns_panics_total", nil, "dashboard: Panics"},
	{"coredns_dns_responses_total", []string{"rcode"}, "dashboard: RPC Rate"},
	{"coredns_forward_responses_total", []string{"rcode"}, "dashboard: RPC Rate"},
	{"coredns_dns_request_duration_seconds_bucket", []string{"server", "zone", "le"}, "dashboard: Request duration 99th quantile"},
	{"coredns_forward_request_duration_seconds_bucket", []string{"to", "le"}, "dashboard: Request duration 99th quantile"},
	{"coredns_dns_requests_total", []string{"type"}, "dashboard: Requests (by qtype)"},
	{"coredns_dns_requests_total", []string{"zone"}, "dashboard: Requests (by zone)"},
	{"coredns_forward_requests_total", []string{"to"}, "dashboard: Forward Requests (by to)"},
	{"coredns_plugin_enabled", []string{"name"}, "dashboard: Plugins Enabled"},
	{"coredns_dns_request_size_bytes_bucket", []string{"server", "zone", "proto", "le"}, "dashboard: Request size"},
	{"coredns_dns_response_size_bytes_bucket", []string{"server", "zone", "proto", "le"}, "dashboard: Response size"},
	{"coredns_cache_hits_total", []string{"type"}, "dashboard: Cached, Cache hit Rate"},
	{"coredns_cache_misses_total", nil, "dashboard: Cached, Cache hit Rate"},
	{"coredns_cache_entries", []string{"type"}, "dashboard: Cache Size"},
	{"process_resident_memory_bytes", nil, "dashboard: Memory"},
	{"process_cpu_seconds_total", nil, "dashboard: CPU usage"},
	{"go_goroutines", nil, "dashboard: Goroutines"},
	{"coredns_build_info", nil, "dashboard: instance variable"},
	// alerts/coredns.libsonnet
	{"coredns_dns_request_duration_seconds_bucket", []string{"server", "zone", "le"}, "alert: CoreDNSLatencyHigh"},
	{"coredns_dns_responses_total", []string{"rcode"}, "alert: CoreDNSErrorsHigh"},
	// alerts/forward.libsonnet
	{"coredns_forward_request_duration_seconds_bucket", []string{"to", "le"}, "alert: CoreDNSForwardLatencyHigh"},
	{"coredns_forward_responses_total", []string{"rcode"}, "alert: CoreDNSForwardErrorsHigh"},
	{"coredns_forward_healthcheck_failures_total", []string{"to"}, "alert: CoreDNSForwardHealthcheckFailureCount"},
	{"coredns_forward_healthcheck_broken_total", nil, "alert: CoreDNSForwardHealthcheckBrokenCount"},
}

// corednsLabels are the label names CoreDNS 1.15 (v1.15.0
// plugin/metrics/vars/vars.go, plugin/metrics/metrics.go,
// plugin/cache/metrics.go, plugin/forward/metrics.go,
// plugin/pkg/proxy/metrics.go, plugin/reload, plugin/autopath; the
// coredns_forward_* series CoreDNS 1.10 had and the mixin still queries;
// node-cache's setup errors) gives every coredns_* family nodedns
// exports. Every one must be exported after mixed traffic, with exactly
// these labels (plus le on histogram buckets).
var corednsLabels = map[string][]string{
	"coredns_build_info":                           {"version", "revision", "goversion"},
	"coredns_panics_total":                         nil,
	"coredns_plugin_enabled":                       {"server", "zone", "view", "name"},
	"coredns_reload_failed_total":                  nil,
	"coredns_autopath_success_total":               {"server"},
	"coredns_nodecache_setup_errors_total":         {"errortype"},
	"coredns_dns_requests_total":                   {"server", "zone", "view", "proto", "family", "type"},
	"coredns_dns_responses_total":                  {"server", "zone", "view", "rcode", "plugin"},
	"coredns_dns_do_requests_total":                {"server", "zone", "view"},
	"coredns_dns_request_duration_seconds":         {"server", "zone", "view"},
	"coredns_dns_request_size_bytes":               {"server", "zone", "view", "proto"},
	"coredns_dns_response_size_bytes":              {"server", "zone", "view", "proto"},
	"coredns_cache_entries":                        {"server", "type", "zones", "view"},
	"coredns_cache_hits_total":                     {"server", "type", "zones", "view"},
	"coredns_cache_misses_total":                   {"server", "zones", "view"},
	"coredns_cache_requests_total":                 {"server", "zones", "view"},
	"coredns_cache_served_stale_total":             {"server", "zones", "view"},
	"coredns_cache_prefetch_total":                 {"server", "zones", "view"},
	"coredns_cache_evictions_total":                {"server", "type", "zones", "view"},
	"coredns_forward_requests_total":               {"to"},
	"coredns_forward_responses_total":              {"rcode", "to"},
	"coredns_forward_request_duration_seconds":     {"to", "rcode"},
	"coredns_forward_healthcheck_failures_total":   {"to"},
	"coredns_forward_healthcheck_broken_total":     nil,
	"coredns_forward_max_concurrent_rejects_total": nil,
	"coredns_proxy_request_duration_seconds":       {"proxy_name", "to", "rcode"},
	"coredns_proxy_healthcheck_failures_total":     {"proxy_name", "to"},
}

// scrape is what /metrics served: families by name, and every sample's
// name (histograms expanded to _bucket, _sum and _count) with its labels.
type scrape struct {
	families map[string]*dto.MetricFamily
	samples  map[string][]map[string]string
}

func parseScrape(t *testing.T, body io.Reader) *scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	s := &scrape{families: mfs, samples: map[string][]map[string]string{}}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if mf.GetType() != dto.MetricType_HISTOGRAM {
				s.samples[name] = append(s.samples[name], labels)
				continue
			}
			s.samples[name+"_sum"] = append(s.samples[name+"_sum"], labels)
			s.samples[name+"_count"] = append(s.samples[name+"_count"], labels)
			for _, b := range m.GetHistogram().GetBucket() {
				bl := map[string]string{"le": fmt.Sprint(b.GetUpperBound())}
				for k, v := range labels {
					bl[k] = v
				}
				s.samples[name+"_bucket"] = append(s.samples[name+"_bucket"], bl)
			}
			s.samples[name+"_bucket"] = append(s.samples[name+"_bucket"], map[string]string{"le": "+Inf"})
		}
	}
	return s
}

// value returns the sum of a family's counter or gauge samples whose
// labels include match.
func (s *scrape) value(name string, match map[string]string) float64 {
	var v float64
	for _, m := range s.families[name].GetMetric() {
		ok := true
		for _, l := range m.GetLabel() {
			if want, has := match[l.GetName()]; has && want != l.GetValue() {
				ok = false
			}
		}
		if ok {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

var (
	mixedOnce   sync.Once
	mixedScrape *scrape
	mixedErr    error
)

// scrapeAfterMixedTraffic runs an agent once per test binary, sends it
// mixed traffic and returns its /metrics.
func scrapeAfterMixedTraffic(t *testing.T) *scrape {
	t.Helper()
	mixedOnce.Do(func() { mixedScrape, mixedErr = runMixedTraffic(t) })
	if mixedErr != nil {
		t.Fatal(mixedErr)
	}
	return mixedScrape
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runMixedTraffic: UDP and TCP, IPv4 and IPv6 clients on two listen
// addresses, several query types, cache misses then hits, NXDOMAIN,
// SERVFAIL from upstream, a malformed query, DO, and a stub domain whose
// only server never answers (marked down, probed, all-down).
func runMixedTraffic(t *testing.T) (*scrape, error) {
	zone := dnstest.Zone(300)
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		if strings.HasPrefix(strings.ToLower(r.Question[0].Name), "fail") {
			dnstest.Rcode(dns.RcodeServerFailure)(w, r)
			return
		}
		zone(w, r)
	})
	dead := dnstest.Start(t, dnstest.Drop)
	v4 := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	v6 := fmt.Sprintf("[::1]:%d", dnstest.FreePort(t))
	admin := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	args := []string{"--listen", v4 + "," + v6, "--upstream", up.Addr, "--stub-domain", "dead.example=" + dead.Addr,
		"--admin", admin, "--loop-check=false", "--lameduck=0s", "--prefetch=0"}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Build(cfg, Options{Log: log, Args: args})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	ask := func(addr, proto, name string, qtype uint16, do bool) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		if do {
			m.SetEdns0(1232, true)
		}
		// Long enough for the agent's SERVFAIL once the dead stub
		// domain's server has timed out twice.
		c := &dns.Client{Net: proto, Timeout: 8 * time.Second}
		r, _, err := c.Exchange(m, addr)
		return r, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := ask(v4, "udp", "ready.example.test.", dns.TypeA, false); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("agent not answering on %s", v4)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The dead stub domain: two failures mark its server down, then
	// every probe fails and every query finds all its servers down.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = ask(v4, "udp", fmt.Sprintf("h%d.dead.example.", i), dns.TypeA, false)
		}()
		time.Sleep(50 * time.Millisecond)
	}
	for _, addr := range []string{v4, v6} {
		for _, proto := range []string{"udp", "tcp"} {
			for round := range 2 { // the second round hits the cache
				for _, q := range []struct {
					name  string
					qtype uint16
				}{
					{"www.example.test.", dns.TypeA}, {"www.example.test.", dns.TypeAAAA}, {"example.test.", dns.TypeMX},
					{"example.test.", dns.TypeTXT}, {"nx1.example.test.", dns.TypeA}, {"www.example.test.", dns.TypeCAA},
					{"fail.example.test.", dns.TypeA}, {"1.2.0.192.in-addr.arpa.", dns.TypePTR},
				} {
					if _, err := ask(addr, proto, q.name, q.qtype, round == 1); err != nil {
						return nil, fmt.Errorf("%s %s %s: %w", addr, proto, q.name, err)
					}
				}
			}
		}
	}
	// A malformed query (two questions): FORMERR from the server itself.
	bad := new(dns.Msg)
	bad.Question = []dns.Question{{Name: "a.example.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "b.example.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	if r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(bad, v4); err != nil || r.Rcode != dns.RcodeFormatError {
		return nil, fmt.Errorf("two questions: %v %v", r, err)
	}
	wg.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for {
		var failures uint64
		for _, s := range a.fwd.Load().Servers() {
			failures += s.Stats().ProbeFailures
		}
		if failures > 0 && a.fwd.Load().AllDown() > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no failed probe or all-down exchange of the dead stub domain (probe failures %d, all down %d)", failures, a.fwd.Load().AllDown())
		}
		if a.fwd.Load().AllDown() == 0 {
			_, _ = ask(v4, "udp", "late.dead.example.", dns.TypeA, false)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseScrape(t, resp.Body), nil
}

// Every series the coredns-mixin queries is exported, with the labels
// the query uses.
func TestMixinSeriesExported(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	for _, q := range mixinQueries {
		samples := s.samples[q.name]
		if len(samples) == 0 {
			t.Errorf("%s (%s): not exported", q.name, q.where)
			continue
		}
		for _, l := range q.labels {
			found := false
			for _, smp := range samples {
				if _, ok := smp[l]; ok {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s (%s): no sample has label %q", q.name, q.where, l)
			}
		}
	}
}

// Every coredns_* family is exported after mixed traffic with exactly the
// label names CoreDNS 1.15 gives it, and there is no other.
func TestCoreDNSLabelNames(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	for name, want := range corednsLabels {
		mf, ok := s.families[name]
		if !ok {
			t.Errorf("%s not exported", name)
			continue
		}
		want = slices.Sorted(slices.Values(want))
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s has labels %v, CoreDNS's are %v", name, got, want)
				break
			}
		}
	}
	for name := range s.families {
		if _, ok := corednsLabels[name]; strings.HasPrefix(name, "coredns_") && !ok {
			t.Errorf("%s exported but not in the CoreDNS label table", name)
		}
	}
}

// The mixed traffic shows in the CoreDNS series the way CoreDNS would
// count it.
func TestCoreDNSSeriesValues(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	for _, c := range []struct {
		name  string
		match map[string]string
		min   float64
	}{
		{"coredns_dns_requests_total", map[string]string{"family": "2", "proto": "tcp", "type": "AAAA"}, 2},
		{"coredns_dns_requests_total", map[string]string{"family": "1", "type": "other", "zone": "."}, 4},
		{"coredns_dns_requests_total", map[string]string{"type": "PTR", "zone": "in-addr.arpa."}, 8},
		{"coredns_dns_requests_total", map[string]string{"zone": "dead.example."}, 1},
		{"coredns_dns_responses_total", map[string]string{"plugin": "cache", "rcode": "NXDOMAIN"}, 1},
		{"coredns_dns_responses_total", map[string]string{"plugin": "forward", "rcode": "SERVFAIL"}, 1},
		{"coredns_dns_responses_total", map[string]string{"plugin": "", "rcode": "FORMERR"}, 1},
		{"coredns_dns_do_requests_total", nil, 30},
		{"coredns_cache_hits_total", map[string]string{"type": "success"}, 10},
		{"coredns_cache_hits_total", map[string]string{"type": "denial"}, 1},
		{"coredns_cache_entries", map[string]string{"type": "denial"}, 1},
		{"coredns_forward_responses_total", map[string]string{"rcode": "NOERROR"}, 3},
		{"coredns_forward_healthcheck_failures_total", nil, 1},
		{"coredns_forward_healthcheck_broken_total", nil, 1},
	} {
		if v := s.value(c.name, c.match); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.match, v, c.min)
		}
	}
	servers := map[string]bool{}
	for _, l := range s.samples["coredns_dns_requests_total"] {
		servers[l["server"]] = true
	}
	if len(servers) != 2 {
		t.Errorf("server labels %v, want one per listen address", servers)
	}
}

// seriesName matches the series a PromQL expression of ours can name: the
// agent's (nodedns_, coredns_, and its process_ and go_ collectors') and
// those of other exporters the rules read (kube-state-metrics' kube_) and
// Prometheus's up. Label names and values never start so.
var seriesName = regexp.MustCompile(`\b(?:(?:nodedns|coredns|process|go|kube)_[a-zA-Z0-9_:]+|up)\b`)

// notOurs are series the dashboard or rules read that the agent does not
// export, with why.
var notOurs = map[string]string{
	"up": "made by Prometheus for every target",
	"kube_daemonset_status_number_unavailable": "kube-state-metrics",
	// Registered by the configuration reload machinery (cmd/nodedns) with
	// a result label; absent from an agent run without --config.
	"nodedns_config_reloads_total": "exported by agents run with --config",
	// Exported only with a cluster zone: integration/prometheus_test.go
	// checks it against a real API server.
	"nodedns_informer_objects": "exported with a cluster zone only",
	// Exported for each dnstap collector configured (a file key):
	// pkg/observe/metrics's TestMetricsHandler has them.
	"nodedns_dnstap_connected":        "exported with dnstap collectors only",
	"nodedns_dnstap_sent_total":       "exported with dnstap collectors only",
	"nodedns_dnstap_dropped_total":    "exported with dnstap collectors only",
	"nodedns_dnstap_lost_total":       "exported with dnstap collectors only",
	"nodedns_dnstap_reconnects_total": "exported with dnstap collectors only",
	"nodedns_dnstap_queued_messages":  "exported with dnstap collectors only",
	"nodedns_dnstap_queued_bytes":     "exported with dnstap collectors only",
	// Exported by a supervised serving process (this test's agent runs
	// in the test process): pkg/observe/metrics's
	// TestSupervisorCollector has them.
	"nodedns_supervisor_up":                                 "exported when supervised only",
	"nodedns_supervisor_serving_processes_started_total":    "exported when supervised only",
	"nodedns_supervisor_serving_processes_replaced_total":   "exported when supervised only",
	"nodedns_supervisor_serving_process_start_time_seconds": "exported when supervised only",
	"nodedns_supervisor_sockets_held":                       "exported when supervised only",
	"nodedns_supervisor_socket_releases_total":              "exported when supervised only",
	// Exported with dns64 configured, from its first translation on (as
	// CoreDNS's): pkg/observe/metrics's TestCoreDNSDNS64Translated and
	// integration's TestCoreDNSZonesDifferential have it.
	"coredns_dns64_requests_translated_total": "exported with dns64 only, once it translated",
}

// exprNames returns the series expr names, histogram suffixes folded into
// their family when the agent exports the family as a histogram.
func exprNames(s *scrape, expr string) []string {
	var out []string
	for _, n := range seriesName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			base, ok := strings.CutSuffix(n, suffix)
			if ok && s.families[base] != nil && s.families[base].GetType() == dto.MetricType_HISTOGRAM {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

func checkExprs(t *testing.T, s *scrape, what string, exprs map[string]string) {
	t.Helper()
	checked := 0
	for where, expr := range exprs {
		for _, n := range exprNames(s, expr) {
			if _, ok := notOurs[n]; ok {
				continue
			}
			checked++
			if _, ok := s.families[n]; !ok {
				t.Errorf("%s %s queries %s, which the agent does not export", what, where, n)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no series found in the %s's queries", what)
	}
}

// Every series the Grafana dashboard queries is exported.
func TestDashboardSeriesExported(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	b, err := os.ReadFile("../../deploy/grafana/nodedns.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs["variable "+v.Name] = v.Definition
		}
	}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("panel %q query %d", p.Title, i)] = tg.Expr
		}
	}
	checkExprs(t, s, "dashboard", exprs)
}

// Every series the alerting rules query is exported.
func TestRulesSeriesExported(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	b, err := os.ReadFile("../../deploy/prometheus/nodedns.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range f.Groups {
		for i, r := range g.Rules {
			exprs[fmt.Sprintf("alert %s (%d)", r.Alert, i)] = r.Expr
		}
	}
	checkExprs(t, s, "rules", exprs)
}

// docs/metrics.md lists every nodedns_ and coredns_ family the agent
// exports, and none it does not.
func TestMetricsReference(t *testing.T) {
	s := scrapeAfterMixedTraffic(t)
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:nodedns|coredns)_[a-z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		listed[m[1]] = true
	}
	for n := range s.families {
		if (strings.HasPrefix(n, "nodedns_") || strings.HasPrefix(n, "coredns_")) && !listed[n] {
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
	for n := range listed {
		if _, ok := s.families[n]; !ok {
			if _, known := notOurs[n]; !known {
				t.Errorf("docs/metrics.md lists %s, which the agent does not export", n)
			}
		}
	}
}
