package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestUnderlayCRDsAdmitKubeOVNObjects (issue 24): the shipped ProviderNetwork
// and Vlan CRDs admit the objects of Kube-OVN's underlay guide and a Vlan as
// Kube-OVN 1.8 stored it (controller/apis/kubeovn/v1/testdata/
// kubeovn-underlay.yaml, the file the unit tests validate), read back with
// their fields; and refuse at admission what no node could act on, naming the
// field and the fix: a name whose bridge br-<name> would not fit 15 bytes, an
// interface name Linux cannot have, a change of defaultInterface, a Vlan
// without a provider or outside 0..4095.
func TestUnderlayCRDsAdmitKubeOVNObjects(t *testing.T) {
	srv := kubeapi.Start(t)
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	srv.InstallCRD(t, filepath.Join(base, "crd-provider-networks.yaml"))
	srv.InstallCRD(t, filepath.Join(base, "crd-vlans.yaml"))
	dc := dynamic.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "controller", "apis", "kubeovn", "v1", "testdata", "kubeovn-underlay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gvr := map[string]func() dynamic.NamespaceableResourceInterface{
		"ProviderNetwork": func() dynamic.NamespaceableResourceInterface { return dc.Resource(kubeovnv1.ProviderNetworkGVR) },
		"Vlan":            func() dynamic.NamespaceableResourceInterface { return dc.Resource(kubeovnv1.VlanGVR) },
	}
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: o}
		if _, err := gvr[u.GetKind()]().Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("Kube-OVN's %s %s refused: %v", u.GetKind(), u.GetName(), err)
		}
	}
	got, err := dc.Resource(kubeovnv1.ProviderNetworkGVR).Get(ctx, "physnet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pn, p := kubeovnv1.ValidateProviderNetwork(got)
	if p != nil || pn.Spec.DefaultInterface != "bond0" || !pn.Spec.ExchangeLinkName || len(pn.Spec.VlanInterfaces) != 1 || pn.Spec.NodeSelector == nil {
		t.Fatalf("physnet read back: %+v %+v", pn, p)
	}
	if nic, ok, _ := pn.NodeInterface("n1", map[string]string{"network.example.com/underlay": "true"}); !ok || nic != "bond0" {
		t.Fatalf("physnet on a labelled node: %q %v", nic, ok)
	}
	old, err := dc.Resource(kubeovnv1.VlanGVR).Get(ctx, "vlan-stored-1-8", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, p := kubeovnv1.ValidateVlan(old); p != nil || v.Spec.Tag() != 200 || v.Spec.ProviderName() != "physnet" {
		t.Fatalf("Vlan stored by Kube-OVN 1.8 read back: %+v %+v", v, p)
	}

	pnObj := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	vlanObj := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Vlan",
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	refused := []struct {
		obj  *unstructured.Unstructured
		want string
	}{
		{pnObj("provider-net1", map[string]any{"defaultInterface": "eth1"}), "at most 12 characters"},
		{pnObj("net2", map[string]any{"defaultInterface": "eth1/0"}), "spec.defaultInterface"},
		{pnObj("net2", map[string]any{"defaultInterface": "enp0s31f6-uplink0"}), "spec.defaultInterface"},
		{pnObj("net2", map[string]any{}), "defaultInterface"},
		{vlanObj("v1", map[string]any{"id": int64(10)}), "spec.provider must name the ProviderNetwork"},
		{vlanObj("v1", map[string]any{"id": int64(4096), "provider": "net1"}), "spec.id"},
	}
	for _, r := range refused {
		_, err := gvr[r.obj.GetKind()]().Create(ctx, r.obj, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s %s %v: got %v, want a refusal naming %q", r.obj.GetKind(), r.obj.GetName(), r.obj.Object["spec"], err, r.want)
		}
	}

	net1, err := dc.Resource(kubeovnv1.ProviderNetworkGVR).Get(ctx, "net1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(net1.Object, "eth3", "spec", "defaultInterface"); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(kubeovnv1.ProviderNetworkGVR).Update(ctx, net1, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "defaultInterface is immutable") {
		t.Errorf("changing net1's defaultInterface: got %v, want a refusal saying it is immutable", err)
	}

	// A VLAN no Subnet uses may be re-tagged; one in use (status.subnets,
	// as the controller writes it) keeps its tag and provider, also when
	// the change goes through the deprecated fields.
	vlans := dc.Resource(kubeovnv1.VlanGVR)
	retag := func(name string, field string, value any) error {
		v, err := vlans.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(v.Object, value, "spec", field); err != nil {
			t.Fatal(err)
		}
		_, err = vlans.Update(ctx, v, metav1.UpdateOptions{})
		return err
	}
	if err := retag("vlan100", "id", int64(101)); err != nil {
		t.Fatalf("re-tagging a VLAN no Subnet uses: %v", err)
	}
	for _, name := range []string{"vlan100", "vlan-stored-1-8"} {
		v, err := vlans.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedStringSlice(v.Object, []string{"underlay1"}, "status", "subnets"); err != nil {
			t.Fatal(err)
		}
		if _, err := vlans.UpdateStatus(ctx, v, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const inUse = "cannot change while Subnets use it"
	for _, c := range []struct {
		name, field string
		value       any
	}{
		{"vlan100", "id", int64(102)},
		{"vlan100", "provider", "net1"},
		{"vlan-stored-1-8", "vlanId", int64(201)},
		{"vlan-stored-1-8", "providerInterfaceName", "net1"},
		{"vlan-stored-1-8", "provider", "net1"},
	} {
		if err := retag(c.name, c.field, c.value); err == nil || !strings.Contains(err.Error(), inUse) {
			t.Errorf("Vlan %s in use, spec.%s -> %v: got %v, want a refusal saying %q", c.name, c.field, c.value, err, inUse)
		}
	}
	// Writing the same values through the new field names is no change.
	if err := retag("vlan-stored-1-8", "provider", "physnet"); err != nil {
		t.Errorf("Vlan in use, spec.provider set to the provider it already has: %v", err)
	}
}

// TestControllerKeepsUnderlayStatusWithItsRBAC (issue 24): the controller,
// run as its ServiceAccount with the shipped rbac-controller.yaml, keeps the
// status of Kube-OVN's underlay objects: a Vlan lists the Subnets that name
// it (and so keeps its tag: the CRD's rule bites on the status the
// controller wrote), a second Vlan with a taken tag is in conflict, a tag
// 4095 and a ProviderNetwork with a node under two NICs are refused with
// the fix; the underlay Subnet itself is still refused (not wired yet).
func TestControllerKeepsUnderlayStatusWithItsRBAC(t *testing.T) {
	e := newEnv(t)
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	e.srv.InstallCRD(t, filepath.Join(base, "crd-provider-networks.yaml"))
	e.srv.InstallCRD(t, filepath.Join(base, "crd-vlans.yaml"))
	e.applyYAML(filepath.Join(base, "namespace.yaml"))
	e.applyYAML(filepath.Join(base, "rbac-controller.yaml"))
	e.applyYAML(filepath.Join(testenv.RepoRoot(), "controller", "apis", "kubeovn", "v1", "testdata", "kubeovn-underlay.yaml"))
	ctx := context.Background()
	watch := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		inf := dynamicinformer.NewFilteredDynamicInformer(e.dc, gvr, "", 0, cache.Indexers{}, nil).Informer()
		_, _ = inf.AddEventHandler(e.changes.Informer())
		ictx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go inf.Run(ictx.Done())
		return inf
	}
	vlans, pns := watch(kubeovnv1.VlanGVR), watch(kubeovnv1.ProviderNetworkGVR)
	create := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := e.dc.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(kubeovnv1.VlanGVR, "Vlan", "vlan100b", map[string]any{"id": int64(100), "provider": "physnet"})
	create(kubeovnv1.VlanGVR, "Vlan", "vlan4095", map[string]any{"id": int64(4095), "provider": "net1"})
	create(kubeovnv1.ProviderNetworkGVR, "ProviderNetwork", "twice", map[string]any{"defaultInterface": "eth1",
		"customInterfaces": []any{map[string]any{"interface": "eth2", "nodes": []any{"n1"}}, map[string]any{"interface": "eth3", "nodes": []any{"n1"}}}})
	create(kubeovnv1.SubnetGVR, "Subnet", "underlay1", map[string]any{"cidrBlock": "172.17.0.0/16", "gateway": "172.17.0.1", "vlan": "vlan100", "protocol": "IPv4"})

	sa := "system:serviceaccount:ovnhost:ovnhost-controller"
	e.waitAllowed(sa, "list", "kubeovn.io", "vlans", "")
	e.waitAllowed(sa, "create", "coordination.k8s.io", "leases", "ovnhost")
	kc := e.kubeconfigAs(sa)
	p := e.startControllerProcess("--kubeconfig", kc, "--lease-namespace", "ovnhost")
	p.waitReady(t, 60*time.Second)

	status := func(inf cache.SharedIndexInformer, name string) map[string]any {
		o, ok, _ := inf.GetStore().GetByKey(name)
		if !ok {
			return nil
		}
		st, _, _ := unstructured.NestedMap(o.(*unstructured.Unstructured).Object, "status")
		return st
	}
	condition := func(st map[string]any, node, typ string) map[string]any {
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == typ && (node == "-" || m["node"] == node || (node == "" && m["node"] == nil)) {
				return m
			}
		}
		return nil
	}
	e.waitFor(60*time.Second, "Vlan and ProviderNetwork status written by the controller", func() (bool, string) {
		v100, v100b, v4095, twice := status(vlans, "vlan100"), status(vlans, "vlan100b"), status(vlans, "vlan4095"), status(pns, "twice")
		subs, _ := v100["subnets"].([]any)
		r100, r100b, r4095 := condition(v100, "-", "Ready"), condition(v100b, "-", "Ready"), condition(v4095, "-", "Validated")
		tw, physnet := condition(twice, "", "Validated"), status(pns, "physnet")
		ok := len(subs) == 1 && subs[0] == "underlay1" && r100 != nil && r100["status"] == "True" &&
			v100b["conflict"] == true && r100b != nil && strings.Contains(fmt.Sprint(r100b["message"]), `Vlan "vlan100" already carries tag 100`) &&
			r4095 != nil && r4095["status"] == "False" && strings.Contains(fmt.Sprint(r4095["message"]), "4095 is reserved") &&
			tw != nil && tw["status"] == "False" && strings.Contains(fmt.Sprint(tw["message"]), `node "n1" is in spec.customInterfaces[0] (eth2) and [1] (eth3)`) &&
			fmt.Sprint(physnet["vlans"]) == "[vlan-stored-1-8 vlan100 vlan100b]"
		// The underlay Subnet is programmed on its Vlan.
		sc := cond(e.subnet("underlay1"), kubeovnv1.Validated)
		ok = ok && sc != nil && sc.Status == "True"
		return ok, fmt.Sprintf("vlan100 %v; vlan100b %v; vlan4095 %v; twice %v; physnet %v; underlay1 Validated %+v", v100, v100b, v4095, twice, physnet, sc)
	})
	v, err := e.dc.Resource(kubeovnv1.VlanGVR).Get(ctx, "vlan100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(v.Object, int64(300), "spec", "id")
	if _, err := e.dc.Resource(kubeovnv1.VlanGVR).Update(ctx, v, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "cannot change while Subnets use it") {
		t.Errorf("re-tagging vlan100 while underlay1 uses it: got %v, want a refusal", err)
	}
	for _, l := range p.Output() {
		if strings.Contains(l, "forbidden") {
			t.Errorf("controller hit a permission error: %s", l)
		}
	}
}
