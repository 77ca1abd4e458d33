package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	daemonSetFile      = "daemonset.yaml"
	podMonitorFile     = "podmonitor.yaml"
	rulesFile          = "prometheus/nodedns.rules.yaml"
	prometheusRuleFile = "prometheus/nodedns-rules.yaml"
	rulesTestFile      = "prometheus/nodedns.rules.test.yaml"
	dashboardFile      = "grafana/nodedns.json"
	runbooksFile       = "../docs/runbooks.md"
)

// strict decodes a YAML file into v, failing on unknown fields: a
// misspelt field of a custom resource would otherwise be dropped silently
// by the API server's pruning.
func strict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// daemonSet returns the DaemonSet of deploy/daemonset.yaml.
func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(daemonSetFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%s: no DaemonSet: %v", daemonSetFile, err)
		}
		if raw["kind"] != "DaemonSet" {
			continue
		}
		j, _ := json.Marshal(raw)
		ds := new(appsv1.DaemonSet)
		if err := json.Unmarshal(j, ds); err != nil {
			t.Fatal(err)
		}
		return ds
	}
}

// The PodMonitor is a valid Prometheus Operator object that selects the
// DaemonSet's pods by the port they name metrics, and sets the job and
// node labels the rules and dashboard use.
func TestPodMonitor(t *testing.T) {
	var pm monitoringv1.PodMonitor
	strict(t, podMonitorFile, &pm)
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Fatalf("%s: %s %s", podMonitorFile, pm.APIVersion, pm.Kind)
	}
	ds := daemonSet(t)
	if pm.Namespace != ds.Namespace || !slices.Contains(pm.Spec.NamespaceSelector.MatchNames, ds.Namespace) {
		t.Errorf("PodMonitor in %q selecting namespaces %v; the DaemonSet is in %q", pm.Namespace, pm.Spec.NamespaceSelector.MatchNames, ds.Namespace)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s; the pods are labelled %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if got := ds.Spec.Template.Labels[pm.Spec.JobLabel]; got != "nodedns" {
		t.Errorf("jobLabel %q gives job %q, want nodedns (the rules select job=\"nodedns\")", pm.Spec.JobLabel, got)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || *ep.Port != "metrics" || ep.Path != "/metrics" {
		t.Errorf("endpoint port %v path %q, want the port named metrics and /metrics", ep.Port, ep.Path)
	}
	named := false
	for _, c := range slices.Concat(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers) {
		for _, p := range c.Ports {
			named = named || (p.Name == "metrics" && p.ContainerPort == 9253)
		}
	}
	if !named {
		t.Error("the DaemonSet's pods name no port metrics (9253)")
	}
	node := false
	for _, r := range ep.RelabelConfigs {
		node = node || (slices.Contains(r.SourceLabels, "__meta_kubernetes_pod_node_name") && r.TargetLabel == "node")
	}
	if !node {
		t.Error("no relabeling gives the node label")
	}
}

// The PrometheusRule carries exactly the groups of the plain rules file.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	var pr monitoringv1.PrometheusRule
	strict(t, prometheusRuleFile, &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	var plain monitoringv1.PrometheusRuleSpec
	strict(t, rulesFile, &plain)
	if !reflect.DeepEqual(pr.Spec, plain) {
		a, _ := yaml.Marshal(pr.Spec)
		b, _ := yaml.Marshal(plain)
		t.Errorf("%s and %s differ:\n%s\n---\n%s", prometheusRuleFile, rulesFile, a, b)
	}
	if len(plain.Groups) == 0 || len(plain.Groups[0].Rules) == 0 {
		t.Fatal("no rules")
	}
}

// needTool returns the path of name; missing, the test fails, whatever the
// environment (scripts/deps.sh installs Debian's prometheus package, which
// has promtool): a skip would let a run that checked nothing end "ok".
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("prerequisite missing: %s on PATH (scripts/deps.sh installs it)", name)
	}
	return p
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// promtool validates every rule file (the PrometheusRule's groups
// extracted) and runs the alerts' unit tests.
func TestRulesWithPromtool(t *testing.T) {
	promtool := needTool(t, "promtool")
	run(t, ".", promtool, "check", "rules", rulesFile)
	var pr monitoringv1.PrometheusRule
	strict(t, prometheusRuleFile, &pr)
	spec, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	extracted := filepath.Join(t.TempDir(), "prometheusrule-spec.yaml")
	if err := os.WriteFile(extracted, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ".", promtool, "check", "rules", extracted)
	run(t, filepath.Dir(rulesTestFile), promtool, "test", "rules", filepath.Base(rulesTestFile))
}

// Every alert has a unit test in which it fires.
func TestEveryAlertTested(t *testing.T) {
	var plain monitoringv1.PrometheusRuleSpec
	strict(t, rulesFile, &plain)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: a test where it fires %v, one where it stays quiet %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// Every alert links to its own section of docs/runbooks.md, which says
// what it means, its impact, how to diagnose and how to mitigate; every
// section belongs to an alert.
func TestRunbooks(t *testing.T) {
	var plain monitoringv1.PrometheusRuleSpec
	strict(t, rulesFile, &plain)
	doc, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^## `).Split(string(doc), -1)
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		sections[strings.TrimSpace(title)] = body
	}
	alerts := map[string]bool{}
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			want := "https://github.com/nodedns/nodedns/blob/main/docs/runbooks.md#" + strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			for _, k := range []string{"summary", "description"} {
				if r.Annotations[k] == "" {
					t.Errorf("%s: no %s", r.Alert, k)
				}
			}
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			body, ok := sections[r.Alert]
			if !ok {
				t.Errorf("%s: no section in %s", r.Alert, runbooksFile)
				continue
			}
			for _, h := range []string{"**Meaning.**", "**Impact.**", "**Diagnosis.**", "**Mitigation.**"} {
				if !strings.Contains(body, h) {
					t.Errorf("%s: runbook section lacks %s", r.Alert, h)
				}
			}
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("runbook section %q is no alert's", s)
		}
	}
}

// dashboard is the part of Grafana's JSON model the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// The dashboard is well formed: a datasource variable every panel uses, a
// per-node variable, unique panel ids, panels that do not overlap, and a
// query in every panel.
func TestDashboardModel(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("template variables %v: want datasource and instance (the node)", vars)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the dashboard", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s ignores the node variable", p.Title, tg.Expr)
			}
		}
	}
}

// Every dashboard query is valid PromQL once Grafana's variables are
// substituted (promtool parses them as recording rules).
func TestDashboardQueriesParse(t *testing.T) {
	promtool := needTool(t, "promtool")
	d := readDashboard(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(tg.Expr)
			q, _ := json.Marshal(expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d:%s\n        expr: %s\n", p.ID, strings.ToLower(tg.RefID), q)
			n++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ".", promtool, "check", "rules", path)
	if n < 30 {
		t.Errorf("only %d queries", n)
	}
}
