// Package monitoring tests what packaging/monitoring ships: the rules load
// into real Prometheus code (promtool check rules, and promtool test rules
// with alert expectations), the PrometheusRule holds the same rules, every
// dashboard panel and rule reads only metrics ovnhost exports, and the
// kustomize overlay renders with its selectors matching the workloads.
package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/tests/harness/debtool"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/promcheck"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func mon(p ...string) string {
	return filepath.Join(append([]string{testenv.RepoRoot(), "packaging", "monitoring"}, p...)...)
}

// promtool is Debian's (package prometheus, 2.42 on bookworm), fetched
// without installing the package: building it from the module proxy costs
// many minutes of CPU on a cold machine, for the same rule checks.
func promtool(t *testing.T) string {
	return debtool.Program(t, "prometheus", "usr/bin/promtool")
}

func TestRulesPassPromtool(t *testing.T) {
	pt := promtool(t)
	out, err := exec.Command(pt, "check", "rules", mon("rules", "ovnhost.rules.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(pt, "test", "rules", "ovnhost.rules.test.yaml")
	cmd.Dir = mon("rules")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// The checks can fail: a rule with a broken expression, and a test
	// whose expected alert does not fire.
	dir := t.TempDir()
	rules, _ := os.ReadFile(mon("rules", "ovnhost.rules.yaml"))
	bad := strings.Replace(string(rules), "increase(ovnhost_child_restarts_total[10m]) > 3", "increase(ovnhost_child_restarts_total[10m] > 3", 1)
	_ = os.WriteFile(filepath.Join(dir, "ovnhost.rules.yaml"), []byte(bad), 0o644)
	if out, err := exec.Command(pt, "check", "rules", filepath.Join(dir, "ovnhost.rules.yaml")).CombinedOutput(); err == nil {
		t.Errorf("promtool accepted a broken expression:\n%s", out)
	}
	_ = os.WriteFile(filepath.Join(dir, "ovnhost.rules.yaml"), rules, 0o644)
	tests, _ := os.ReadFile(mon("rules", "ovnhost.rules.test.yaml"))
	wrong := strings.Replace(string(tests), "summary: \"20% of CNI requests fail on n1\"", "summary: \"1% of CNI requests fail on n1\"", 1)
	if wrong == string(tests) {
		t.Fatal("test file changed: update the mutation")
	}
	_ = os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(wrong), 0o644)
	cmd = exec.Command(pt, "test", "rules", "t.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("promtool test rules passed a wrong expectation:\n%s", out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert"`
			Record string `json:"record"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) (ruleFile, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(mon("rules", "ovnhost.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	var generic map[string]any
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatal(err)
	}
	_ = yaml.Unmarshal(raw, &generic)
	return rf, generic
}

func TestPrometheusRuleHoldsTheRuleFile(t *testing.T) {
	_, want := readRules(t)
	raw, err := os.ReadFile(mon("prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || !reflect.DeepEqual(pr.Spec, want) {
		t.Fatal("prometheusrule.yaml's spec differs from rules/ovnhost.rules.yaml: copy the groups of the rule file into spec")
	}
}

// TestDashboardsAndRulesReadExportedMetrics parses every panel query and
// rule expression and looks each metric name up among those ovnhost
// defines (and the rules record).
func TestDashboardsAndRulesReadExportedMetrics(t *testing.T) {
	defined, err := promcheck.DefinedNames(testenv.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"ovnhost_child_up", "ovnhost_cni_errors_total", "ovnhost_controller_subnet_ips", "ovnhost_pinger_rtt_seconds", "ovnhost_ovs_coverage_total"} {
		if !defined[must] {
			t.Fatalf("the source scan misses %s; found %v", must, defined)
		}
	}
	rf, _ := readRules(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				defined[r.Record] = true
			}
		}
	}
	check := func(where, expr string) {
		names := promcheck.MetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q (the parser lost it)", where, expr)
		}
		for _, n := range names {
			if !promcheck.Exported(n, defined) {
				t.Errorf("%s queries %s, which ovnhost does not export (%q)", where, n, expr)
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			check("rule "+r.Alert+r.Record, r.Expr)
		}
	}
	files, _ := filepath.Glob(mon("dashboards", "*.json"))
	if len(files) < 2 {
		t.Fatalf("dashboards: %v", files)
	}
	panels := 0
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		var d struct {
			UID    string `json:"uid"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil || d.UID == "" {
			t.Fatalf("%s: not a dashboard: %v", f, err)
		}
		for _, p := range d.Panels {
			panels++
			if len(p.Targets) == 0 {
				t.Errorf("%s panel %q has no query", filepath.Base(f), p.Title)
			}
			for _, q := range p.Targets {
				check(filepath.Base(f)+" panel "+p.Title, q.Expr)
			}
		}
	}
	if panels < 20 {
		t.Errorf("only %d panels", panels)
	}
	// The checker itself finds an unknown name.
	if names := promcheck.MetricNames(`histogram_quantile(0.99, sum by (le) (rate(ovnhost_no_such_seconds_bucket{instance=~"$instance"}[5m])))`); len(names) != 1 ||
		promcheck.Exported(names[0], defined) {
		t.Errorf("checker: %v", names)
	}
}

// TestMonitoringOverlayRenders renders packaging/monitoring with kubectl
// kustomize: the monitors select the workloads' labels and name their
// ports, the controller binds its metrics to :10660, the dashboards are in
// a ConfigMap for Grafana's sidecar.
func TestMonitoringOverlayRenders(t *testing.T) {
	kubectl := kubeapi.Kubectl(t)
	out, err := exec.Command(kubectl, "kustomize", mon()).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize packaging/monitoring: %v\n%s", err, out)
	}
	docs := strings.Split(string(out), "\n---\n")
	kinds := map[string]map[string]any{}
	for _, d := range docs {
		var o map[string]any
		if yaml.Unmarshal([]byte(d), &o) != nil || o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		kinds[o["kind"].(string)+"/"+md["name"].(string)] = o
	}
	for _, k := range []string{"ServiceMonitor/ovnhost-node", "PodMonitor/ovnhost-pinger", "PodMonitor/ovnhost-controller", "PrometheusRule/ovnhost",
		"Service/ovnhost-node-metrics", "ConfigMap/ovnhost-dashboards", "DaemonSet/ovnhost-node", "DaemonSet/ovnhost-pinger", "ClusterRoleBinding/ovnhost-metrics-reader-prometheus"} {
		if kinds[k] == nil {
			t.Errorf("rendered overlay has no %s", k)
		}
	}
	if !strings.Contains(string(out), "--health-addr=:10660") || strings.Contains(string(out), "--health-addr=127.0.0.1:10660") {
		t.Error("the overlay does not move the controller's metrics to :10660")
	}
	cm := kinds["ConfigMap/ovnhost-dashboards"]
	if cm != nil {
		labels := cm["metadata"].(map[string]any)["labels"].(map[string]any)
		data := cm["data"].(map[string]any)
		if labels["grafana_dashboard"] != "1" || data["ovnhost-node.json"] == nil || data["ovnhost-cluster.json"] == nil {
			t.Errorf("dashboards ConfigMap: labels %v, keys %v", labels, data)
		}
	}
	// Each monitor's port is a named port of the pods it selects.
	ports := func(k string) string {
		b, _ := json.Marshal(kinds[k])
		return string(b)
	}
	for mon, ds := range map[string]string{"ServiceMonitor/ovnhost-node": "DaemonSet/ovnhost-node", "PodMonitor/ovnhost-pinger": "DaemonSet/ovnhost-pinger", "PodMonitor/ovnhost-controller": "Deployment/ovnhost-controller"} {
		m, _ := json.Marshal(kinds[mon])
		want := map[string]string{"ServiceMonitor/ovnhost-node": `"name":"node-api"`, "PodMonitor/ovnhost-pinger": `"name":"metrics"`, "PodMonitor/ovnhost-controller": `"name":"metrics"`}[mon]
		if !strings.Contains(ports(ds), want) || !strings.Contains(string(m), "/metrics") {
			t.Errorf("%s scrapes a port %s does not name (%s)", mon, ds, want)
		}
	}
}
