package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The pod MTU a user sees: the node takes its tunnel interface's MTU minus
// the encapsulation's overhead (Geneve 100, VXLAN 50) unless OVNHOST_POD_MTU
// says otherwise, and a pod wired through the installed plugin (standalone
// mode: the node allocates from its own NB) gets exactly that on eth0 inside
// its network namespace, and the CNI result says the same.
func TestPodMTUIsUnderlayMinusTunnelOverhead(t *testing.T) {
	for _, c := range []struct {
		underlay int
		tunnel   string
		env      []string
		want     int
	}{
		{1450, "geneve", nil, 1350},
		{1450, "vxlan", nil, 1400},
		{9000, "geneve", nil, 8900},
		{9000, "vxlan", nil, 8950},
		{9000, "geneve", []string{"OVNHOST_POD_MTU=1300"}, 1300},
	} {
		name := fmt.Sprintf("%s-underlay%d", c.tunnel, c.underlay)
		if len(c.env) > 0 {
			name += "-" + strings.ReplaceAll(strings.Join(c.env, ","), "=", "")
		}
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			testenv.Binary(t, "ovnhost-cni") // the plugin the node installs
			// The underlay: a veth whose peer lives in a namespace of its own.
			peer := newNetns(t, "ohu")
			run(t, "ip", "link", "add", "ul0", "netns", n.NS, "mtu", fmt.Sprint(c.underlay), "type", "veth",
				"peer", "name", "ul0", "netns", peer, "mtu", fmt.Sprint(c.underlay))
			run(t, "ip", "-n", n.NS, "addr", "add", "192.168.204.2/24", "dev", "ul0")
			run(t, "ip", "-n", n.NS, "link", "set", "ul0", "up")
			run(t, "ip", "-n", peer, "link", "set", "ul0", "up")

			// No KUBECONFIG: standalone allocation from the node's own NB.
			n.Env = append([]string{"IFACE=ul0", "TUNNEL_TYPE=" + c.tunnel}, c.env...)
			n.Start()
			log := string(must(os.ReadFile(n.Path("ovnhost.log"))))
			if !strings.Contains(log, fmt.Sprintf("pod_mtu=%d", c.want)) {
				t.Errorf("the starting line does not say pod_mtu=%d\n%s", c.want, n.LogTail())
			}

			podNS := newNetns(t, "ohk")
			out, err := cni(n, "ADD", podNS, "mtu")
			if err != nil {
				t.Fatalf("ADD: %v\n%s\n%s", err, out, n.LogTail())
			}
			t.Cleanup(func() {
				if out, err := cni(n, "DEL", podNS, "mtu"); err != nil {
					t.Errorf("DEL: %v\n%s", err, out)
				}
			})
			var res struct {
				Interfaces []struct {
					Name    string `json:"name"`
					Sandbox string `json:"sandbox"`
					MTU     int    `json:"mtu"`
				} `json:"interfaces"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("ADD result %s: %v", out, err)
			}
			found := false
			for _, i := range res.Interfaces {
				if i.Name == "eth0" && i.Sandbox != "" {
					found = true
					if i.MTU != c.want {
						t.Errorf("CNI result: eth0 mtu %d, want %d (underlay %d - %s overhead)\n%s", i.MTU, c.want, c.underlay, c.tunnel, out)
					}
				}
			}
			if !found {
				t.Errorf("CNI result has no eth0 in the pod's sandbox: %s", out)
			}
			got := linkMTU(t, podNS, "eth0")
			t.Logf("underlay %d %s: pod eth0 mtu %d; CNI result %s", c.underlay, c.tunnel, got, strings.TrimSpace(string(out)))
			if got != c.want {
				t.Errorf("pod eth0 MTU %d, want %d (underlay %d - %s overhead)\n%s", got, c.want, c.underlay, c.tunnel, n.LogTail())
			}
		})
	}
}

// linkMTU reads a link's MTU inside a named network namespace over netlink.
func linkMTU(t *testing.T, ns, name string) int {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(name)
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns, err)
	}
	return l.Attrs().MTU
}
