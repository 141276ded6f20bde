package pods

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// nadStandIn is the NAD lister (controller/kube reads the real one from a
// dynamic informer, which client-go's fake dynamic client cannot serve
// for a CRD the fake does not know without its list kind: a map here).
type nadStandIn struct {
	mu   sync.Mutex
	cfgs map[string]string
}

func (n *nadStandIn) Config(ns, name string) (string, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.cfgs[ns+"/"+name]
	return c, ok, nil
}

func (n *nadStandIn) set(ns, name, cfg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfgs[ns+"/"+name] = cfg
}

func ovnNAD(provider string) string {
	return `{"cniVersion":"0.3.1","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":"` + provider + `"}`
}

var attachmentSubnets = []runtime.Object{
	ctltest.Subnet("att1", map[string]any{"cidrBlock": "172.20.0.0/24", "provider": "n1.default.ovn"}),
	ctltest.Subnet("att2", map[string]any{"cidrBlock": "172.21.0.0/24", "provider": "n2.default.ovn"}),
}

func withAttachments(p *corev1.Pod) bool {
	return allocated(p) && p.Annotations["n1.default.ovn.kubernetes.io/allocated"] == "true" && p.Annotations["n2.default.ovn.kubernetes.io/allocated"] == "true"
}

func TestPodGetsItsAttachmentNetworks(t *testing.T) {
	nads := &nadStandIn{cfgs: map[string]string{
		"default/n1": ovnNAD("n1.default.ovn"), "default/n2": ovnNAD("n2.default.ovn"),
		"default/mac": `{"type":"macvlan","master":"eth0","ipam":{"type":"host-local"}}`,
	}}
	f := setUpWith(t, nads, []runtime.Object{node("n1", "192.168.0.11"),
		pod("default", "web", "n1", map[string]string{annotations.NetworksAnnotation: "n1, mac, default/n2@eth5",
			"n2.default.ovn.kubernetes.io/ip_address": "172.21.0.50", "n2.default.ovn.kubernetes.io/mac_address": "0a:00:00:00:21:50"})},
		attachmentSubnets...)
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.run()
	p := f.awaitPod(t, "default/web", withAttachments)
	a := p.Annotations
	if a["n1.default.ovn.kubernetes.io/logical_switch"] != "att1" || a["n1.default.ovn.kubernetes.io/cidr"] != "172.20.0.0/24" ||
		a["n1.default.ovn.kubernetes.io/gateway"] != "172.20.0.1" || !strings.HasPrefix(a["n1.default.ovn.kubernetes.io/ip_address"], "172.20.0.") {
		t.Fatalf("n1 annotations: %v", a)
	}
	if a["n2.default.ovn.kubernetes.io/ip_address"] != "172.21.0.50" || a["n2.default.ovn.kubernetes.io/mac_address"] != "0a:00:00:00:21:50" ||
		a["n2.default.ovn.kubernetes.io/logical_switch"] != "att2" {
		t.Fatalf("n2 (static) annotations: %v", a)
	}
	if a[annotations.LogicalSwitch] != "ovn-default" {
		t.Fatalf("default network: %v", a)
	}
	for _, c := range []struct{ port, sw, ip string }{
		{"web.default.n1.default.ovn", "att1", a["n1.default.ovn.kubernetes.io/ip_address"]},
		{"web.default.n2.default.ovn", "att2", "172.21.0.50"},
	} {
		port, ok, err := f.NB.GetPort(f.Ctx, c.port)
		if err != nil || !ok || port.Switch != c.sw || len(port.IPs) != 1 || port.IPs[0].String() != c.ip ||
			ovnnb.OwnerOf(port.ExternalIDs) != ovnnb.PodPortOwner("default", "web") {
			t.Fatalf("port %s: %+v %v %v", c.port, port, ok, err)
		}
	}

	// Deleted: every attachment's port and address go.
	if err := f.Kube.CoreV1().Pods("default").Delete(f.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("the attachment ports deleted", func() bool {
		_, ok1, _ := f.NB.GetPort(f.Ctx, "web.default.n1.default.ovn")
		_, ok2, _ := f.NB.GetPort(f.Ctx, "web.default.n2.default.ovn")
		return !ok1 && !ok2
	})
	// Attachments go before the default address (releasePod).
	f.ips.until(t, "the deleted pod's address released", func() bool {
		_, held := f.Net.IPAM.Lookup(ovnnet.PodOwner("default", "web"))
		return !held
	})
	for _, pr := range []string{"n1.default.ovn", "n2.default.ovn"} {
		if a, held := f.Net.IPAM.Lookup(ovnnet.AttachmentOwner("default", "web", pr)); held {
			t.Fatalf("attachment %s still held: %+v", pr, a)
		}
	}
	// Another pod takes the static address the deleted one held.
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, pod("default", "web2", "n1", map[string]string{annotations.NetworksAnnotation: "n2",
		"n2.default.ovn.kubernetes.io/ip_address": "172.21.0.50"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = f.awaitPod(t, "default/web2", func(p *corev1.Pod) bool {
		return p != nil && p.Annotations["n2.default.ovn.kubernetes.io/allocated"] == "true"
	})
	if p.Annotations["n2.default.ovn.kubernetes.io/ip_address"] != "172.21.0.50" {
		t.Fatalf("web2: %v", p.Annotations)
	}
}

func TestAttachmentRefusalsFailThatPodOnly(t *testing.T) {
	nads := &nadStandIn{cfgs: map[string]string{"default/n1": ovnNAD("n1.default.ovn"), "default/orphan": ovnNAD("orphan.default.ovn")}}
	f := setUpWith(t, nads, []runtime.Object{node("n1", "192.168.0.11"),
		pod("default", "ok", "n1", map[string]string{annotations.NetworksAnnotation: "n1", "n1.default.ovn.kubernetes.io/ip_address": "172.20.0.9"}),
	}, attachmentSubnets...)
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.run()
	f.awaitPod(t, "default/ok", func(p *corev1.Pod) bool {
		return p != nil && p.Annotations["n1.default.ovn.kubernetes.io/allocated"] == "true"
	})

	create := func(name string, ann map[string]string) {
		t.Helper()
		if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, pod("default", name, "n1", ann), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A NAD that does not exist: refused until it is created.
	create("missing", map[string]string{annotations.NetworksAnnotation: "n3"})
	f.awaitEventWith(t, "Warning NADNotFound", "default/n3", "create it")
	// A NAD whose provider no Subnet has: refused until one has it.
	create("orphan", map[string]string{annotations.NetworksAnnotation: "orphan"})
	f.awaitEventWith(t, "Warning UnknownProvider", `no Subnet has spec.provider "orphan.default.ovn"`, "create a Subnet")
	// The static address another pod's attachment holds.
	create("dup", map[string]string{annotations.NetworksAnnotation: "n1", "n1.default.ovn.kubernetes.io/ip_address": "172.20.0.9"})
	f.awaitEventWith(t, "Warning IPConflict", "attachment network n1.default.ovn", "172.20.0.9")
	for _, name := range []string{"missing", "orphan", "dup"} {
		if p, _ := f.Kube.CoreV1().Pods("default").Get(f.Ctx, name, metav1.GetOptions{}); allocated(p) {
			t.Fatalf("refused pod %s was annotated: %v", name, p.Annotations)
		}
	}
	if p, _ := f.Kube.CoreV1().Pods("default").Get(f.Ctx, "ok", metav1.GetOptions{}); p.Annotations["n1.default.ovn.kubernetes.io/ip_address"] != "172.20.0.9" {
		t.Fatalf("the first holder lost its address: %v", p.Annotations)
	}

	// A NAD (tenant-writable) claiming another NAD's provider is refused:
	// it would reach that network's Subnets.
	nads.set("default", "n3", ovnNAD("n1.default.ovn"))
	f.r.WakeNAD("default", "n3")
	f.awaitEventWith(t, "Warning InvalidNAD", "default/n3", "must name itself")
	// Fixed: the NAD names itself and a Subnet has its provider.
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(f.Ctx, ctltest.Subnet("att4", map[string]any{"cidrBlock": "172.23.0.0/24", "provider": "n3.default.ovn"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nads.set("default", "n3", ovnNAD("n3.default.ovn"))
	f.r.WakeNAD("default", "n3")
	f.awaitPod(t, "default/missing", func(p *corev1.Pod) bool {
		return p != nil && p.Annotations["n3.default.ovn.kubernetes.io/allocated"] == "true"
	})
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(f.Ctx, ctltest.Subnet("att3", map[string]any{"cidrBlock": "172.22.0.0/24", "provider": "orphan.default.ovn"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := f.awaitPod(t, "default/orphan", func(p *corev1.Pod) bool {
		return p != nil && p.Annotations["orphan.default.ovn.kubernetes.io/allocated"] == "true"
	})
	if !strings.HasPrefix(p.Annotations["orphan.default.ovn.kubernetes.io/ip_address"], "172.22.0.") {
		t.Fatalf("orphan: %v", p.Annotations)
	}
	// The default network cannot be an attachment Subnet.
	create("eth0att", map[string]string{annotations.LogicalSwitch: "att1"})
	f.awaitEventWith(t, "Warning SubnetNotAllowed", `provider "n1.default.ovn"`, "NetworkAttachmentDefinition")
}

func TestAttachmentsRestoredAndCollectedAtStart(t *testing.T) {
	nads := &nadStandIn{cfgs: map[string]string{"default/n1": ovnNAD("n1.default.ovn")}}
	kept := pod("default", "kept", "n1", map[string]string{annotations.NetworksAnnotation: "n1",
		annotations.Allocated: "true", annotations.IPAddress: "10.16.0.5", annotations.MACAddress: "0a:00:00:00:00:05", annotations.LogicalSwitch: "ovn-default",
		"n1.default.ovn.kubernetes.io/allocated": "true", "n1.default.ovn.kubernetes.io/ip_address": "172.20.0.5",
		"n1.default.ovn.kubernetes.io/mac_address": "0a:00:00:20:00:05", "n1.default.ovn.kubernetes.io/logical_switch": "att1"})
	f := setUpWith(t, nads, []runtime.Object{node("n1", "192.168.0.11"), kept}, attachmentSubnets...)
	// A port left by a pod deleted while the controller was down.
	if err := f.NB.EnsurePort(f.Ctx, ovnnb.Port{Name: "gone.default.n1.default.ovn", Switch: "att1", MAC: "0a:00:00:20:00:06",
		IPs: []netip.Addr{netip.MustParseAddr("172.20.0.6")}, ExternalIDs: map[string]string{ovnnb.KeyPod: "default/gone", ovnnb.KeyProvider: "n1.default.ovn"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if a, ok := f.Net.IPAM.Lookup(ovnnet.AttachmentOwner("default", "kept", "n1.default.ovn")); !ok || a.IPString() != "172.20.0.5" || a.MAC != "0a:00:00:20:00:05" {
		t.Fatalf("restored attachment: %+v %v", a, ok)
	}
	deleted, err := f.r.CollectPorts(f.Ctx)
	if err != nil || len(deleted) != 1 || deleted[0] != "gone.default.n1.default.ovn" {
		t.Fatalf("collected %v, %v", deleted, err)
	}
	if _, held := f.Net.IPAM.Lookup(ovnnet.AttachmentOwner("default", "gone", "n1.default.ovn")); held {
		t.Fatal("the collected port's address is still held")
	}
	f.run()
	f.AwaitNB("the kept pod's attachment port", func() bool {
		p, ok, _ := f.NB.GetPort(f.Ctx, "kept.default.n1.default.ovn")
		return ok && p.IPs[0].String() == "172.20.0.5"
	})
}
