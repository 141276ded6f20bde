package cni_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestDaemonAllInOne runs the real node daemon (`bin/ovnhost run`,
// all-in-one, userspace datapath, every directory relocated into a temporary
// one) inside the test's private netns, waits for its sd_notify READY=1, and
// plays kubelet with the plugin the daemon installed: two containers get
// addresses from the standalone IPAM, ping each other and carry a TCP
// transfer; after the daemon stops, ADD answers "try again later".
func TestDaemonAllInOne(t *testing.T) {
	if testing.Short() {
		t.Skip("real daemons: not in -short")
	}
	testenv.RequireRoot(t)
	bin := testenv.Binary(t, "ovnhost")
	testenv.Binary(t, "ovnhost-cni")
	if os.Getenv(envInNetns) == "" {
		t.Fatal("must run inside the private netns")
	}
	dir, err := os.MkdirTemp("", "ovhd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	notify := testenv.ListenNotify(t, dir)
	sock := filepath.Join(dir, "cni.sock")
	binDir, confDir := filepath.Join(dir, "cnibin"), filepath.Join(dir, "cniconf")
	var logs bytes.Buffer
	spec := proc.Spec{Name: "ovnhost run", Path: bin, Args: []string{"run", "--node-name", "e2e1", "--datapath", "netdev", "--encap-ip", "127.0.0.1",
		"--ovs-db-dir", filepath.Join(dir, "ovsdb"), "--ovs-run-dir", filepath.Join(dir, "ovsrun"), "--ovs-log-dir", filepath.Join(dir, "ovslog"),
		"--ovn-db-dir", filepath.Join(dir, "ovndb"), "--ovn-run-dir", filepath.Join(dir, "ovnrun"), "--ovn-log-dir", filepath.Join(dir, "ovnlog"),
		"--health-addr", "127.0.0.1:0", "--cni-socket", sock, "--cni-bin-dir", binDir, "--cni-conf-dir", confDir},
		Output: &logs, Notify: notify, Pdeathsig: true}
	// The daemon reads OVNHOST_* variables as settings: hand it none of the
	// test's own.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "OVNHOST_") && !strings.HasPrefix(e, "KUBECONFIG=") {
			spec.Env = append(spec.Env, e)
		}
	}
	daemon := proc.MustStart(t, spec)
	stop := func() {
		daemon.Terminate(30 * time.Second)
		for _, l := range []string{"br-int", "ovs-netdev", "ovn0", "mirror0"} {
			if link, err := netlink.LinkByName(l); err == nil {
				_ = netlink.LinkDel(link)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("daemon output:\n%s", tailString(logs.String(), 40))
		}
	})
	// READY=1 through sd_notify: no polling.
	if _, err := daemon.WaitNotify("READY=1", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("ovnhost run is ready but serves no CNI socket at %s: %v", sock, err)
	}
	plugin := filepath.Join(binDir, "ovnhost-cni")
	conf, err := os.ReadFile(filepath.Join(confDir, "00-ovnhost.conflist"))
	if err != nil {
		t.Fatalf("the daemon did not install its conflist: %v", err)
	}
	netconf := confFromList(t, conf)
	type wired struct{ id, netns, ip, args string }
	var pods []wired
	for _, name := range []string{"d1", "d2"} {
		ns := podnettest.NewNetNS(t, "ovhd-"+name)
		c := cniCall{Command: "ADD", ContainerID: "cid-" + name, Netns: ns, IfName: "eth0", Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name, Conf: netconf}
		out := runPlugin(t, plugin, c)
		if out.Code != 0 {
			t.Fatalf("ADD %s through the daemon: %s", name, out.Err.Msg)
		}
		ip := resultIP(t, out.Stdout)
		pods = append(pods, wired{c.ContainerID, ns, ip, c.Args})
	}
	if err := ping(t, pods[0].netns, pods[1].ip); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(pods[1].ip, "7000")
	ln := listen(t, pods[1].netns, addr)
	transfer(t, pods[0].netns, ln, addr, 2<<20)
	for _, p := range pods {
		out := runPlugin(t, plugin, cniCall{Command: "DEL", ContainerID: p.id, Netns: p.netns, IfName: "eth0", Args: p.args, Conf: netconf})
		if out.Code != 0 {
			t.Fatalf("DEL: %s", out.Err.Msg)
		}
	}
	stop()
	out := runPlugin(t, plugin, cniCall{Command: "ADD", ContainerID: "late", Netns: pods[0].netns, IfName: "eth0", Args: "IgnoreUnknown=1", Conf: netconf})
	if out.Code == 0 || out.Err.Code != 11 || !strings.Contains(out.Err.Msg, sock) {
		t.Fatalf("ADD after the daemon stopped: exit %d code %d %q", out.Code, out.Err.Code, out.Err.Msg)
	}
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
