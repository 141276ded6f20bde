package packaging

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestDaemonSetMatchesDaemon checks the node DaemonSet against the daemon
// and the other homes: its environment (with the ConfigMap's keys) passes
// the daemon's own configuration loader, the host paths keep their names,
// the capabilities are the systemd unit's, and the probes hit the health
// address the daemon is told to serve.
func TestDaemonSetMatchesDaemon(t *testing.T) {
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/base/daemonset-node.yaml")), &ds); err != nil {
		t.Fatalf("daemonset-node.yaml: %v", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "packaging/kubernetes/base/config.yaml")), &cm); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("the node daemon must use the host network")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	var env []string
	for k, v := range cm.Data {
		env = append(env, k+"="+v)
	}
	health := ""
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			v = "node1"
		}
		if e.Name == "OVNHOST_HEALTH_ADDR" {
			health = v
		}
		env = append(env, e.Name+"="+v)
	}
	if err := loadConfig(env, c.Args[1:]); err != nil {
		t.Errorf("ovnhost rejects the DaemonSet's environment: %v", err)
	}
	if strings.Join(c.Args, " ") != "run" {
		t.Errorf("args %v, want [run] (the image's entrypoint is ovnhost)", c.Args)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if addr := p.HTTPGet.Host + ":" + p.HTTPGet.Port.String(); addr != health {
			t.Errorf("%s probe on %s, daemon serves on %s", name, addr, health)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe path %s", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe path %s", c.LivenessProbe.HTTPGet.Path)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("CPU limit set: it throttles the data plane under churn")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if hp, ok := vols[m.Name]; ok && hp != m.MountPath {
			t.Errorf("volume %s: host %s mounted at %s; keep the host's paths", m.Name, vols[m.Name], m.MountPath)
		}
		mounts[m.MountPath] = true
		if m.MountPath == "/var/run/netns" && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Error("/var/run/netns needs HostToContainer propagation to see pod namespaces created later")
		}
	}
	for _, d := range []string{"/var/lib/openvswitch", "/var/lib/ovn", "/run/openvswitch", "/run/ovn", "/run/ovnhost", "/var/run/netns", "/dev/net/tun", "/opt/cni/bin", "/etc/cni/net.d", "/tmp"} {
		if !mounts[d] {
			t.Errorf("no mount for %s", d)
		}
	}
	var caps []string
	if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
		for _, cp := range c.SecurityContext.Capabilities.Add {
			caps = append(caps, "CAP_"+string(cp))
		}
	}
	sort.Strings(caps)
	unit := unitValues(t, readRepo(t, "systemd/ovnhost.service"))
	want := strings.Fields(strings.Join(unit["Service.CapabilityBoundingSet"], " "))
	sort.Strings(want)
	if strings.Join(caps, " ") != strings.Join(want, " ") {
		t.Errorf("DaemonSet capabilities %v differ from the systemd unit's %v", caps, want)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the node container's root is writable; the daemon writes only to its mounts")
	}
	if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
		t.Error("the node container is privileged")
	}
	// The image's read-only root has a directory for each mount.
	dir := bundleDir(t)
	for d := range mounts {
		if strings.HasPrefix(d, "/dev/") || underAnotherMount(d, mounts) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil && !strings.HasPrefix(d, "/run/") && !strings.HasPrefix(d, "/var/run/") {
			t.Errorf("mount point %s missing from the image", d)
		}
	}
}

// underAnotherMount: d is inside another mount (the runtime makes its
// mount point there, e.g. the SSL Secret at /var/lib/ovn/pki).
func underAnotherMount(d string, mounts map[string]bool) bool {
	for m := range mounts {
		if m != d && strings.HasPrefix(d, m+"/") {
			return true
		}
	}
	return false
}
