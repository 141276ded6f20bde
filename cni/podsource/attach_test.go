package podsource

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

const testProvider = "att.ns.ovn"

// attached is the annotations of a pod with the default network (good())
// and the attachment network testProvider at ip/mac.
func attached(ip, mac string) map[string]string {
	ann := good()
	for k, v := range map[string]string{annotations.KeyAllocated: "true", annotations.KeyIPAddress: ip, annotations.KeyMACAddress: mac,
		annotations.KeyCIDR: "172.17.0.0/24", annotations.KeyGateway: "172.17.0.1", annotations.KeyLogicalSwitch: "attnet"} {
		ann[annotations.ProviderKey(testProvider, k)] = v
	}
	return ann
}

// An attachment network's interface is wired from its provider's
// annotations under the same rules as the default network's: the
// controller's field manager must own them (the pod's author writing them
// is awaited, naming the key), and they must equal what OVN holds for the
// port "<pod>.<ns>.<provider>" (another pod's attachment address is
// refused, naming the provider's key). It gets no default route; the
// default network of the same pod is unchanged.
func TestAttachmentNetworkFollowsItsProvidersAnnotationsAndPort(t *testing.T) {
	ep, sb := sbServer(t)
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "ns", Annotations: attached("172.17.0.7", "0a:58:ac:11:00:07"),
		ManagedFields: []metav1.ManagedFieldsEntry{
			owner(annotations.ControllerFieldManager, time.Now(), annotations.Allocated, annotations.Routed, annotations.IPAddress, annotations.MACAddress,
				annotations.CIDR, annotations.Gateway, annotations.LogicalSwitch),
			owner("kubectl-annotate", time.Now(), annotations.ProviderKey(testProvider, "allocated"), annotations.ProviderKey(testProvider, "ip_address"),
				annotations.ProviderKey(testProvider, "mac_address"), annotations.ProviderKey(testProvider, "cidr"), annotations.ProviderKey(testProvider, "gateway"),
				annotations.ProviderKey(testProvider, "logical_switch")),
		}}, Spec: corev1.PodSpec{NodeName: "n"}}
	routes := attached("172.17.0.8", "0a:58:ac:11:00:08")
	routes[annotations.ProviderKey(testProvider, "routes")] = `[{"dst":"172.18.0.0/16","gw":"172.17.0.254"}]`
	cs := fake.NewClientset(
		controllerPod("victim", attached("172.17.0.5", "0a:58:ac:11:00:05")),
		controllerPod("thief", attached("172.17.0.5", "0a:58:ac:11:00:06")), // its port holds .6
		controllerPod("plain", good()),
		controllerPod("routes", routes),
		forged)
	k := NewKube(cs, nil, KubeOptions{Node: "n", Log: slog.New(slog.DiscardHandler), OVN: NewSBPorts(ep, nil, nil), MismatchGrace: 300 * time.Millisecond})
	ctx := t.Context()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	res := sbTransact(t, sb,
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Datapath_Binding", Row: ovsdb.Row{
			"tunnel_key": 1, "external_ids": strMap(map[string]string{"name": "ovn-default"})}},
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Datapath_Binding", Row: ovsdb.Row{
			"tunnel_key": 2, "external_ids": strMap(map[string]string{"name": "attnet"})}})
	def, att := res[0].UUID.GoUUID, res[1].UUID.GoUUID
	sbTransact(t, sb,
		portBinding("victim.ns", def, 1, "0a:58:0a:10:00:05 10.16.0.5"),
		portBinding("victim.ns."+testProvider, att, 2, "0a:58:ac:11:00:05 172.17.0.5"),
		portBinding("thief.ns."+testProvider, att, 3, "0a:58:ac:11:00:06 172.17.0.6"),
		portBinding("forged.ns."+testProvider, att, 4, "0a:58:ac:11:00:07 172.17.0.7"),
		portBinding("routes.ns."+testProvider, att, 5, "0a:58:ac:11:00:08 172.17.0.8"))
	ref := func(pod string) PodRef { return PodRef{Namespace: "ns", Name: pod, Provider: testProvider} }

	n, err := k.PodNetwork(ctx, ref("victim"))
	if err != nil {
		t.Fatalf("attachment of victim: %v", err)
	}
	if n.Addrs[0].String() != "172.17.0.5/24" || n.MAC.String() != "0a:58:ac:11:00:05" || n.Switch != "attnet" || n.Provider != testProvider {
		t.Fatalf("attachment network %+v, want 172.17.0.5/24 0a:58:ac:11:00:05 on attnet", n)
	}
	if rs := n.PodRoutes(); len(rs) != 0 {
		t.Fatalf("attachment routes %v: an attachment gets no default route", rs)
	}
	d, err := k.PodNetwork(ctx, PodRef{Namespace: "ns", Name: "victim"})
	if err != nil || d.Addrs[0].String() != "10.16.0.5/16" || len(d.PodRoutes()) != 1 || d.PodRoutes()[0].Dst.Bits() != 0 {
		t.Fatalf("default network of the same pod: %+v %v", d, err)
	}
	n, err = k.PodNetwork(ctx, ref("routes"))
	if err != nil || len(n.PodRoutes()) != 1 || n.PodRoutes()[0].Dst.String() != "172.18.0.0/16" {
		t.Fatalf("attachment with %s: %+v %v, want its route only", annotations.ProviderKey(testProvider, "routes"), n, err)
	}

	_, err = k.PodNetwork(ctx, ref("thief"))
	var mm *MismatchError
	if !errors.As(err, &mm) || mm.Field != annotations.ProviderKey(testProvider, "ip_address") || mm.OVN != "172.17.0.6" ||
		!strings.Contains(err.Error(), "ns/thief") {
		t.Fatalf("attachment annotated with another pod's address: %v, want a mismatch of %s", err, annotations.ProviderKey(testProvider, "ip_address"))
	}

	for pod, want := range map[string]string{
		// The author's own write of the provider's keys is not the controller's.
		"forged": annotations.ProviderKey(testProvider, "allocated") + `="true" of pod ns/forged was written by field manager kubectl-annotate`,
		// The controller has not allocated the attachment (yet).
		"plain": "for attachment network " + testProvider + ": missing " + annotations.ProviderKey(testProvider, "allocated"),
	} {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := k.PodNetwork(short, ref(pod))
		cancel()
		var at *AnnotationTimeout
		if !errors.As(err, &at) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a timeout saying %q", pod, err, want)
		}
	}
}

