package cni_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
)

// listen opens a TCP listener inside netns (it stays there).
func listen(t testing.TB, netnsPath, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	inNetns(t, netnsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects from netnsPath ("" = the test's own netns, the node).
func dial(t testing.TB, netnsPath, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	do := func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}
	if netnsPath == "" {
		if err := do(); err != nil {
			t.Fatal(err)
		}
	} else {
		inNetns(t, netnsPath, do)
	}
	return c
}

// transfer sends size random bytes from src to dst's listener and checks
// they arrive intact; it returns the receiver's throughput in Mbit/s.
func transfer(t testing.TB, srcNetns string, ln net.Listener, addr string, size int) float64 {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	type res struct {
		sum [32]byte
		n   int64
		d   time.Duration
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- res{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		h := sha256.New()
		t0 := time.Now()
		n, err := io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		got <- res{s, n, time.Since(t0), err}
	}()
	c := dial(t, srcNetns, addr)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.Copy(c, bytes.NewReader(data)); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.Close()
	r := <-got
	if r.err != nil || r.n != int64(size) || r.sum != want {
		t.Fatalf("TCP transfer to %s: got %d of %d bytes, intact=%v, err=%v", addr, r.n, size, r.sum == want, r.err)
	}
	return float64(size*8) / r.d.Seconds() / 1e6
}

func TestStandaloneTwoPodsPingAndTCP(t *testing.T) {
	n := startNode(t, nodeOpts{})
	a := n.add(t, "pod-a", "")
	b := n.add(t, "pod-b", "")
	if a.ip == b.ip || !strings.HasPrefix(a.ip, "10.16.") {
		t.Fatalf("addresses %s and %s", a.ip, b.ip)
	}
	if err := ping(t, a.netns, b.ip); err != nil {
		t.Fatal(err)
	}
	ln := listen(t, b.netns, net.JoinHostPort(b.ip, "8080"))
	mbps := transfer(t, a.netns, ln, net.JoinHostPort(b.ip, "8080"), 4<<20)
	t.Logf("4 MiB pod-a -> pod-b at %.0f Mbit/s", mbps)

	// The OVS interface carries Kube-OVN's external_ids and ovn-installed.
	rows := n.selectRows(t, "Interface", ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes,
		ovsdb.OvsMap{GoMap: map[any]any{"iface-id": "pod-a.default"}}))
	if len(rows) != 1 {
		t.Fatalf("%d interfaces with iface-id pod-a.default", len(rows))
	}
	ids := rows[0]["external_ids"].(ovsdb.OvsMap).GoMap
	for k, v := range map[string]string{"pod_name": "pod-a", "pod_namespace": "default", "pod_netns": a.netns, "ip": a.ip, "vendor": "ovnhost", "ovn-installed": "true"} {
		if ids[k] != v {
			t.Errorf("external_ids:%s = %v, want %s", k, ids[k], v)
		}
	}
	if ids["attached-mac"] == nil || ids["attached-mac"] == "" {
		t.Errorf("no attached-mac")
	}
	// The pod end has tx checksum offload off (userspace datapath).
	inNetns(t, a.netns, func() error {
		on, err := podnet.TxChecksum("eth0")
		if err == nil && on {
			t.Errorf("tx checksum offload is on in the pod")
		}
		l, err := netlink.LinkByName("eth0")
		if err == nil && l.Attrs().MTU != 1400 {
			t.Errorf("pod MTU %d, want 1400", l.Attrs().MTU)
		}
		return err
	})
	for _, p := range []*pod{a, b} {
		if out := n.del(t, p); out.Code != 0 {
			t.Fatalf("DEL %s: %s", p.name, out.Err.Msg)
		}
	}
	n.assertClean(t)
}

func TestHostReachesPodThroughOVN0(t *testing.T) {
	n := startNode(t, nodeOpts{})
	p := n.add(t, "web", "")
	// ovn0 comes up in the background: wait for its address event-driven.
	waitOVN0(t)
	ln := listen(t, p.netns, net.JoinHostPort(p.ip, "80"))
	transfer(t, "", ln, net.JoinHostPort(p.ip, "80"), 256<<10)
	if out := n.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
}

// waitOVN0 waits until ovn0 has its address and route to the pod CIDR.
func waitOVN0(t testing.TB) {
	t.Helper()
	ch := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.RouteSubscribe(ch, done); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		if l, err := netlink.LinkByName("ovn0"); err == nil {
			rs, _ := netlink.RouteList(l, netlink.FAMILY_V4)
			for _, r := range rs {
				if r.Dst != nil && r.Dst.String() == "10.16.0.0/16" {
					return
				}
			}
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("ovn0 has no route to 10.16.0.0/16 after 30 s")
		}
	}
}

func TestStaticIPAndRates(t *testing.T) {
	n := startNode(t, nodeOpts{})
	srv := n.add(t, "fixed", "IP=10.16.0.200;INGRESS_RATE=10")
	if srv.ip != "10.16.0.200" {
		t.Fatalf("static IP pod got %s", srv.ip)
	}
	cl := n.add(t, "client", "")
	qos := n.selectRows(t, "QoS")
	if len(qos) != 1 {
		t.Fatalf("%d QoS rows, want 1", len(qos))
	}
	ln := listen(t, srv.netns, "10.16.0.200:9000")
	mbps := transfer(t, cl.netns, ln, "10.16.0.200:9000", 4<<20)
	t.Logf("transfer into a pod limited to 10 Mbit/s: %.1f Mbit/s", mbps)
	if mbps < 5 || mbps > 14 {
		t.Fatalf("ingress_rate=10: measured %.1f Mbit/s, want about 10", mbps)
	}
	// The same transfer the other way is not limited.
	ln2 := listen(t, cl.netns, net.JoinHostPort(cl.ip, "9001"))
	if free := transfer(t, srv.netns, ln2, net.JoinHostPort(cl.ip, "9001"), 4<<20); free < 20 {
		t.Fatalf("unlimited direction measured only %.1f Mbit/s", free)
	}
	// egress_rate limits what a pod sends.
	eg := n.add(t, "sender", "EGRESS_RATE=10")
	mbps = transfer(t, eg.netns, ln2, net.JoinHostPort(cl.ip, "9001"), 4<<20)
	t.Logf("transfer from a pod limited to 10 Mbit/s: %.1f Mbit/s", mbps)
	if mbps < 5 || mbps > 14 {
		t.Fatalf("egress_rate=10: measured %.1f Mbit/s, want about 10", mbps)
	}
	for _, p := range []*pod{srv, cl, eg} {
		if out := n.del(t, p); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
	n.assertClean(t)
}

func TestDelIdempotentCheckAndDaemonDown(t *testing.T) {
	n := startNode(t, nodeOpts{})
	p := n.add(t, "chk", "")
	conf := n.netconf(t, "", map[string]any{"prevResult": jsonRaw(p.raw)})
	call := cniCall{Command: "CHECK", ContainerID: p.id, Netns: p.netns, IfName: "eth0", Args: p.args, Conf: conf}
	if out := runPlugin(t, n.installedPlugin(), call); out.Code != 0 {
		t.Fatalf("CHECK of a good pod: %s", out.Err.Msg)
	}
	if b, err := exec.Command("ip", "-n", filepath.Base(p.netns), "addr", "flush", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	out := runPlugin(t, n.installedPlugin(), call)
	if out.Code == 0 || !strings.Contains(out.Err.Msg, "address "+p.ip+"/16 missing") {
		t.Fatalf("CHECK after removing the address: exit %d %q", out.Code, out.Err.Msg)
	}
	for i := 0; i < 2; i++ {
		if out := n.del(t, p); out.Code != 0 {
			t.Fatalf("DEL #%d: %s", i+1, out.Err.Msg)
		}
	}
	// DEL after the netns is gone.
	q := n.add(t, "gone", "")
	if b, err := exec.Command("ip", "netns", "del", filepath.Base(q.netns)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	if out := n.del(t, q); out.Code != 0 {
		t.Fatalf("DEL after the netns is gone: %s", out.Err.Msg)
	}
	n.assertClean(t)
	// A bad request fails that request with a precise message.
	bad := runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: "bad", Netns: p.netns, IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=bad;IP=192.168.77.1", Conf: n.netconf(t, "", nil)})
	if bad.Code == 0 || !strings.Contains(bad.Err.Msg, "192.168.77.1") {
		t.Fatalf("ADD with an IP outside the subnet: exit %d %q", bad.Code, bad.Err.Msg)
	}
	// Daemon down: try again later, naming the socket.
	n.stopServer()
	r := n.netns(t)
	out = runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: "down", Netns: r, IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=down", Conf: n.netconf(t, "", nil)})
	if out.Code == 0 || out.Err.Code != 11 || !strings.Contains(out.Err.Msg, n.cfg.Socket) {
		t.Fatalf("ADD with the daemon stopped: exit %d code %d %q", out.Code, out.Err.Code, out.Err.Msg)
	}
}

func (n *node) netns(t testing.TB) string {
	return podnetNewNetNS(t)
}

func TestConcurrentAddDelLeavesNothing(t *testing.T) {
	n := startNode(t, nodeOpts{})
	const total, conc = 100, 20
	conf := n.netconf(t, "", nil)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for i := 0; i < total; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			name := fmt.Sprintf("c%03d", i)
			ns := podnetNewNetNS(t)
			args := "K8S_POD_NAMESPACE=load;K8S_POD_NAME=" + name
			c := cniCall{ContainerID: "cid-" + name, Netns: ns, IfName: "eth0", Args: args, Conf: conf}
			c.Command = "ADD"
			if out := runPlugin(t, n.installedPlugin(), c); out.Code != 0 {
				errs <- fmt.Errorf("ADD %s: %s", name, out.Err.Msg)
				return
			}
			c.Command = "DEL"
			if out := runPlugin(t, n.installedPlugin(), c); out.Code != 0 {
				errs <- fmt.Errorf("DEL %s: %s", name, out.Err.Msg)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n.assertClean(t)
	n.assertNoAddressLeft(t)
}

// assertNoAddressLeft: no pod port is left in NB, and the next pod gets the
// lowest address again.
func (n *node) assertNoAddressLeft(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: n.central.NB()})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := nb.Ports(ctx, map[string]string{ovnnb.KeyVendor: ovnnb.Vendor})
	nb.Close() // before a caller counts goroutines: this check's own connection
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p.ExternalIDs[ovnnb.KeyPod] != "" {
			t.Errorf("logical switch port %s (%v) left behind", p.Name, p.IPs)
		}
	}
	p := n.add(t, "after", "")
	if p.ip != "10.16.0.2" {
		t.Errorf("first pod after the load got %s, want 10.16.0.2 (addresses leaked)", p.ip)
	}
	if out := n.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
}

// assertClean: no pod veth, no pod port, no QoS or Queue row.
func (n *node) assertClean(t testing.TB) {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "ovh") {
			t.Errorf("veth %s left behind", l.Attrs().Name)
		}
	}
	for _, r := range n.selectRows(t, "Port") {
		switch name := r["name"].(string); name {
		case "br-int", "ovn0", "mirror0":
		default:
			t.Errorf("OVS port %s left behind", name)
		}
	}
	if q := n.selectRows(t, "QoS"); len(q) != 0 {
		t.Errorf("%d QoS rows left behind", len(q))
	}
	if q := n.selectRows(t, "Queue"); len(q) != 0 {
		t.Errorf("%d Queue rows left behind", len(q))
	}
}

