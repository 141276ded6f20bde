package server

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// attachRequest is what Multus sends the plugin for the pod's extra
// interface ifName from a NetworkAttachmentDefinition of type kube-ovn
// (Kube-OVN's config, server_socket included, which the plugin ignores).
func attachRequest(cmd, ifName, provider string) *protocol.Request {
	conf := map[string]any{"cniVersion": "0.3.1", "name": "att", "type": "kube-ovn", "server_socket": "/run/openvswitch/kube-ovn-daemon.sock"}
	if provider != "-" {
		conf["provider"] = provider
	}
	b, _ := json.Marshal(conf)
	var nc protocol.NetConf
	_ = json.Unmarshal(b, &nc)
	return &protocol.Request{Command: cmd, ContainerID: "c1", Netns: "/run/netns/none", IfName: ifName,
		Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", Config: b, Provider: protocol.AttachmentProvider(nc)}
}

// An attachment's ADD asks the source for that provider's network of the
// pod and wires it on its own port (named from the container and the
// interface, so it never collides with eth0's) bound to
// "<pod>.<ns>.<provider>", with no default route; the result is that
// interface's.
func TestAddWiresAnAttachmentNetworkOnItsOwnPort(t *testing.T) {
	testenv.RequireRoot(t) // CNI_NETNS must be a real network namespace
	ns := podnettest.NewNetNS(t, "ovht-att")
	mac, _ := net.ParseMAC("0a:58:ac:11:00:05")
	n := &podsource.PodNetwork{Switch: "attnet", MAC: mac, Provider: "att.ns.ovn",
		Addrs: []netip.Prefix{netip.MustParsePrefix("172.17.0.5/24")}, Gateways: []netip.Addr{netip.MustParseAddr("172.17.0.1")}}
	src := &fakeSource{kube: true, net: n}
	w := &fakeWiring{}
	req := attachRequest("ADD", "net1", "att.ns.ovn")
	req.Netns = ns
	out, cerr := dispatchServer(t, src, w).handle(t.Context(), req)
	if cerr != nil {
		t.Fatalf("ADD net1: %+v", cerr)
	}
	if len(src.refs) != 1 || src.refs[0].Provider != "att.ns.ovn" || src.refs[0].LSP() != "p.ns.att.ns.ovn" {
		t.Fatalf("asked the source for %+v, want pod ns/p's network of provider att.ns.ovn", src.refs)
	}
	a := w.addedTo
	if a.Provider != "att.ns.ovn" || a.IfaceID() != "p.ns.att.ns.ovn" || a.IfName != "net1" || a.Port != podwire.PortName("c1", "net1") || a.Port == podwire.PortName("c1", "eth0") {
		t.Fatalf("wired %+v, want net1 on its own port bound to p.ns.att.ns.ovn", a)
	}
	if len(w.added.Routes) != 0 || w.added.MTU != 1400 {
		t.Fatalf("network handed to the wiring %+v: want no route (no default route on an attachment) and the node's MTU", w.added)
	}
	var res struct {
		Interfaces []struct{ Name, Sandbox string } `json:"interfaces"`
		IPs        []struct{ Address, Gateway string }
		Routes     []any
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 || res.IPs[0].Address != "172.17.0.5/24" || res.IPs[0].Gateway != "172.17.0.1" ||
		len(res.Routes) != 0 || res.Interfaces[1].Name != "net1" {
		t.Fatalf("result %s (%v): want net1's address and no route", out, err)
	}
}

// What is not an attachment request is refused before anything is asked of
// the source or the wiring, naming the interface, the network and the fix.
func TestAttachmentRequestsThatCannotBeWiredAreRefused(t *testing.T) {
	mismatch := attachRequest("ADD", "net1", "att.ns.ovn")
	mismatch.Provider = "other.ns.ovn"
	for _, c := range []struct {
		name string
		kube bool
		req  *protocol.Request
		code uint
		want string
	}{
		{"no provider on net1", true, attachRequest("ADD", "net1", "-"), types.ErrInvalidNetworkConfig, `set "provider": "<nad>.<namespace>.ovn"`},
		{"provider ovn on net1", true, attachRequest("ADD", "net1", "ovn"), types.ErrInvalidNetworkConfig, "asks for the pod's default network"},
		{"CHECK without provider on net1", true, attachRequest("CHECK", "net1", ""), types.ErrInvalidNetworkConfig, "asks for the pod's default network"},
		{"not <nad>.<ns>.ovn", true, attachRequest("ADD", "net1", "att.ovn"), types.ErrInvalidNetworkConfig, `provider "att.ovn", which is not an OVN attachment network's`},
		{"underlay-style provider", true, attachRequest("ADD", "net1", "att.ns"), types.ErrInvalidNetworkConfig, "not an OVN attachment network's"},
		{"bad namespace", true, attachRequest("ADD", "net1", "att.NS_x.ovn"), types.ErrInvalidNetworkConfig, "not an OVN attachment network's"},
		{"attachment on eth0", true, attachRequest("ADD", "eth0", "att.ns.ovn"), types.ErrInvalidNetworkConfig, "default network as an attachment (v1.multus-cni.io/default-network) is not supported"},
		{"standalone", false, attachRequest("ADD", "net1", "att.ns.ovn"), types.ErrInvalidNetworkConfig, "need a node in Kubernetes mode"},
		{"request and configuration differ", true, mismatch, types.ErrDecodingFailure, `names provider "other.ns.ovn" but its network configuration "att.ns.ovn"`},
	} {
		src := &fakeSource{kube: c.kube}
		w := &fakeWiring{}
		_, cerr := dispatchServer(t, src, w).handle(t.Context(), c.req)
		if cerr == nil || cerr.code != c.code || !strings.Contains(cerr.msg, c.want) {
			t.Errorf("%s: %+v, want code %d saying %q", c.name, cerr, c.code, c.want)
			continue
		}
		if c.code == types.ErrInvalidNetworkConfig && !strings.Contains(cerr.msg, "net1") && !strings.Contains(cerr.msg, "eth0") {
			t.Errorf("%s: %q does not name the interface", c.name, cerr.msg)
		}
		if len(src.calls) != 0 || len(w.log()) != 0 {
			t.Errorf("%s: refused after asking the source %v and the wiring %v", c.name, src.calls, w.log())
		}
	}
	// DEL stays idempotent: a net1 without provider is removed like any port.
	w := &fakeWiring{}
	if _, cerr := dispatchServer(t, &fakeSource{kube: true}, w).handle(t.Context(), attachRequest("DEL", "net1", "")); cerr != nil ||
		!slices.Equal(w.log(), []string{"del " + podwire.PortName("c1", "net1"), "forget " + podwire.PortName("c1", "net1")}) {
		t.Fatalf("DEL of net1: %+v %v", cerr, w.log())
	}
}

// DEL of an attachment removes its port and releases that provider's
// network only, also where its ADD was refused (a malformed provider, a
// standalone node): DEL is never refused.
func TestDelOfAnAttachmentRemovesItsPortOnly(t *testing.T) {
	for _, c := range []struct {
		kube     bool
		provider string
	}{{true, "att.ns.ovn"}, {true, "att.ovn"}, {false, "att.ns.ovn"}} {
		src := &fakeSource{kube: c.kube}
		w := &fakeWiring{}
		if _, cerr := dispatchServer(t, src, w).handle(t.Context(), attachRequest("DEL", "net1", c.provider)); cerr != nil {
			t.Fatalf("DEL net1 of provider %s (kube %v): %+v", c.provider, c.kube, cerr)
		}
		port := podwire.PortName("c1", "net1")
		if !slices.Equal(w.log(), []string{"del " + port, "forget " + port}) || len(src.refs) != 1 || src.refs[0].Provider != c.provider {
			t.Fatalf("DEL net1 of provider %s: wiring %v, source %+v", c.provider, w.log(), src.refs)
		}
	}
}

// The runtime's GC lists a sandbox under its own interface (eth0, the
// network it called, Multus's when Multus is the runtime's network): the
// attachment ports of a listed container stay, those of a gone one go.
func TestGCKeepsTheAttachmentsOfLiveContainers(t *testing.T) {
	owned := []podwire.Attachment{
		{Namespace: "ns", Name: "a", ContainerID: "ca", IfName: "eth0", Port: "a-eth0"},
		{Namespace: "ns", Name: "a", ContainerID: "ca", IfName: "net1", Port: "a-net1", Provider: "att.ns.ovn"},
		{Namespace: "ns", Name: "b", ContainerID: "cb", IfName: "eth0", Port: "b-eth0"},
		{Namespace: "ns", Name: "b", ContainerID: "cb", IfName: "net1", Port: "b-net1", Provider: "att.ns.ovn"},
		{Namespace: "ns", Name: "a", ContainerID: "ca", IfName: "net2", Port: "a-net2"}, // no provider: not an attachment
	}
	req := cniRequest("GC", "1.1.0", map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "ca", "ifname": "eth0"}}})
	src := &fakeSource{}
	w := &fakeWiring{owned: owned}
	if _, cerr := dispatchServer(t, src, w).handle(t.Context(), req); cerr != nil {
		t.Fatal(cerr)
	}
	if got, want := w.log()[1:], []string{"remove b-eth0", "remove b-net1", "remove a-net2"}; !slices.Equal(got, want) {
		t.Fatalf("GC removed %v, want %v", got, want)
	}
	if len(src.refs) != 3 || src.refs[1].Provider != "att.ns.ovn" || src.refs[0].Provider != "" {
		t.Fatalf("GC released %+v", src.refs)
	}
}
