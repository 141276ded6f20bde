package server

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

func sampleResult(t *testing.T, cniVersion string) *request {
	t.Helper()
	conf, _ := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": "ovnhost", "type": "ovnhost-cni"})
	q := &request{Request: &protocol.Request{Command: "ADD", ContainerID: "c1", Netns: "/run/netns/p", IfName: "eth0", Config: conf}}
	if err := json.Unmarshal(conf, &q.conf); err != nil {
		t.Fatal(err)
	}
	return q
}

func samplePodNetwork() (*podsource.PodNetwork, *podwire.Result) {
	mac, _ := net.ParseMAC("0a:58:0a:10:00:05")
	hmac, _ := net.ParseMAC("aa:bb:cc:00:00:01")
	n := &podsource.PodNetwork{MAC: mac, MTU: 1350,
		Addrs:    []netip.Prefix{netip.MustParsePrefix("10.16.0.5/16"), netip.MustParsePrefix("fd00:10:16::5/64")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.16.0.1"), netip.MustParseAddr("fd00:10:16::1")}}
	return n, &podwire.Result{HostIfName: "ovh1234", HostMAC: hmac}
}

// Every version a runtime may ask for gets a result its libcni parses
// (create.CreateFromBytes is what libcni runs on the plugin's stdout) in
// exactly that version, with the addresses, gateways and interfaces.
func TestResultInEveryVersion(t *testing.T) {
	s := &Server{cfg: Config{PodMTU: 1400}}
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		q := sampleResult(t, v)
		n, res := samplePodNetwork()
		b, err := s.result(q, n, res)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var raw struct {
			CNIVersion string `json:"cniVersion"`
			IPs        []struct {
				Version   string `json:"version"`
				Address   string `json:"address"`
				Gateway   string `json:"gateway"`
				Interface *int   `json:"interface"`
			} `json:"ips"`
			Interfaces []struct {
				Name, Sandbox string
				Mtu           int `json:"mtu"`
			} `json:"interfaces"`
		}
		if err := json.Unmarshal(b, &raw); err != nil || raw.CNIVersion != v {
			t.Fatalf("%s: result %s: version %q %v", v, b, raw.CNIVersion, err)
		}
		if len(raw.IPs) != 2 || raw.IPs[0].Address != "10.16.0.5/16" || raw.IPs[0].Gateway != "10.16.0.1" || raw.IPs[1].Gateway != "fd00:10:16::1" ||
			raw.IPs[0].Interface == nil || *raw.IPs[0].Interface != 1 {
			t.Errorf("%s: ips %s", v, b)
		}
		// 0.3.x/0.4.0 name the IP version; 1.0.0 dropped it.
		if old := strings.HasPrefix(v, "0."); old != (raw.IPs[0].Version == "4") {
			t.Errorf("%s: ips[0].version %q", v, raw.IPs[0].Version)
		}
		if len(raw.Interfaces) != 2 || raw.Interfaces[1].Name != "eth0" || raw.Interfaces[1].Sandbox != "/run/netns/p" {
			t.Errorf("%s: interfaces %s", v, b)
		}
		if strings.HasPrefix(v, "1.") && raw.Interfaces[1].Mtu != 1350 {
			t.Errorf("%s: pod interface mtu %d, want 1350 (the Subnet's)", v, raw.Interfaces[1].Mtu)
		}
		r, err := create.CreateFromBytes(b)
		if err != nil || r.Version() != v {
			t.Errorf("%s: the CNI library cannot read the result back: %v", v, err)
		}
	}
}

// CHECK's prevResult arrives in the configuration's version (libcni
// converts its cached result to it): 0.4.0, 1.0.0 and 1.1.0 forms parse to
// the same addresses, routes and interfaces.
func TestPrevResultInEveryCheckVersion(t *testing.T) {
	s := &Server{cfg: Config{PodMTU: 1400}}
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		q := sampleResult(t, v)
		n, res := samplePodNetwork()
		n.Routes = nil
		b, err := s.result(q, n, res)
		if err != nil {
			t.Fatal(err)
		}
		conf := types.NetConf{CNIVersion: v, Name: "ovnhost", Type: "ovnhost-cni"}
		if err := json.Unmarshal(b, &conf.RawPrevResult); err != nil {
			t.Fatal(err)
		}
		prev, err := prevResult(&conf)
		if err != nil {
			t.Fatalf("%s: prevResult %s: %v", v, b, err)
		}
		if len(prev.IPs) != 2 || prev.IPs[0].Address.String() != "10.16.0.5/16" || len(prev.Interfaces) != 2 || prev.Interfaces[1].Mac != "0a:58:0a:10:00:05" {
			t.Errorf("%s: prevResult %+v", v, prev)
		}
		if got, want := hasMTU(prev, "eth0"), strings.HasPrefix(v, "1."); got != want {
			t.Errorf("%s: prevResult has the MTU: %v, want %v", v, got, want)
		}
	}
	// A prevResult that does not match the configuration's version is the
	// library's usual error, not a silent misreading.
	q := sampleResult(t, "0.4.0")
	n, res := samplePodNetwork()
	b, _ := s.result(q, n, res)
	conf := types.NetConf{CNIVersion: "1.0.0"}
	_ = json.Unmarshal(b, &conf.RawPrevResult)
	if _, err := prevResult(&conf); err == nil {
		t.Error("a 0.4.0 prevResult in a 1.0.0 configuration was accepted")
	}
}