func TestInstallRestoresConflist(t *testing.T) {
	n := startNode(t, nodeOpts{})
	bin := n.installedPlugin()
	st, err := os.Stat(bin)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed plugin: %v %v", st, err)
	}
	sock, err := os.Stat(n.cfg.Socket)
	if err != nil || sock.Mode().Perm()&0o007 != 0 {
		t.Fatalf("socket mode %v %v: must not be world-accessible", sock.Mode(), err)
	}
	conf := filepath.Join(n.cfg.ConfDir, "00-ovnhost.conflist")
	want, _ := os.ReadFile(conf)
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFile(conf, 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(conf)
	if !bytes.Equal(got, want) {
		t.Fatalf("restored conflist differs:\n%s\nwant\n%s", got, want)
	}
}

func TestMirror(t *testing.T) {
	n := startNode(t, nodeOpts{mirrorOutput: "mirror0"})
	q := n.add(t, "plain", "")
	// Nothing mirrors yet: no mirror, no output port.
	if m := n.selectRows(t, "Mirror"); len(m) != 0 {
		t.Fatalf("%d mirrors before any pod asked for one", len(m))
	}
	p := n.add(t, "mirrored", "MIRROR=true")
	m := n.selectRows(t, "Mirror")
	if len(m) != 1 {
		t.Fatalf("%d mirrors", len(m))
	}
	src := m[0]["select_src_port"]
	ports := n.selectRows(t, "Port", ovsdb.NewCondition("name", ovsdb.ConditionEqual, podnet.HostIfName(p.id, "eth0")))
	if len(ports) != 1 {
		t.Fatal("mirrored pod's port missing")
	}
	u := ports[0]["_uuid"].(ovsdb.UUID)
	var members []any
	switch v := src.(type) {
	case ovsdb.UUID:
		members = []any{v}
	case ovsdb.OvsSet:
		members = v.GoSet
	}
	if len(members) != 1 || members[0] != u {
		t.Fatalf("mirror selects %v, want only %v", members, u)
	}
	// The output port comes up and carries the mirrored pod's traffic (what
	// tcpdump -i mirror0 shows), not the other pod's.
	waitLinkUp(t, "mirror0")
	seen := capture(t, "mirror0", func() {
		if err := ping(t, p.netns, "10.16.0.1"); err != nil {
			t.Fatal(err)
		}
		if err := ping(t, q.netns, "10.16.0.1"); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Contains(seen, net.ParseIP(p.ip).To4()) {
		t.Fatalf("no packet of the mirrored pod %s on mirror0", p.ip)
	}
	if bytes.Contains(seen, net.ParseIP(q.ip).To4()) {
		t.Fatalf("packets of the unmirrored pod %s on mirror0", q.ip)
	}
	for _, x := range []*pod{p, q} {
		if out := n.del(t, x); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
	n.assertClean(t)
}

// waitLinkUp waits (link events) until the interface exists and is up.
func waitLinkUp(t testing.TB, name string) {
	t.Helper()
	ch := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribe(ch, done); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		if l, err := netlink.LinkByName(name); err == nil && l.Attrs().Flags&net.FlagUp != 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s not up after 30 s", name)
		}
	}
}

func TestVersionStatusGC(t *testing.T) {
	n := startNode(t, nodeOpts{})
	out := runPlugin(t, n.installedPlugin(), cniCall{Command: "VERSION", Conf: []byte(`{"cniVersion":"1.1.0"}`)})
	if out.Code != 0 || !strings.Contains(string(out.Stdout), `"1.1.0"`) || !strings.Contains(string(out.Stdout), `"0.3.1"`) {
		t.Fatalf("VERSION: exit %d %s", out.Code, out.Stdout)
	}
	if out := runPlugin(t, n.installedPlugin(), cniCall{Command: "STATUS", Conf: n.netconf(t, "1.1.0", nil)}); out.Code != 0 {
		t.Fatalf("STATUS: %s", out.Err.Msg)
	}
	keep := n.add(t, "keep", "")
	drop := n.add(t, "drop", "")
	gc := n.netconf(t, "1.1.0", map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": keep.id, "ifname": "eth0"}}})
	if out := runPlugin(t, n.installedPlugin(), cniCall{Command: "GC", Conf: gc}); out.Code != 0 {
		t.Fatalf("GC: %s", out.Err.Msg)
	}
	if rows := n.selectRows(t, "Port", ovsdb.NewCondition("name", ovsdb.ConditionEqual, podnet.HostIfName(drop.id, "eth0"))); len(rows) != 0 {
		t.Fatal("GC kept the port of an attachment the runtime no longer has")
	}
	if _, err := netlink.LinkByName(podnet.HostIfName(drop.id, "eth0")); err == nil {
		t.Fatal("GC kept the veth of an attachment the runtime no longer has")
	}
	if err := ping(t, keep.netns, "10.16.0.1"); err != nil {
		t.Fatalf("the kept pod lost its network: %v", err)
	}
	if out := n.del(t, keep); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	n.assertClean(t)
}

// capture returns the frames seen on ifName (AF_PACKET) while fn runs.
func capture(t testing.TB, ifName string, fn func()) []byte {
	t.Helper()
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.Attrs().Index}); err != nil {
		t.Fatal(err)
	}
	fn()
	// Everything sent while fn ran is queued on the socket: drain it.
	var all []byte
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		all = append(all, buf[:n]...)
	}
	return all
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func TestConflictingConfigsReported(t *testing.T) {
	n := startNode(t, nodeOpts{beforeServer: func(cfg *server.Options) {
		// A stale flannel file that would win over ours, as on a converted node.
		if err := os.MkdirAll(cfg.ConfDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.ConfDir, "00-flannel.conf"), []byte(`{"cniVersion":"0.3.1","name":"cbr0","type":"flannel"}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}})
	logs := n.logs.String()
	if !strings.Contains(logs, "conflicting CNI configuration") || !strings.Contains(logs, "00-flannel.conf") {
		t.Fatalf("the outranking flannel file was not reported; server log:\n%s", logs)
	}
}

// After kill -9 of ovs-vswitchd and its restart, wired pods and the host's
// path through ovn0 work again without any CNI call.
func TestVswitchdCrash(t *testing.T) {
	n := startNode(t, nodeOpts{})
	a := n.add(t, "ca", "")
	b := n.add(t, "cb", "")
	waitOVN0(t)
	n.crash("ovs-vswitchd")
	// Packets are lost until vswitchd is back and ovn-controller has
	// reconnected (its OpenFlow back-off is about 2 s): each ping attempt
	// waits for its own replies, within an overall deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ping(t, a.netns, b.ip)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods after the vswitchd restart: %v", err)
		}
	}
	waitOVN0(t)
	ln := listen(t, b.netns, net.JoinHostPort(b.ip, "8088"))
	transfer(t, "", ln, net.JoinHostPort(b.ip, "8088"), 256<<10)
	for _, p := range []*pod{a, b} {
		if out := n.del(t, p); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
	n.assertClean(t)
}

// ADD and DEL of the same container racing each other (a runtime retrying
// while the pod is being deleted) end in a consistent state: after a final
// DEL nothing is left.
func TestSameContainerRaces(t *testing.T) {
	n := startNode(t, nodeOpts{})
	conf := n.netconf(t, "", nil)
	ns := podnetNewNetNS(t)
	c := cniCall{ContainerID: "cid-race", Netns: ns, IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=race", Conf: conf}
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		for _, cmd := range []string{"ADD", "DEL"} {
			wg.Add(1)
			go func(cmd string) {
				defer wg.Done()
				cc := c
				cc.Command = cmd
				runPlugin(t, n.installedPlugin(), cc)
			}(cmd)
		}
	}
	wg.Wait()
	c.Command = "DEL"
	if out := runPlugin(t, n.installedPlugin(), c); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	n.assertClean(t)
	// And an ADD afterwards works.
	c.Command = "ADD"
	if out := runPlugin(t, n.installedPlugin(), c); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	c.Command = "DEL"
	if out := runPlugin(t, n.installedPlugin(), c); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	n.assertClean(t)
}

// Without ovn-controller nothing sets ovn-installed: ADD fails after its
// deadline naming what it waited for, and rolls everything back.
func TestNoOVNControllerRollsBack(t *testing.T) {
	n := startNode(t, nodeOpts{serverOpts: []server.Option{server.WithTimeouts(10*time.Second, 2*time.Second), server.WithoutNodePort()}})
	n.kill("ovn-controller")
	ns := podnetNewNetNS(t)
	out := runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-noctl", Netns: ns, IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=noctl", Conf: n.netconf(t, "", nil)})
	if out.Code == 0 || out.Err.Code != 11 || !strings.Contains(out.Err.Msg, "ovn-installed=true") || !strings.Contains(out.Err.Msg, "noctl.default") {
		t.Fatalf("ADD without ovn-controller: exit %d code %d %q", out.Code, out.Err.Code, out.Err.Msg)
	}
	n.assertClean(t)
	inNetns(t, ns, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Errorf("eth0 left in the pod after a failed ADD")
		}
		return nil
	})
	// The address went back to the pool: no pod port in NB.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: n.central.NB()})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if _, found, err := nb.GetPort(ctx, "noctl.default"); err != nil || found {
		t.Fatalf("logical switch port of the failed pod: found=%v err=%v", found, err)
	}
}

// Members of --cni-socket-group can send any CNI request (issue 14.8): a
// CNI_NETNS that is the daemon's own or the host's network namespace, or
// not a network namespace, is refused, and a GC that would remove every
// pod port is refused unless it comes from root.
func TestSocketGroupMembersCannotRewireTheHost(t *testing.T) {
	n := startNode(t, nodeOpts{beforeServer: func(o *server.Options) { o.SocketGroup = "65534" }})
	for _, c := range []struct{ netns, want string }{
		{"/proc/self/ns/net", "node daemon's own network namespace"}, // opened by the daemon
		{"/proc/1/ns/net", ""}, // PID 1's (or, where the harness cannot open it, refused as unreadable)
		{"/proc/" + strconv.Itoa(os.Getpid()) + "/ns/net", "node daemon's own network namespace"},
		{"/proc/self/ns/uts", "not a network namespace"},
		{"/etc/hostname", "is not a namespace"},
	} {
		out := runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-hostns", Netns: c.netns, IfName: "eth0",
			Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=hostns", Conf: n.netconf(t, "", nil)})
		if out.Code == 0 || out.Err.Code != types.ErrInvalidNetNS || !strings.Contains(out.Err.Msg, c.netns) || !strings.Contains(out.Err.Msg, c.want) {
			t.Errorf("ADD into %s: exit %d code %d %q, want CNI code %d naming it and %q", c.netns, out.Code, out.Err.Code, out.Err.Msg, types.ErrInvalidNetNS, c.want)
		}
	}
	n.assertClean(t)

	p := n.add(t, "stays", "")
	// A GC with an empty list, from a socket group member (uid/gid 65534).
	for _, d := range []string{n.dir, filepath.Dir(n.installedPlugin())} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gc := n.netconf(t, "1.1.0", map[string]any{"cni.dev/valid-attachments": []map[string]string{}})
	cmd := exec.Command(n.installedPlugin())
	cmd.Env = []string{"CNI_COMMAND=GC", "CNI_PATH=" + filepath.Dir(n.installedPlugin())}
	cmd.Stdin = bytes.NewReader(gc)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdout, err := cmd.Output()
	if err == nil || !strings.Contains(string(stdout), "GC would remove every pod port") || !strings.Contains(string(stdout), "uid 65534") {
		t.Fatalf("GC of everything from uid 65534: %v %s", err, stdout)
	}
	if err := ping(t, p.netns, "10.16.0.1"); err != nil {
		t.Fatalf("the pod lost its network to a refused GC: %v", err)
	}
	// The same from root is the runtime's right.
	if out := runPlugin(t, n.installedPlugin(), cniCall{Command: "GC", Conf: gc}); out.Code != 0 {
		t.Fatalf("GC from root: %s", out.Err.Msg)
	}
	n.assertClean(t)
}
