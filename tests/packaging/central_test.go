package packaging

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/packaging/build"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The central's systemd unit: systemd 219 only, the role on the command
// line, its own runtime directory (systemd removes a unit's
// RuntimeDirectory when it stops: /run/ovn belongs to ovnhost.service).
func TestCentralUnit(t *testing.T) {
	unit := readRepo(t, "systemd/ovnhost-central.service")
	if bad := check219(unit); len(bad) > 0 {
		t.Fatalf("systemd/ovnhost-central.service would lose settings on CentOS 7.9:\n%s", strings.Join(bad, "\n"))
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil || testenv.Strict() {
		testenv.RequireCommands(t, "systemd-analyze")
		if out, err := verifyUnit(t, unit, testenv.Binary(t, "ovnhost")); err != nil {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
	v := unitValues(t, unit)
	if v["Service.Type"][0] != "notify" || !strings.Contains(v["Service.ExecStart"][0], "run --role=central") {
		t.Errorf("Type=%v ExecStart=%v", v["Service.Type"], v["Service.ExecStart"])
	}
	for _, d := range v["Service.RuntimeDirectory"] {
		for _, name := range strings.Fields(d) {
			if name == "ovn" || name == "openvswitch" || name == "ovnhost" {
				t.Errorf("RuntimeDirectory=%s is ovnhost.service's: stopping the central would delete it", name)
			}
		}
	}
	env, extra := sysconfigEnv(readRepo(t, "systemd/ovnhost-central.sysconfig"))
	env = append(env, "OVN_DB_IPS=10.0.0.1,10.0.0.2,10.0.0.3")
	cfg, err := config.Load(append([]string{"--role=central"}, strings.Fields(extra)...), env, nilWriter{})
	if err != nil {
		t.Fatalf("ovnhost rejects the central's sysconfig:\n%v", err)
	}
	node := readRepo(t, "systemd/ovnhost.sysconfig")
	if !cfg.IsCentral() || cfg.HealthAddr == "127.0.0.1:10665" || strings.Contains(node, "OVN_RUNDIR=/run/ovnhost-central") {
		t.Errorf("the central shares the node's health address or run directory: %s %s", cfg.HealthAddr, cfg.Paths.OVNRunDir)
	}
	if cfg.Paths.OVNRunDir != "/run/ovnhost-central" {
		t.Errorf("OVN run dir %s, want /run/ovnhost-central (the unit's RuntimeDirectory)", cfg.Paths.OVNRunDir)
	}
	// Without OVN_DB_IPS the role is refused before anything starts.
	if _, err := config.Load([]string{"--role=central"}, nil, nilWriter{}); err == nil || !strings.Contains(err.Error(), "role=central needs") {
		t.Errorf("role=central without OVN_DB_IPS: %v", err)
	}
}

type nilWriter struct{}

func (nilWriter) Write(p []byte) (int, error) { return len(p), nil }

// The Talos service of the central: the machinery's strict decoding and
// Validate, the role in its arguments, and an environment ovnhost accepts.
func TestCentralTalosService(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "talos-extension", "ovnhost-central.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := decodeService(data, true)
	if err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatalf("services.Spec.Validate: %v", err)
	}
	if spec.Name != "ovnhost-central" || strings.Join(spec.Container.Args, " ") != "run --role=central" {
		t.Errorf("name %q args %v", spec.Name, spec.Container.Args)
	}
	env := append(append([]string{}, spec.Container.Environment...), "OVN_DB_IPS=10.0.0.1,10.0.0.2,10.0.0.3")
	if err := loadConfig(env, spec.Container.Args[1:]); err != nil {
		t.Errorf("ovnhost rejects the service: %v", err)
	}
	mounts := map[string]string{}
	for _, m := range spec.Container.Mounts {
		mounts[m.Destination] = m.Source
	}
	if mounts["/var/lib/ovn"] != "/var/lib/ovn" || mounts["/run/ovn"] == "/run/ovn" || mounts["/tmp"] == "" {
		t.Errorf("mounts %v: state in /var/lib/ovn, its own run directory, a writable /tmp", mounts)
	}
}

// The central's manifest, added to the base as a kustomize component, is
// accepted by a real API server (server-side dry run, strict validation).
func TestCentralManifestServerDryRun(t *testing.T) {
	srv := kubeapi.Start(t)
	k := kube{t: t, bin: kubectl(t), kubeconfig: srv.Kubeconfig}
	overlay := t.TempDir()
	root := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes")
	rel := func(p string) string {
		r, err := filepath.Rel(overlay, filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel("base") + "\ncomponents:\n  - " + rel("central") + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := k.must("", "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	if !strings.Contains(rendered, "name: ovnhost-central") || !strings.Contains(rendered, "- --role=central") {
		t.Fatalf("the overlay does not render the central:\n%.2000s", rendered)
	}
	k.must("", "apply", "-f", filepath.Join(root, "base", "namespace.yaml"))
	if out, err := k.run(rendered, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
		t.Fatalf("the API server rejects the central:\n%s", out)
	}
	bad := strings.Replace(rendered, "maxUnavailable: 1\n      maxSurge: 0", "maxUnavailable: 1\n      maxSurg: 0", 1)
	if bad == rendered {
		bad = strings.Replace(rendered, "topologyKey: kubernetes.io/hostname", "topologyKee: kubernetes.io/hostname", 1)
	}
	if bad == rendered {
		t.Fatal("could not break the manifest")
	}
	if out, err := k.run(bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil {
		t.Errorf("the API server accepted a misspelled field:\n%s", out)
	}
}

// The extension image carries the central's service beside the node's: its
// definition as in the repository, and its root file system as hard links
// to the node service's bundle (the same files, not a second copy).
func TestTalosExtensionCarriesTheCentral(t *testing.T) {
	dir := unpackTalos(t)
	got, err := os.ReadFile(filepath.Join(dir, build.TalosCentralServiceFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != readRepo(t, "talos-extension/ovnhost-central.yaml") {
		t.Error("central service file in the image differs from talos-extension/ovnhost-central.yaml")
	}
	spec, err := decodeService(got, true)
	if err != nil || spec.Name != build.TalosCentralServiceName {
		t.Fatalf("service %q: %v; Talos looks for its rootfs at /usr/local/lib/containers/<name>", spec.Name, err)
	}
	node := filepath.Join(dir, build.TalosServiceRootfs, spec.Container.Entrypoint)
	central := filepath.Join(dir, build.TalosCentralServiceRootfs, spec.Container.Entrypoint)
	a, err1 := os.Stat(node)
	b, err2 := os.Stat(central)
	if err1 != nil || err2 != nil || b.Mode().Perm()&0o111 == 0 {
		t.Fatalf("entrypoint %s in the central's rootfs: %v %v", spec.Container.Entrypoint, err1, err2)
	}
	if !os.SameFile(a, b) {
		t.Error("the central's rootfs is a copy, not hard links to the node's bundle")
	}
	for _, m := range spec.Container.Mounts {
		if _, err := os.Lstat(filepath.Join(dir, build.TalosCentralServiceRootfs, m.Destination)); err != nil && !strings.HasPrefix(m.Destination, "/run/") {
			t.Errorf("mount point %s missing from the central's read-only rootfs", m.Destination)
		}
	}
	// Uncompressed, the layer holds the bundle's bytes once.
	var packed, bundle int64
	layerEntries(t, talosFile(t), func(h *tar.Header, _ io.Reader) { packed += h.Size })
	_ = filepath.Walk(bundleDir(t), func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			bundle += info.Size()
		}
		return nil
	})
	if packed > bundle+bundle/20 {
		t.Errorf("the layer packs %d bytes for a %d-byte bundle: the second rootfs is not shared", packed, bundle)
	}
}

// The central's machine-config patch applies to a control-plane machine
// config and validates with Talos's own loader; its environment is one
// ovnhost accepts for the central's service.
func TestTalosCentralConfigPatch(t *testing.T) {
	patch := []byte(readRepo(t, "talos-extension/central-config-patch.yaml"))
	in, err := generate.NewInput("ovnhost-test", "https://192.0.2.1:6443", "1.34.1", generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	p, err := configpatcher.LoadPatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	prov, err := configloader.NewFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Validate(runtimeMode{}); err != nil {
		t.Fatalf("Talos rejects the patched config: %v", err)
	}
	var env []string
	for _, doc := range prov.Documents() {
		if esc, ok := doc.(interface {
			Name() string
			Environment() []string
		}); ok && esc.Name() == "ovnhost-central" {
			env = esc.Environment()
		}
	}
	if len(env) == 0 {
		t.Fatal("no ExtensionServiceConfig ovnhost-central with an environment in the patched config")
	}
	svc, err := decodeService([]byte(readRepo(t, "talos-extension/ovnhost-central.yaml")), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadConfig(append(append([]string{}, svc.Container.Environment...), env...), svc.Container.Args[1:]); err != nil {
		t.Errorf("ovnhost rejects the central's Talos environment: %v", err)
	}
}

// The central's Deployment against the daemon: its arguments and
// environment (with the ConfigMap, OVN_DB_IPS filled in) pass ovnhost's
// loader as role=central, the probes hit the health address it is told to
// serve, which is not the node DaemonSet's on the same host, the run
// directory on the host is not the node's, and the members are spread one
// per node on the host network with the four OVN ports.
func TestCentralDeploymentMatchesDaemon(t *testing.T) {
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/central/deployment-central.yaml")), &d); err != nil {
		t.Fatalf("deployment-central.yaml: %v", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/base/config.yaml")), &cm); err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/base/daemonset-node.yaml")), &ds); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if !spec.HostNetwork || d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("hostNetwork %v replicas %v", spec.HostNetwork, d.Spec.Replicas)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || len(spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Error("members are not kept one per node")
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Error("a rollout must not start a fourth member on an occupied node (maxSurge 0)")
	}
	c := spec.Containers[0]
	env := []string{}
	for k, v := range cm.Data {
		if k == "OVN_DB_IPS" {
			v = "10.0.0.1,10.0.0.2,10.0.0.3"
		}
		env = append(env, k+"="+v)
	}
	health := ""
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "spec.nodeName":
				v = "cp1"
			case "status.podIP":
				v = "10.0.0.1"
			}
		}
		if e.Name == "OVNHOST_HEALTH_ADDR" {
			health = v
		}
		env = append(env, e.Name+"="+v)
	}
	cfg, err := config.Load(c.Args[1:], env, nilWriter{})
	if err != nil {
		t.Fatalf("ovnhost rejects the Deployment: %v", err)
	}
	if !cfg.IsCentral() || cfg.Central.IP != "10.0.0.1" {
		t.Errorf("role %s, central-ip %q", cfg.Role, cfg.Central.IP)
	}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "OVNHOST_HEALTH_ADDR" && e.Value == health {
			t.Errorf("the central and the node DaemonSet both serve health on %s (host network)", health)
		}
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host+":"+p.HTTPGet.Port.String() != health {
			t.Errorf("%s probe does not hit %s", name, health)
		}
	}
	ports := map[int32]bool{}
	for _, p := range c.Ports {
		ports[p.ContainerPort] = true
	}
	for _, p := range []int32{6641, 6642, 6643, 6644} {
		if !ports[p] {
			t.Errorf("port %d not declared", p)
		}
	}
	nodeRun := ""
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/run/ovn" {
			nodeRun = v.Name
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/run/ovn" && nodeRun != "" {
			t.Error("the central shares the node's /run/ovn on the host")
		}
	}
}