func TestNewRejectsUnknownConfVersion(t *testing.T) {
	_, err := New(Options{Node: &nodeconfig.NodeConfig{Name: "n"}, OVS: nilClient{}, ConfVersion: "1.2.0"})
	if err == nil || !strings.Contains(err.Error(), "1.2.0") || !strings.Contains(err.Error(), "0.4.0") {
		t.Fatalf("New with cniVersion 1.2.0: %v", err)
	}
}

func TestContainerPodName(t *testing.T) {
	hex64 := "3f4e1c2d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f"
	cases := map[string]string{
		hex64:     "3f4e1c2d5a6b", // podman/nerdctl IDs: their short ID, as before
		"hold0":   "hold0",
		"abc-123": "abc-123",
	}
	for id, want := range cases {
		if got := containerPodName(id); got != want {
			t.Errorf("containerPodName(%q) = %q, want %q", id, got, want)
		}
	}
	seen := map[string]string{}
	for _, id := range []string{"cid-standalone-pod-1", "cid-standalone-pod-2", "Container_With.UPPER", strings.Repeat("x", 300), "___", "-a-", hex64 + "Z"} {
		got := containerPodName(id)
		if got != containerPodName(id) {
			t.Errorf("%q: not deterministic", id)
		}
		if !isLabel(got) || len(got) > 31 {
			t.Errorf("containerPodName(%q) = %q: not a DNS label of at most 31 characters", id, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q both give %q", id, other, got)
		}
		seen[got] = id
	}
}

func TestMissingKubernetesArgs(t *testing.T) {
	conf := []byte(`{"cniVersion":"0.4.0","name":"ovnhost","type":"ovnhost-cni"}`)
	req := func(cmd, args string) *protocol.Request {
		return &protocol.Request{Command: cmd, ContainerID: "4f9a0c2d5a6b7c8d", Netns: "/run/netns/x", IfName: "eth0", Args: args, Config: conf}
	}
	kube := &Server{src: &fakeSource{kube: true}}
	for _, cmd := range []string{"ADD", "CHECK"} {
		_, cerr := kube.decode(req(cmd, "IgnoreUnknown=1;K8S_POD_NAME=p"))
		if cerr == nil || cerr.code != types.ErrInvalidEnvironmentVariables || !strings.Contains(cerr.msg, "no K8S_POD_NAMESPACE") || !strings.Contains(cerr.msg, "Kubernetes mode") {
			t.Errorf("Kubernetes mode, %s without K8S_POD_NAMESPACE: %+v", cmd, cerr)
		}
		_, cerr = kube.decode(req(cmd, ""))
		if cerr == nil || !strings.Contains(cerr.msg, "K8S_POD_NAMESPACE and K8S_POD_NAME") {
			t.Errorf("Kubernetes mode, %s without CNI_ARGS: %+v", cmd, cerr)
		}
	}
	// DEL still cleans up what the container ID names.
	if q, cerr := kube.decode(req("DEL", "")); cerr != nil || q.host != podwire.PortName("4f9a0c2d5a6b7c8d", "eth0") {
		t.Errorf("Kubernetes mode, DEL without K8S args: %+v", cerr)
	}
	alone := &Server{src: &fakeSource{}}
	for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
		q, cerr := alone.decode(req(cmd, ""))
		if cerr != nil || q.pod.Name != "4f9a0c2d5a6b" || q.pod.Namespace != "default" || q.pod.LSP() != "4f9a0c2d5a6b.default" {
			t.Errorf("standalone %s without K8S args: %+v %+v", cmd, q, cerr)
		}
	}
}

func TestStatusAndGCNeedVersion110(t *testing.T) {
	s := &Server{src: &fakeSource{}}
	for _, cmd := range []string{"STATUS", "GC"} {
		for _, v := range []string{"0.4.0", "1.0.0"} {
			conf := []byte(`{"cniVersion":"` + v + `","name":"ovnhost","type":"ovnhost-cni"}`)
			_, cerr := s.handle(t.Context(), &protocol.Request{Command: cmd, Config: conf})
			if cerr == nil || cerr.code != types.ErrIncompatibleCNIVersion {
				t.Errorf("%s at %s: %+v, want error %d", cmd, v, cerr, types.ErrIncompatibleCNIVersion)
			}
		}
	}
}

// nilClient satisfies client.Client; New never calls it.
type nilClient struct{ client.Client }
