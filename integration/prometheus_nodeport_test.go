//go:build integration

package integration

// Prometheus scrapes the agent the way deploy/daemonset.yaml exposes it
// (metrics for the network, query names and client addresses only for
// the pod): in a "node" network namespace the agent runs with
// --admin=[<node IP>]:9253, the argument kubelet makes of
// --admin=[$(HOST_IP)]:9253 on an IPv4 node (brackets and all); Prometheus
// runs in a second namespace, another host joined to the node by a veth
// pair, and scrapes the node's address at port 9253. From there /metrics,
// /health and /ready answer, /stats (query names and client addresses)
// does not, and no query name appears in the metrics; on the pod's unix
// socket /stats still works.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestPrometheusScrapesNodePort(t *testing.T) {
	promBin := needTool(t, "prometheus")
	needTool(t, "dig")
	node, other := newNetNS(t, "node"), newNetNS(t, "prom")
	const nodeIP = "169.254.53.1"
	vethPair(t,
		node, "eth0", []netip.Prefix{netip.MustParsePrefix(nodeIP + "/30")},
		other, "eth0", []netip.Prefix{netip.MustParsePrefix("169.254.53.2/30")})

	var up *dnstest.Server
	if err := node.Do(func() error {
		var err error
		up, err = dnstest.Listen("127.0.0.1:0", dnstest.Zone(300))
		return err
	}); err != nil {
		t.Fatalf("upstream in the node namespace: %v", err)
	}
	t.Cleanup(up.Close)

	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	agent := node.Start(t, "nodedns", nodednsBin, "serve", "--listen", "127.0.0.1:53", "--upstream", up.Addr,
		"--admin", "["+nodeIP+"]:9253", "--admin-socket", sock, "--loop-check=false", "--lameduck", "0s")

	// HTTP from the other host: sockets made in its namespace.
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := other.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(url string) (int, string, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	base := "http://" + nodeIP + ":9253"
	dnstest.Eventually(t, 30*time.Second, "the agent ready on the node's address", func() error {
		if agent.Exited() {
			t.Fatalf("agent exited:\n%s", agent.Output())
		}
		code, body, err := get(base + "/ready")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/ready %d: %s", code, body)
		}
		return nil
	})

	// A tenant's query, whose name must not leave the node.
	const secret = "tenant-secret-7f3a.example.org"
	if out, err := node.Run("dig", "@127.0.0.1", "+short", "+tries=1", "+time=2", secret, "A"); err != nil || !strings.Contains(out, "192.0.2.1") {
		t.Fatalf("query through the agent: %v %s", err, out)
	}

	code, body, err := get(base + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics from another host: %d %v", code, err)
	}
	for _, want := range []string{"nodedns_build_info", "coredns_dns_requests_total", `server="dns://127.0.0.1:53"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics on the node's address lacks %s", want)
		}
	}
	if strings.Contains(body, "tenant-secret") {
		t.Errorf("/metrics names a query")
	}
	if code, _, err := get(base + "/health"); err != nil || code != http.StatusOK {
		t.Errorf("/health from another host: %d %v", code, err)
	}
	if code, body, err := get(base + "/stats"); err != nil || code == http.StatusOK || strings.Contains(body, "tenant-secret") {
		t.Errorf("/stats from another host: %d %v (want it refused)\n%.300s", code, err, body)
	}
	if out, err := node.Run(nodednsBin, "stats", "--socket", sock); err != nil {
		t.Errorf("nodedns stats on the admin socket: %v\n%s", err, out)
	}
	if !strings.Contains(agent.Output(), "/stats (top client addresses and query names) only on loopback and the admin socket") {
		t.Errorf("the agent does not say where /stats is served:\n%s", agent.Output())
	}

	// Prometheus on the other host scrapes the node's port.
	rules, err := filepath.Abs("../deploy/prometheus/nodedns.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: nodedns
    static_configs:
      - targets: [%q]
        labels: {node: node-a}
`, rules, nodeIP+":9253")
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	const web = "127.0.0.1:9090" // the other namespace's own loopback
	prom := other.Start(t, "prometheus", promBin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web,
		"--storage.tsdb.retention.time=1h")
	api := promAPI{base: "http://" + web, hc: hc}
	dnstest.Eventually(t, 60*time.Second, "Prometheus scraping "+nodeIP+":9253", func() error {
		if prom.Exited() {
			t.Fatalf("prometheus exited:\n%s", prom.Output())
		}
		var targets struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				ScrapeURL string `json:"scrapeUrl"`
			} `json:"activeTargets"`
		}
		if err := api.get("/api/v1/targets", nil, &targets); err != nil {
			return err
		}
		for _, tg := range targets.ActiveTargets {
			if tg.ScrapeURL == base+"/metrics" && tg.Health == "up" {
				return nil
			}
		}
		return fmt.Errorf("targets: %+v", targets.ActiveTargets)
	})
	dnstest.Eventually(t, 30*time.Second, "the agent's series in Prometheus", func() error {
		for _, q := range []string{
			`up{job="nodedns",instance="` + nodeIP + `:9253"} == 1`,
			`sum(coredns_dns_requests_total{job="nodedns",node="node-a"}) >= 1`,
			`nodedns_build_info{job="nodedns"}`,
		} {
			v, err := api.query(q)
			if err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			if len(v.Result) == 0 {
				return fmt.Errorf("%s: no result", q)
			}
		}
		return nil
	})
	v, err := api.query(`count({job="nodedns", __name__=~".+"})`)
	if err != nil || len(v.Result) == 0 {
		t.Fatalf("counting series: %v", err)
	}
	n, _ := strconv.ParseFloat(fmt.Sprint(v.Result[0].Value[1]), 64)
	t.Logf("Prometheus in another namespace scrapes %s/metrics: %v series", base, n)
}
