package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// TestIPObjectsInKubeOVNShape (issue 13): every pod address and node join
// address has an ips.kubeovn.io object as Kube-OVN writes it (name
// <pod>.<ns> / node-<node>, labels ovn.kubernetes.io/subnet, node-name,
// <subnet>, ip_reserved=false; spec podName, namespace, subnet, nodeName,
// ipAddress, v4IpAddress, v6IpAddress, macAddress, ...); a deleted pod's goes
// with it, also when the pod is deleted while the controller is down; a
// reserved IP object (ip_reserved=true) and one of a virtual machine stay.
func TestIPObjectsInKubeOVNShape(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("dual", map[string]any{"cidrBlock": "10.72.0.0/24,fd00:10:72::/120", "protocol": "Dual"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []struct{ name, reserved, podType string }{{"reserved.default", "true", ""}, {"vm1.default", "false", "VirtualMachine"}} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "IP",
			"metadata": map[string]any{"name": keep.name, "labels": map[string]any{"ovn.kubernetes.io/ip_reserved": keep.reserved}},
			"spec":     map[string]any{"podName": strings.Split(keep.name, ".")[0], "namespace": "default", "subnet": "ovn-default", "ipAddress": "10.16.9.9", "podType": keep.podType}}}
		if _, err := e.dc.Resource(kubeovnv1.IPGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := e.startController()
	e.createPod("default", "web", "node-a", nil)
	e.createPod("default", "db", "node-a", map[string]string{annotations.LogicalSwitch: "dual"})
	ip := func(name string) (*unstructured.Unstructured, bool) {
		u, err := e.dc.Resource(kubeovnv1.IPGVR).Get(ctx, name, metav1.GetOptions{})
		return u, err == nil
	}
	check := func(name, podName, ns, subnet, node string, ann map[string]string) (bool, string) {
		u, ok := ip(name)
		if !ok {
			return false, "no IP " + name
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		var v4, v6 string
		for _, a := range strings.Split(ann[annotations.IPAddress], ",") {
			if strings.Contains(a, ":") {
				v6 = a
			} else {
				v4 = a
			}
		}
		l := u.GetLabels()
		got := fmt.Sprint(spec["podName"], spec["namespace"], spec["subnet"], spec["nodeName"], spec["ipAddress"], spec["v4IpAddress"], spec["v6IpAddress"], spec["macAddress"], spec["podType"],
			l["ovn.kubernetes.io/subnet"], l["ovn.kubernetes.io/node-name"], l["ovn.kubernetes.io/ip_reserved"], l[subnet])
		want := fmt.Sprint(podName, ns, subnet, node, ann[annotations.IPAddress], v4, v6, ann[annotations.MACAddress], "", subnet, node, "false", "")
		_, hasSubnetLabel := l[subnet]
		return got == want && hasSubnetLabel, got + " want " + want
	}
	e.waitFor(30*time.Second, "IP objects of web, db (dual stack) and node-a", func() (bool, string) {
		var bad []string
		for _, p := range []struct{ name, subnet string }{{"web", "ovn-default"}, {"db", "dual"}} {
			o, ok, _ := e.pods.GetStore().GetByKey("default/" + p.name)
			if !ok || !annotated(o.(*corev1.Pod)) {
				bad = append(bad, p.name+" not annotated")
				continue
			}
			if ok, why := check(p.name+".default", p.name, "default", p.subnet, "node-a", o.(*corev1.Pod).Annotations); !ok {
				bad = append(bad, why)
			}
		}
		n, _, _ := e.nodes.GetStore().GetByKey("node-a")
		if ok, why := check("node-node-a", "node-a", "", "join", "node-a", n.(*corev1.Node).Annotations); !ok {
			bad = append(bad, why)
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})

	// Deleted pod: its IP goes. Deleted while the controller is down: collected at start.
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "IP web.default deleted", func() (bool, string) {
		_, ok := ip("web.default")
		return !ok, "still there"
	})
	stop()
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.startController()
	e.waitWorking("default", "marker", "node-a")
	if _, ok := ip("db.default"); ok {
		t.Fatal("IP db.default of a pod deleted while the controller was down is still there")
	}
	// The marker's IP object follows its annotation (CI saw it a moment
	// after); one collected by mistake would never come back.
	e.waitFor(30*time.Second, "IP objects of the live pods and the node kept", func() (bool, string) {
		var missing []string
		for _, keep := range []string{"reserved.default", "vm1.default", "marker.default", "node-node-a"} {
			if _, ok := ip(keep); !ok {
				missing = append(missing, keep)
			}
		}
		return len(missing) == 0, "missing: " + strings.Join(missing, ", ")
	})
}