// The Subnet of the port's switch must be of the interface's network: an
// attachment's Subnet has its provider, a default network's Subnet is no
// attachment network.
func TestAttachmentSubnetMustBeOfItsProvider(t *testing.T) {
	k := withSubnets(t, "n",
		subnet("attnet", true, map[string]any{"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.1", "provider": testProvider}, nil),
		subnet("other", true, map[string]any{"cidrBlock": "172.19.0.0/24", "gateway": "172.19.0.1", "provider": "other.ns.ovn"}, nil),
		subnet("ovn-default", true, map[string]any{"cidrBlock": "10.16.0.0/16", "gateway": "10.16.0.1"}, nil))
	att := PodRef{Namespace: "ns", Name: "p", Provider: testProvider}
	network := func(sw, addr, gw string) *PodNetwork {
		return &PodNetwork{Switch: sw, Addrs: prefixes(addr), Gateways: []netipAddr{mustAddr(gw)}}
	}
	if w, mm := k.checkAgainstSubnet(att, nil, network("attnet", "172.17.0.5/24", "172.17.0.1")); w != "" || mm != nil {
		t.Fatalf("attachment on its provider's Subnet: %q %v", w, mm)
	}
	for _, c := range []struct {
		ref  PodRef
		n    *PodNetwork
		want string
	}{
		{att, network("other", "172.19.0.5/24", "172.19.0.1"), `other.ns.ovn\", not of ` + testProvider},
		{att, network("ovn-default", "10.16.0.5/16", "10.16.0.1"), `a Subnet of provider \"\", not of ` + testProvider},
		{PodRef{Namespace: "ns", Name: "p"}, network("attnet", "172.17.0.5/24", "172.17.0.1"), "which is no pod's default network"},
	} {
		if _, mm := k.checkAgainstSubnet(c.ref, nil, c.n); mm == nil || mm.Field != annotations.LogicalSwitch || !strings.Contains(mm.Error(), c.want) {
			t.Errorf("%s on %s: %v, want a mismatch saying %q", c.ref.LSP(), c.n.Switch, mm, c.want)
		}
	}
}

type netipAddr = netip.Addr

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
