package packaging

import (
	"context"
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestManifestsDefaultToSSL: the base's ConfigMap turns ENABLE_SSL on; the
// Secret ovnhost-ovn-tls that the Job makes is mounted where the node and
// the central read it (their ssl-dir, file names from the settings table)
// and where the controller does (--ovn-tls-dir, Kube-OVN's names); no pod
// mounts the CA's key; the Job and CronJob run `ovnhost certs` on it.
func TestManifestsDefaultToSSL(t *testing.T) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/base/config.yaml")), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["ENABLE_SSL"] != "true" {
		t.Fatalf("ovnhost-config ENABLE_SSL=%q, want \"true\"", cm.Data["ENABLE_SSL"])
	}
	env := []string{"NODE_NAME=n1", "OVN_DB_IPS=10.0.0.1"}
	for k, v := range cm.Data {
		if k != "OVN_DB_IPS" {
			env = append(env, k+"="+v)
		}
	}
	node, err := config.Load(nil, env, nilWriter{})
	if err != nil {
		t.Fatal(err)
	}
	central, err := config.Load([]string{"--role=central"}, []string{"NODE_NAME=n1", "OVN_DB_IPS=10.0.0.1"}, nilWriter{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.EnableSSL || !central.EnableSSL {
		t.Fatalf("SSL: node %v central %v", node.EnableSSL, central.EnableSSL)
	}
	wantFiles := map[string]string{"key": filepath.Base(node.SSLKey), "cert": filepath.Base(node.SSLCert), "cacert": filepath.Base(node.SSLCACert)}

	var ds appsv1.DaemonSet
	var dep, cen appsv1.Deployment
	for p, obj := range map[string]any{"packaging/kubernetes/base/daemonset-node.yaml": &ds, "packaging/kubernetes/base/deployment-controller.yaml": &dep, "packaging/kubernetes/central/deployment-central.yaml": &cen} {
		if err := yaml.UnmarshalStrict([]byte(readRepo(t, p)), obj); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	check := func(what string, spec corev1.PodSpec, dir string, files map[string]string) {
		t.Helper()
		var vol *corev1.Volume
		for i, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "ovnhost-ovn-tls" {
				vol = &spec.Volumes[i]
			}
		}
		if vol == nil {
			t.Errorf("%s: no volume of Secret ovnhost-ovn-tls", what)
			return
		}
		if vol.Secret.Optional != nil && *vol.Secret.Optional {
			t.Errorf("%s: the Secret is optional: the pod would start without certificates", what)
		}
		got := map[string]string{}
		for _, it := range vol.Secret.Items {
			got[it.Key] = it.Path
		}
		if len(got) != len(files) {
			t.Errorf("%s: Secret items %v, want %v (never cakey)", what, got, files)
		}
		for k, p := range files {
			if got[k] != p {
				t.Errorf("%s: Secret key %s at %q, want %q", what, k, got[k], p)
			}
		}
		mounted := false
		for _, m := range spec.Containers[0].VolumeMounts {
			if m.Name == vol.Name {
				mounted = m.MountPath == dir && m.ReadOnly
			}
		}
		if !mounted {
			t.Errorf("%s: the Secret is not mounted read-only at %s", what, dir)
		}
	}
	check("node DaemonSet", ds.Spec.Template.Spec, node.SSLDir, wantFiles)
	check("central", cen.Spec.Template.Spec, central.SSLDir, wantFiles)
	ctlDir := ""
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--ovn-tls-dir="); ok {
			ctlDir = v
		}
	}
	if ctlDir == "" {
		ctlDir = "/var/run/tls" // ovnhost-controller's default
	}
	check("controller", dep.Spec.Template.Spec, ctlDir, map[string]string{"key": "key", "cert": "cert", "cacert": "cacert"})

	// The Job and the CronJob: `ovnhost certs` on that Secret, host network.
	docs := strings.Split(readRepo(t, "packaging/kubernetes/base/certs.yaml"), "\n---\n")
	var job batchv1.Job
	var cron batchv1.CronJob
	for _, d := range docs {
		switch {
		case strings.Contains(d, "\nkind: Job\n"):
			if err := yaml.UnmarshalStrict([]byte(d), &job); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(d, "\nkind: CronJob\n"):
			if err := yaml.UnmarshalStrict([]byte(d), &cron); err != nil {
				t.Fatal(err)
			}
		}
	}
	for what, spec := range map[string]corev1.PodSpec{"Job": job.Spec.Template.Spec, "CronJob": cron.Spec.JobTemplate.Spec.Template.Spec} {
		if len(spec.Containers) != 1 || strings.Join(spec.Containers[0].Args, " ") != "certs --secret=ovnhost/ovnhost-ovn-tls" {
			t.Errorf("%s runs %v", what, spec.Containers)
		}
		if !spec.HostNetwork || spec.ServiceAccountName != "ovnhost-certs" {
			t.Errorf("%s: hostNetwork %v (it runs before pod networking), service account %q", what, spec.HostNetwork, spec.ServiceAccountName)
		}
	}
}

