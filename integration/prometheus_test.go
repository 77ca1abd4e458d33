//go:build integration

package integration

// Prometheus (Debian's prometheus package) scrapes a real agent (issue
// 16): the agent serves the cluster zone from a real kube-apiserver and
// forwards to an upstream on loopback; Prometheus, on its own loopback
// port with its own storage, scrapes the agent's admin endpoint every
// second and evaluates the shipped alert rules. The test waits until the
// target is up and coredns_dns_requests_total has samples, then runs
// every query of the shipped dashboard and checks each rule evaluates
// without error. Both processes stop when the test ends.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// promAPI is a Prometheus HTTP API client.
type promAPI struct {
	base string
	hc   *http.Client
}

// get decodes data of the API's answer to path?query.
func (p promAPI) get(path string, query url.Values, data any) error {
	u := p.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	resp, err := p.hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %s: %w", u, body, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", u, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

type promVector struct {
	Result []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
	} `json:"result"`
}

func (p promAPI) query(expr string) (promVector, error) {
	var v promVector
	err := p.get("/api/v1/query", url.Values{"query": {expr}}, &v)
	return v, err
}

func TestPrometheusScrapesAgent(t *testing.T) {
	promBin := needTool(t, "prometheus")
	cp := controlPlane(t)
	up := dnstest.Start(t, dnstest.Zone(300))

	// The agent, with its admin endpoint where Prometheus scrapes it.
	dnsPort, adminPort := agentPorts(t)
	addr := "127.0.0.1:" + strconv.Itoa(dnsPort)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	agentLog := filepath.Join(t.TempDir(), "nodedns.log")
	agent, err := startCPProc("nodedns", agentLog, nodednsBin, "serve", "--listen", addr, "--upstream", up.Addr,
		"--kubeconfig", cp.Kubeconfig, "--cluster-domain", "cluster.local", "--admin", admin,
		"--loop-check=false", "--lameduck", "0s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nodedns log (last 40 lines):\n%s", tailFile(agentLog, 40))
		}
	})
	hc := &http.Client{Timeout: 3 * time.Second}
	if err := waitHTTP(agent, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("agent not ready: %v\n%s", err, tailFile(agentLog, 40))
	}

	// Prometheus on a loopback port of its own, scraping every second and
	// evaluating the shipped rules.
	dir := t.TempDir()
	rules, err := filepath.Abs("../deploy/prometheus/nodedns.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	web := "127.0.0.1:" + strconv.Itoa(ports[0])
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
`, rules, admin)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	promLog := filepath.Join(dir, "prometheus.log")
	prom, err := startCPProc("prometheus", promLog, promBin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web,
		"--storage.tsdb.retention.time=1h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("prometheus log (last 40 lines):\n%s", tailFile(promLog, 40))
		}
	})
	if err := waitHTTP(prom, hc, "http://"+web+"/-/ready", "", 60*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("prometheus not ready: %v\n%s", err, tailFile(promLog, 40))
	}
	api := promAPI{base: "http://" + web, hc: hc}

	// Mixed traffic while Prometheus scrapes (so that rates are not 0):
	// cluster names (an answer and a name error), external names (a miss,
	// then hits), over UDP and TCP, a round every 100 ms until the test
	// ends.
	traffic := func() error {
		for _, q := range []struct {
			name  string
			qtype uint16
		}{
			{"kubernetes.default.svc.cluster.local.", dns.TypeA}, {"nope.default.svc.cluster.local.", dns.TypeA},
			{"www.example.test.", dns.TypeA}, {"www.example.test.", dns.TypeAAAA}, {"nx.example.test.", dns.TypeA},
		} {
			for _, network := range []string{"udp", "tcp"} {
				if _, err := dnstest.Query(addr, network, q.name, q.qtype); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := traffic(); err != nil {
		t.Fatal(err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := traffic(); err != nil {
					t.Errorf("traffic: %v", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-stopped })

	// The target is up and the CoreDNS-compatible series are in
	// Prometheus, with two scrapes at least (so that rates exist).
	dnstest.Eventually(t, 60*time.Second, "the nodedns target to be up", func() error {
		var targets struct {
			ActiveTargets []struct {
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
				ScrapeURL  string `json:"scrapeUrl"`
				ScrapePool string `json:"scrapePool"`
			} `json:"activeTargets"`
		}
		if err := api.get("/api/v1/targets", nil, &targets); err != nil {
			return err
		}
		for _, tg := range targets.ActiveTargets {
			if tg.ScrapePool == "nodedns" && tg.Health == "up" {
				return nil
			}
		}
		return fmt.Errorf("targets: %+v", targets.ActiveTargets)
	})
	dnstest.Eventually(t, 60*time.Second, "coredns_dns_requests_total samples", func() error {
		v, err := api.query(`count_over_time(coredns_dns_requests_total{job="nodedns",zone="cluster.local.",type="A"}[1m])`)
		if err != nil {
			return err
		}
		if len(v.Result) == 0 {
			return fmt.Errorf("no sample yet")
		}
		if n, _ := strconv.ParseFloat(fmt.Sprint(v.Result[0].Value[1]), 64); n < 3 {
			return fmt.Errorf("%v samples, want 3 scrapes", n)
		}
		return nil
	})
	for _, q := range []string{
		`sum(coredns_dns_requests_total{zone="cluster.local.",type="A"}) >= 12`,
		`sum(coredns_dns_responses_total{plugin="kubernetes",rcode="NXDOMAIN"}) >= 6`,
		`sum(coredns_dns_responses_total{plugin="cache"}) >= 1`,
		`sum(coredns_forward_requests_total) >= 1`,
		`nodedns_informer_synced == 1`,
		`nodedns_informer_objects{kind="services"} >= 1`,
		`histogram_quantile(0.99, sum by (le) (rate(coredns_dns_request_duration_seconds_bucket[1m]))) > 0`,
	} {
		v, err := api.query(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
		} else if len(v.Result) == 0 {
			t.Errorf("%s: no result", q)
		}
	}

	// Every query of the shipped dashboard runs and returns data.
	b, err := os.ReadFile("../deploy/grafana/nodedns.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$namespace", ".*")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			q := vars.Replace(tg.Expr)
			v, err := api.query(q)
			switch {
			case err != nil:
				t.Errorf("dashboard panel %q: %v", p.Title, err)
			case len(v.Result) == 0:
				t.Errorf("dashboard panel %q: no data for %s", p.Title, q)
			}
		}
	}

	// Every rule was evaluated, without error.
	dnstest.Eventually(t, 30*time.Second, "the rules to be evaluated", func() error {
		var rs struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := api.get("/api/v1/rules", nil, &rs); err != nil {
			return err
		}
		n := 0
		for _, g := range rs.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					return fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no rules loaded")
		}
		return nil
	})
	// A healthy agent fires nothing.
	var alerts struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := api.get("/api/v1/alerts", nil, &alerts); err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts.Alerts {
		t.Errorf("alert %s %s on a healthy agent", a.Labels["alertname"], a.State)
	}
}
