package pods

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

func chassisNode(name, ip, chassis string) *corev1.Node {
	n := node(name, ip)
	n.Annotations = map[string]string{annotations.Chassis: chassis}
	return n
}

// launcher is a virt-launcher pod of vm created at second sec; target pods
// carry KubeVirt's migration label.
func launcher(ns, name, node, vm string, sec int64, target bool) *corev1.Pod {
	p := pod(ns, name, node, map[string]string{annotations.VirtualMachine: vm})
	p.CreationTimestamp = metav1.NewTime(time.Unix(1700000000+sec, 0))
	if target {
		p.Labels = map[string]string{annotations.KubeVirtMigrationJobUID: "job-" + name}
		p.Annotations[annotations.KubeVirtMigrationJobName] = "job-" + name
	}
	return p
}

func (f *fixture) options(t *testing.T, port string) map[string]string {
	t.Helper()
	o, err := f.NB.PortOptions(f.Ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestVirtualMachineKeepsItsAddressAcrossALiveMigration(t *testing.T) {
	src := launcher("default", "virt-launcher-vm1-aaaaa", "n1", "vm1", 0, false)
	f := start(t, []runtime.Object{chassisNode("n1", "192.168.0.11", "ch-1"), chassisNode("n2", "192.168.0.12", "ch-2"), src})
	ps := f.awaitPod(t, "default/"+src.Name, allocated)
	if ps.Annotations[annotations.VirtualMachine] != "vm1" {
		t.Fatalf("source pod annotations %v", ps.Annotations)
	}
	port, ok, err := f.NB.GetPort(f.Ctx, "vm1.default")
	if err != nil || !ok || port.IPs[0].String() != ps.Annotations[annotations.IPAddress] || port.MAC != ps.Annotations[annotations.MACAddress] {
		t.Fatalf("VM port vm1.default: %+v %v %v; pod annotations %v", port, ok, err, ps.Annotations)
	}
	if ovnnb.OwnerOf(port.ExternalIDs) != ovnnb.VMPortOwner("default", "vm1") || port.ExternalIDs[ovnnb.KeyPod] != "default/vm1" {
		t.Fatalf("VM port external_ids %v", port.ExternalIDs)
	}
	if _, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", src.Name)); ok {
		t.Fatal("the launcher pod got a port of its own")
	}
	if o := f.options(t, "vm1.default"); o[ovnnb.OptRequestedChassis] != "" {
		t.Fatalf("a VM that never migrated has requested-chassis: %v", o)
	}

	// The migration's target on n2: same address, MAC and port, bound to both chassis.
	dst := launcher("default", "virt-launcher-vm1-bbbbb", "n2", "vm1", 60, true)
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, dst, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pd := f.awaitPod(t, "default/"+dst.Name, allocated)
	for _, k := range []string{annotations.IPAddress, annotations.MACAddress, annotations.LogicalSwitch, annotations.VirtualMachine} {
		if pd.Annotations[k] != ps.Annotations[k] {
			t.Fatalf("target %s = %q, source's %q", k, pd.Annotations[k], ps.Annotations[k])
		}
	}
	if o := f.options(t, "vm1.default"); o[ovnnb.OptRequestedChassis] != "ch-1,ch-2" || o[ovnnb.OptActivationStrategy] != "rarp" {
		t.Fatalf("port options during the migration %v, want requested-chassis=ch-1,ch-2 activation-strategy=rarp", o)
	}

	// Source gone: the target's chassis alone, no strategy, address kept.
	if err := f.Kube.CoreV1().Pods("default").Delete(f.Ctx, src.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The target's sync after the source went asks for the VM's IP object
	// once the options are written.
	f.ips.until(t, "requested-chassis=ch-2 without activation-strategy after the source went", func() bool {
		o := f.options(t, "vm1.default")
		return o[ovnnb.OptRequestedChassis] == "ch-2" && o[ovnnb.OptActivationStrategy] == ""
	})
	if a, held := f.Net.IPAM.Lookup(ovnnet.VMOwner("default", "vm1")); !held || a.IPString() != ps.Annotations[annotations.IPAddress] {
		t.Fatalf("VM address after the source went: %+v %v", a, held)
	}
	// Its egress left with it: the address is in n2's node set, not n1's.
	sets, err := f.NB.AddressSets(f.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, set := range sets {
		in := slices.Contains(set.Addresses, ps.Annotations[annotations.IPAddress])
		found = found || set.Name == ovnnet.NodeAddressSet("n2")
		if (set.Name == ovnnet.NodeAddressSet("n1") && in) || (set.Name == ovnnet.NodeAddressSet("n2") && !in) {
			t.Fatalf("address set %s %v after the VM moved to n2", set.Name, set.Addresses)
		}
	}
	if !found {
		t.Fatalf("no egress set of n2 among %d sets", len(sets))
	}

	// Last pod gone: address and port released.
	if err := f.Kube.CoreV1().Pods("default").Delete(f.Ctx, dst.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ips.until(t, "the VM's address released", func() bool {
		_, held := f.Net.IPAM.Lookup(ovnnet.VMOwner("default", "vm1"))
		return !held
	})
	if _, ok, _ := f.NB.GetPort(f.Ctx, "vm1.default"); ok {
		t.Fatal("the VM's port outlived its last pod")
	}
}

func TestVirtualMachineNamesAreHeldPerNamespace(t *testing.T) {
	src := launcher("default", "virt-launcher-vm1-aaaaa", "n1", "vm1", 0, false)
	thief := launcher("tenant", "thief", "n1", "default/vm1", 10, true)
	own := launcher("tenant", "virt-launcher-vm1-ccccc", "n2", "vm1", 20, false)
	f := start(t, []runtime.Object{chassisNode("n1", "192.168.0.11", "ch-1"), chassisNode("n2", "192.168.0.12", "ch-2"),
		namespace("tenant", nil, nil), src, thief, own})
	ps := f.awaitPod(t, "default/"+src.Name, allocated)
	ev := f.awaitEventWith(t, "Warning VirtualMachineNotInNamespace", "default/vm1", "tenant")
	if !strings.Contains(ev, "own namespace") {
		t.Fatalf("event %q", ev)
	}
	// Its own VM of that name is another VM, with another address.
	po := f.awaitPod(t, "tenant/"+own.Name, allocated)
	if po.Annotations[annotations.IPAddress] == ps.Annotations[annotations.IPAddress] {
		t.Fatalf("tenant's vm1 got default's vm1 address %s", po.Annotations[annotations.IPAddress])
	}
	if p, _ := f.Kube.CoreV1().Pods("tenant").Get(f.Ctx, "thief", metav1.GetOptions{}); p.Annotations[annotations.Allocated] != "" {
		t.Fatalf("refused pod annotated %v", p.Annotations)
	}
	// A second pod of the VM that is no migration target, and a pod of the VM's name, get nothing.
	second := launcher("default", "virt-launcher-vm1-ddddd", "n2", "vm1", 30, false)
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitEventWith(t, "Warning VirtualMachineBusy", src.Name, annotations.KubeVirtMigrationJobUID)
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, pod("default", "vm1", "n1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitEventWith(t, "Warning PortNameCollision", "vm1.default")
	if port, ok, _ := f.NB.GetPort(f.Ctx, "vm1.default"); !ok || ovnnb.OwnerOf(port.ExternalIDs) != ovnnb.VMPortOwner("default", "vm1") ||
		port.IPs[0].String() != ps.Annotations[annotations.IPAddress] {
		t.Fatalf("VM port after the collisions: %+v %v", port, ok)
	}
}

// underlayOnly is the Subnets of one underlay Subnet "ul" on provider network "phys".
type underlayOnly struct{ Subnets }

func (underlayOnly) Underlay(name string) (ovnnet.Underlay, bool) {
	return ovnnet.Underlay{Provider: "phys", VlanID: 10}, name == "ul"
}

func TestMigrationTargetOnANodeWithoutTheSubnetIsRefused(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ready := node("n1", "192.168.0.11")
	ready.Labels = map[string]string{"phys" + providernet.ReadyLabel: "true"}
	for _, n := range []*corev1.Node{ready, node("n2", "192.168.0.12")} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{cfg: Config{Subnets: underlayOnly{}}, nodes: corelisters.NewNodeLister(idx)}
	if msg := r.targetOffNetwork("ul", "n1", "vm1"); msg != "" {
		t.Fatalf("n1 has the network: %q", msg)
	}
	msg := r.targetOffNetwork("ul", "n2", "vm1")
	for _, want := range []string{`"vm1"`, "n2", `"ul"`, "phys.provider-network.kubernetes.io/ready", "stays on its source"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal %q lacks %q", msg, want)
		}
	}
	if msg := r.targetOffNetwork("ovn-default", "n2", "vm1"); msg != "" {
		t.Fatalf("an overlay Subnet reaches every node: %q", msg)
	}
}