// TestHelmSSLValue: the chart's ssl value (default true) renders the same
// as the base (TestHelmChart compares every object); false renders no
// certificate Job, no Secret mounts and ENABLE_SSL "false".
func TestHelmSSLValue(t *testing.T) {
	h := helm(t)
	off := runOut(t, "", h, "template", "ovnhost", chartDir(), "--set", "ssl=false")
	for _, bad := range []string{"name: ovnhost-certs", "secretName: ovnhost-ovn-tls", "fsGroup"} {
		if strings.Contains(off, bad) {
			t.Errorf("ssl=false still renders %q", bad)
		}
	}
	if !strings.Contains(off, `ENABLE_SSL: "false"`) {
		t.Error(`ssl=false does not render ENABLE_SSL: "false"`)
	}
	on := runOut(t, "", h, "template", "ovnhost", chartDir())
	for _, want := range []string{`ENABLE_SSL: "true"`, "kind: Job", "kind: CronJob", "--secret=ovnhost/ovnhost-ovn-tls", "resourceNames: [ovnhost-ovn-tls]"} {
		if !strings.Contains(on, want) {
			t.Errorf("default rendering has no %q", want)
		}
	}
	runOut(t, "", h, "lint", "--strict", "--set", "ssl=false", chartDir())
}

// checkCertsJob runs what the Job ovnhost-certs runs, `ovnhost certs
// --secret=ovnhost/ovnhost-ovn-tls`, against the real API server as the
// Job's service account (impersonated: only the Role of certs.yaml): the
// first run creates the Secret, the second writes nothing, and the Secret
// holds Kube-OVN's keys. The manifests must be applied.
func checkCertsJob(t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = "system:serviceaccount:ovnhost:ovnhost-certs"
	}
	asSA := filepath.Join(t.TempDir(), "kubeconfig-ovnhost-certs")
	if err := clientcmd.WriteToFile(*cfg, asSA); err != nil {
		t.Fatal(err)
	}
	certs := func(args ...string) (string, error) {
		out, err := exec.Command(testenv.Binary(t, "ovnhost"), append([]string{"certs", "--kubeconfig=" + asSA}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := certs("--secret=ovnhost/ovnhost-ovn-tls"); err != nil || !strings.Contains(out, "created a CA") {
		t.Fatalf("first run as ovnhost-certs: %v\n%s", err, out)
	}
	if out, err := certs("--secret=ovnhost/ovnhost-ovn-tls"); err != nil || !strings.Contains(out, "nothing to do: certificate valid until") {
		t.Fatalf("second run as ovnhost-certs: %v\n%s", err, out)
	}
	// Another Secret it may create but not read back: refused, named.
	if out, err := certs("--secret=ovnhost/other"); err == nil || !strings.Contains(out, "Secret ovnhost/other") || !strings.Contains(out, "forbidden") {
		t.Fatalf("a Secret outside its Role: %v\n%s", err, out)
	}
	cs, err := kubernetes.NewForConfig(must(clientcmd.BuildConfigFromFlags("", kubeconfig)))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := cs.CoreV1().Secrets("ovnhost").Get(context.Background(), "ovnhost-ovn-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cacert", "cert", "key", "cakey"} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("Secret ovnhost-ovn-tls has no %s", k)
		}
	}
	if _, err := tls.X509KeyPair(sec.Data["cert"], sec.Data["key"]); err != nil {
		t.Errorf("cert and key: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
