package node_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
)

// Two nodes, each in its own network namespace, joined by a veth underlay
// (192.168.100.0/24, inside namespaces this test made), both ovnhost in
// remote mode against one OVN central, with --userspace-tunnel: a pod on
// each node, Geneve between them in OVS userspace.
func TestTwoNodesCarryPodTrafficOverGeneve(t *testing.T) {
	central := ovncentral.Start(t)
	if err := central.WaitNorthd(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, b := newNode(t), newNode(t)
	run(t, "ip", "link", "add", "ul0", "netns", a.NS, "type", "veth", "peer", "name", "ul0", "netns", b.NS)
	for i, n := range []*node{a, b} {
		run(t, "ip", "-n", n.NS, "addr", "add", fmt.Sprintf("192.168.100.%d/24", i+1), "dev", "ul0")
		run(t, "ip", "-n", n.NS, "link", "set", "ul0", "up")
		n.Env = []string{"OVN_SB_ADDR=" + central.SB(), "IFACE=ul0"}
	}
	a.Start("--userspace-tunnel", "--node-name=node-a")
	b.Start("--userspace-tunnel", "--node-name=node-b")

	// The tunnel endpoint moved to br-phy; ul0 is now its port.
	for i, n := range []*node{a, b} {
		addrs := run(t, "ip", "-n", n.NS, "-o", "addr", "show", "dev", "br-phy")
		if !strings.Contains(addrs, fmt.Sprintf("192.168.100.%d/24", i+1)) {
			t.Fatalf("br-phy of %s lacks the endpoint address:\n%s", n.NS, addrs)
		}
	}
	sb := dial(t, sbdb.FullDatabaseModel, central.SB())
	var encaps []sbdb.Encap
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sb.WaitUntil(ctx, "two geneve encaps in SB", func() bool {
		encaps = nil
		_ = sb.List(ctx, &encaps)
		return len(encaps) == 2
	}, nil); err != nil {
		t.Fatalf("%v: %+v", err, encaps)
	}

	pods := []pod{
		{hostIf: "veth-a1", lsp: "a1.default", mac: "0a:58:0a:10:00:41", ip: "10.16.0.41"},
		{hostIf: "veth-b1", lsp: "b1.default", mac: "0a:58:0a:10:00:42", ip: "10.16.0.42"},
	}
	createSwitch(t, central.NB(), pods)
	plugPods(t, "unix:"+a.Path("ovs-run", "db.sock"), a.NS, a.LogTail, pods[:1])
	plugPods(t, "unix:"+b.Path("ovs-run", "db.sock"), b.NS, b.LogTail, pods[1:])
	// The first encapsulated packet can be lost while the remote tunnel
	// MAC is learned: at least one reply of five, then a clean second run.
	if err := ping(pods[0].ns, pods[1].ip, 5); err != nil {
		t.Fatalf("cross-node: %v\n%s", err, a.LogTail())
	}
	out, err := exec.Command("ip", "netns", "exec", pods[0].ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", pods[1].ip).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0% packet loss") {
		t.Fatalf("steady cross-node ping lost packets: %v\n%s", err, out)
	}

	// A stop gives the address back to ul0 and leaves no bridge behind.
	if code := a.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, a.LogTail())
	}
	if addrs := run(t, "ip", "-n", a.NS, "-o", "addr", "show", "dev", "ul0"); !strings.Contains(addrs, "192.168.100.1/24") {
		t.Fatalf("ul0 did not get its address back:\n%s", addrs)
	}
	if links := run(t, "ip", "-n", a.NS, "-o", "link", "show"); strings.Contains(links, "br-phy") {
		t.Fatalf("br-phy left behind:\n%s", links)
	}
}
