package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/tests/harness/gotool"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func helm(t *testing.T) string { return gotool.Helm(t) }

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "packaging", "helm", "ovnhost") }

func runOut(t *testing.T, stdin string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// objects parses a multi-document YAML stream into kind/namespace/name keys.
func objects(t *testing.T, stream string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, d := range strings.Split("\n"+stream, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, d)
		}
		if o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		out[o["kind"].(string)+"/"+ns+"/"+md["name"].(string)] = o
	}
	return out
}

func keys(m map[string]map[string]any) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// TestHelmChart: helm lint passes, the chart's default rendering is object
// for object what the kustomize base renders, the API server accepts it
// (server-side dry-run), and with monitoring enabled it carries the rules
// and dashboards of packaging/monitoring unchanged.
func TestHelmChart(t *testing.T) {
	h := helm(t)
	kc := kubeapi.Kubectl(t)
	runOut(t, "", h, "lint", "--strict", chartDir())
	runOut(t, "", h, "lint", "--strict", "--set", "monitoring.enabled=true,pinger.external={1.1.1.1}", chartDir())

	rendered := runOut(t, "", h, "template", "ovnhost", chartDir(), "--include-crds")
	kust := runOut(t, "", kc, "kustomize", filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base"))
	ho, ko := objects(t, rendered), objects(t, kust)
	if !reflect.DeepEqual(keys(ho), keys(ko)) {
		t.Fatalf("helm renders %v\nkustomize renders %v", keys(ho), keys(ko))
	}
	for k, want := range ko {
		if !reflect.DeepEqual(ho[k], want) {
			a, _ := yaml.Marshal(ho[k])
			b, _ := yaml.Marshal(want)
			t.Errorf("%s differs between the chart and the base:\n--- helm\n%s\n--- kustomize\n%s", k, a, b)
		}
	}

	srv := kubeapi.Start(t)
	k := kube{t: t, bin: kc, kubeconfig: srv.Kubeconfig}
	k.must("", "apply", "-f", filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "namespace.yaml"))
	if out, err := k.run(rendered, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
		t.Fatalf("the API server rejects the chart's objects:\n%s", out)
	}
	custom := runOut(t, "", h, "template", "ovnhost", chartDir(), "--include-crds",
		"--set", "ovnDBIPs=10.0.0.1\\,10.0.0.2,image.repository=registry.example/ovnhost,image.tag=v1.2.3,pinger.enabled=false,controller.replicas=3",
		"--set", "serviceExternalIPs.allowedCIDRs={198.51.100.0/24,2001:db8:1::/64}")
	for _, want := range []string{`OVN_DB_IPS: "10.0.0.1,10.0.0.2"`, "image: registry.example/ovnhost:v1.2.3", "replicas: 3", `cidrs: "198.51.100.0/24,2001:db8:1::/64"`} {
		if !strings.Contains(custom, want) {
			t.Errorf("values not applied: no %q", want)
		}
	}
	if strings.Contains(custom, "ovnhost-pinger") {
		t.Error("pinger.enabled=false still renders the pinger")
	}
	if off := runOut(t, "", h, "template", "ovnhost", chartDir(), "--set", "serviceExternalIPs.policy=false"); strings.Contains(off, "ovnhost-service-external-ips") {
		t.Error("serviceExternalIPs.policy=false still renders the external-IP admission policy")
	}
	if out, err := k.run(custom, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
		t.Fatalf("the API server rejects the chart with custom values:\n%s", out)
	}

	// Monitoring: the same rules and dashboards as packaging/monitoring.
	withMon := objects(t, runOut(t, "", h, "template", "ovnhost", chartDir(), "--set", "monitoring.enabled=true"))
	for _, f := range []string{"rules/ovnhost.rules.yaml", "dashboards/ovnhost-node.json", "dashboards/ovnhost-cluster.json"} {
		a, _ := os.ReadFile(filepath.Join(testenv.RepoRoot(), "packaging", "monitoring", f))
		b, _ := os.ReadFile(filepath.Join(chartDir(), "files", filepath.Base(f)))
		if !bytes.Equal(a, b) {
			t.Errorf("packaging/helm/ovnhost/files/%s differs from packaging/monitoring/%s: copy it", filepath.Base(f), f)
		}
	}
	pr := withMon["PrometheusRule/ovnhost/ovnhost"]
	var rules map[string]any
	raw, _ := os.ReadFile(filepath.Join(testenv.RepoRoot(), "packaging", "monitoring", "rules", "ovnhost.rules.yaml"))
	_ = yaml.Unmarshal(raw, &rules)
	if pr == nil || !reflect.DeepEqual(pr["spec"], any(rules)) {
		t.Errorf("the chart's PrometheusRule does not hold the rules file")
	}
	cm := withMon["ConfigMap/ovnhost/ovnhost-dashboards"]
	node, _ := os.ReadFile(filepath.Join(testenv.RepoRoot(), "packaging", "monitoring", "dashboards", "ovnhost-node.json"))
	if cm == nil || strings.TrimSpace(cm["data"].(map[string]any)["ovnhost-node.json"].(string)) != strings.TrimSpace(string(node)) {
		t.Errorf("the chart's dashboards ConfigMap does not hold ovnhost-node.json")
	}
	for _, kind := range []string{"ServiceMonitor/ovnhost/ovnhost-node", "PodMonitor/ovnhost/ovnhost-pinger", "PodMonitor/ovnhost/ovnhost-controller"} {
		if withMon[kind] == nil {
			t.Errorf("monitoring.enabled renders no %s", kind)
		}
	}
}
