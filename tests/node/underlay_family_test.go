package node_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/physswitch"
)

// underlayFamily is one IP family plan of TestUnderlayVLANFamilies: the
// cluster's ranges and, per VLAN, the Subnet's cidrBlock and the physical
// router's gateway addresses (one per family, in cidrBlock's order).
type underlayFamily struct {
	name     string
	cluster  clusterSpec
	protocol string // the Subnet's spec.protocol
	cidrs    map[int][]string
	gateways map[int][]string
}

// VLAN 200's IPv6 gateway (the address "beyond" VLAN 100's gateway) differs
// from VLAN 100's in its last 24 bits: the two share no solicited-node
// group, so reaching it through the interconnection needs the cluster
// router to solicit VLAN 100's gateway at that gateway's own group.
var underlayFamilies = []underlayFamily{
	{name: "ipv4", cluster: clusterSpec{nodes: 2}, protocol: "IPv4",
		cidrs:    map[int][]string{100: {"10.100.0.0/24"}, 200: {"10.200.0.0/24"}},
		gateways: map[int][]string{100: {"10.100.0.254"}, 200: {"10.200.0.254"}}},
	{name: "dual-stack", cluster: clusterSpec{nodes: 2, dualStack: true}, protocol: "Dual",
		cidrs:    map[int][]string{100: {"10.100.0.0/24", "fd00:a100::/64"}, 200: {"10.200.0.0/24", "fd00:a200::/64"}},
		gateways: map[int][]string{100: {"10.100.0.254", "fd00:a100::fe"}, 200: {"10.200.0.254", "fd00:a200::c8"}}},
	{name: "ipv6-only", cluster: clusterSpec{nodes: 2, ipv6Only: true}, protocol: "IPv6",
		cidrs:    map[int][]string{100: {"fd00:a100::/64"}, 200: {"fd00:a200::/64"}},
		gateways: map[int][]string{100: {"fd00:a100::fe"}, 200: {"fd00:a200::c8"}}},
}

// TestUnderlayVLANFamilies: underlay VLAN Subnets in each IP family
// (IPv4, dual-stack, IPv6-only clusters), as a Kube-OVN user writes them
// (cidrBlock and gateway of each family). Two nodes and a physical
// router on an 802.1Q switch, VLANs 100 and 200. Per family: the pods
// get an address of each of the Subnet's families (the ip_address
// annotation says the same), a default route of each family via the
// physical router, reach the pod on the other node and a TCP service of
// the router (the machine on the physical network) over each family,
// their frames crossing the switch tagged with VLAN 100 (captured on the
// node's trunk port); the VLAN 200 pod reaches its own gateway but not
// VLAN 100. Then u2oInterconnection: the router gets an address of each
// family on VLAN 100 (Subnet status); a new pod's default route of each
// family is via that family's address, and it reaches an overlay pod on
// the other node both ways, a ClusterIP of each family backed by it, its
// physical gateway and beyond it over each family. In the dual-stack
// cluster, a dual-stack underlay Subnet with only IPv4 gateways is
// refused, by kube-apiserver or the controller, naming the fix.
func TestUnderlayVLANFamilies(t *testing.T) {
	for _, fam := range underlayFamilies {
		t.Run(fam.name, func(t *testing.T) { testUnderlayVLANFamily(t, fam) })
	}
}

func testUnderlayVLANFamily(t *testing.T, fam underlayFamily) {
	start := time.Now()
	sc := startServiceClusterWith(t, fam.cluster)
	c := sc.cluster
	sw := physswitch.Start(t, newNetns(t, "ohs"))
	router := newNetns(t, "ohr")
	for i, n := range c.nodes {
		port := fmt.Sprintf("n%c", 'a'+i)
		run(t, "ip", "link", "add", "eth1", "netns", n.NS, "type", "veth", "peer", "name", port, "netns", sw.NS)
		run(t, "ip", "netns", "exec", n.NS, "ethtool", "-K", "eth1", "tx", "off")
		run(t, "ip", "-n", n.NS, "link", "set", "eth1", "up")
		sw.Trunk(t, port, 100, 200)
	}
	// The physical router: one interface per VLAN (an access port)
	// holding that VLAN's gateway of each family, forwarding nothing.
	// (No DAD: its link-local address, the source of the router
	// advertisements below, is usable at once.)
	run(t, "ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0", "net.ipv6.conf.default.accept_dad=0")
	for _, vid := range []int{100, 200} {
		v := fmt.Sprint(vid)
		run(t, "ip", "link", "add", "r"+v, "netns", router, "type", "veth", "peer", "name", "s"+v, "netns", sw.NS)
		sw.Access(t, "s"+v, vid)
		run(t, "ip", "netns", "exec", router, "ethtool", "-K", "r"+v, "tx", "off")
		for i, gw := range fam.gateways[vid] {
			bits := strings.SplitN(fam.cidrs[vid][i], "/", 2)[1]
			args := []string{"-n", router, "addr", "add", gw + "/" + bits, "dev", "r" + v}
			if netip.MustParseAddr(gw).Is6() {
				args = append(args, "nodad") // usable at once
			}
			run(t, "ip", args...)
		}
		run(t, "ip", "-n", router, "link", "set", "r"+v, "up")
	}
	serveName(t, router, 7000, false, "outside")

	ctx := context.Background()
	create := func(kind, name string, spec map[string]any) {
		t.Helper()
		gvr := subnetGVR
		switch kind {
		case "ProviderNetwork":
			gvr = providerNetworkGVR
		case "Vlan":
			gvr = vlanGVR
		}
		if _, err := c.cp.dc.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("ProviderNetwork", "physnet1", map[string]any{"defaultInterface": "eth1"})
	for _, name := range c.names {
		waitNode(t, c, name, "physnet1 ready=true", func(nd *corev1.Node) bool {
			return nd.Labels["physnet1.provider-network.kubernetes.io/ready"] == "true"
		})
	}
	for _, vid := range []int{100, 200} {
		v := fmt.Sprint(vid)
		create("Vlan", "vlan"+v, map[string]any{"id": int64(vid), "provider": "physnet1"})
		c.ensureNamespace(t, "u"+v, nil)
		var exclude []any
		for _, gw := range fam.gateways[vid] {
			exclude = append(exclude, gw)
		}
		create("Subnet", "sub"+v, map[string]any{"protocol": fam.protocol, "cidrBlock": strings.Join(fam.cidrs[vid], ","),
			"gateway": strings.Join(fam.gateways[vid], ","), "excludeIps": exclude, "vlan": "vlan" + v, "namespaces": []any{"u" + v}})
	}

	if len(fam.cidrs[200]) == 2 {
		// A dual-stack underlay Subnet naming only its IPv4 gateway:
		// kube-apiserver refuses it (the CRD's rule), saying what to
		// write. Two IPv4 gateways pass that rule; the controller
		// refuses the Subnet, naming the missing IPv6 gateway and the
		// fix in its Validated condition, and only that Subnet.
		bad := func(name, gateway string) error {
			_, err := c.cp.dc.Resource(subnetGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
				"metadata": map[string]any{"name": name}, "spec": map[string]any{"cidrBlock": "10.201.0.0/24,fd00:a201::/64", "gateway": gateway, "vlan": "vlan200"}}}, metav1.CreateOptions{})
			return err
		}
		if err := bad("sub201", "10.201.0.254"); err == nil || !strings.Contains(err.Error(), "gateway must list one address per CIDR of cidrBlock") ||
			!strings.Contains(err.Error(), "the physical router's address of each family") {
			t.Errorf("creating a dual-stack underlay Subnet with only an IPv4 gateway: %v, want refused saying a gateway per family", err)
		}
		if err := bad("sub202", "10.201.0.254,10.201.0.253"); err != nil {
			t.Fatal(err)
		}
		cond := c.waitSubnetCondition(t, "sub202", "Validated", 30*time.Second)
		msg, _ := cond["message"].(string)
		if cond["status"] != "False" || cond["reason"] != "InvalidField" || !strings.Contains(msg, `gateway "10.201.0.254,10.201.0.253" has no IPv6 address`) ||
			!strings.Contains(msg, `spec.vlan "vlan200"`) || !strings.Contains(msg, `gateway: "10.201.0.254,<the IPv6 gateway in fd00:a201::/64>"`) {
			t.Errorf("Subnet sub202 (dual-stack, two IPv4 gateways): Validated %v, want False, InvalidField, naming the missing IPv6 gateway and the fix", cond)
		}
	}
	a100 := c.addPod(t, 0, "u100", "a100", nil, nil)
	b100 := c.addPod(t, 1, "u100", "b100", nil, nil)
	a200 := c.addPod(t, 0, "u200", "a200", nil, nil)
	sc.waitChassisCaughtUp(t)
	for _, p := range []struct {
		pod *clusterPod
		vid int
	}{{a100, 100}, {b100, 100}, {a200, 200}} {
		checkUnderlayPodAddresses(t, c, p.pod, fam, p.vid, fam.gateways[p.vid])
	}

	for i, gw := range fam.gateways[100] {
		if err := ping(a100.netns, b100.ips[i], 3); err != nil {
			t.Fatalf("VLAN 100 pod on node-a to the one on node-b at %s: %v\n%s", b100.ips[i], err, underlayState(sw, c))
		}
		// The packet crosses the physical switch tagged with VLAN 100,
		// from the node's trunk port.
		capture := captureOne(t, sw.NS, "na", fmt.Sprintf("vlan 100 and (icmp or icmp6) and src host %s and dst host %s", a100.ips[i], gw))
		if err := ping(a100.netns, gw, 3); err != nil {
			t.Fatalf("VLAN 100 pod to its physical gateway %s: %v\n%s", gw, err, underlayState(sw, c))
		}
		if frame := capture(); !strings.Contains(frame, "vlan 100,") || !strings.Contains(frame, a100.ips[i]+" > "+gw) {
			t.Errorf("a100's echo request to %s on the trunk from node-a, want it tagged with VLAN 100: %q", gw, frame)
		}
		addr := net.JoinHostPort(gw, "7000")
		if got, err := askWithin(a100.netns, addr, 10*time.Second); err != nil || got != "outside" {
			t.Fatalf("VLAN 100 pod to the machine on the physical network at %s: %q %v", addr, got, err)
		}
	}
	for _, gw := range fam.gateways[200] {
		if err := ping(a200.netns, gw, 3); err != nil {
			t.Fatalf("VLAN 200 pod to its physical gateway %s: %v", gw, err)
		}
	}
	if fam.cidrs[100][len(fam.cidrs[100])-1] != "10.100.0.0/24" {
		// The physical router advertises itself (router lifetime 30
		// min): the pod's kernel receives the advertisement and
		// takes nothing from it (accept_ra=0); its IPv6 default
		// route stays the one via its gateway.
		advertised := func() bool {
			if err := sendRouterAdvertisement(router, "r100"); err != nil {
				t.Fatalf("router advertisement on r100: %v", err)
			}
			out, _ := exec.Command("ip", "netns", "exec", a100.netns, "cat", "/proc/net/snmp6").CombinedOutput()
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "Icmp6InRouterAdvertisements" && f[1] != "0" {
					return true
				}
			}
			return false
		}
		for deadline := time.Now().Add(10 * time.Second); !advertised(); {
			if time.Now().After(deadline) {
				t.Fatal("a100 received no router advertisement from the physical router within 10 s (Icmp6InRouterAdvertisements stays 0)")
			}
		}
		if r := run(t, "ip", "-n", a100.netns, "-6", "route", "show", "default"); strings.Contains(r, "proto ra") || strings.Count(r, "default") != 1 {
			t.Errorf("a100 took a default route from the physical router's advertisement:\n%s", r)
		}
	}
	if got := sw.Learned(t, podMAC(t, a100)); !slices.Equal(got, []string{"na vlan 100"}) {
		t.Errorf("the physical switch learned a100's MAC at %v, want [na vlan 100]", got)
	}
	// VLAN separation in each family: a route straight onto VLAN 100's
	// segment gets the VLAN 200 pod nowhere.
	for i, cidr := range fam.cidrs[100] {
		run(t, "ip", "-n", a200.netns, "route", "add", cidr, "dev", "eth0")
		if out, err := exec.Command("ip", "netns", "exec", a200.netns, "ping", "-c", "3", "-i", "0.2", "-W", "1", b100.ips[i]).CombinedOutput(); err == nil {
			t.Fatalf("the VLAN 200 pod reached the VLAN 100 pod %s:\n%s", b100.ips[i], out)
		}
	}
	if got := sw.Learned(t, podMAC(t, a200)); !slices.Equal(got, []string{"na vlan 200"}) {
		t.Errorf("the VLAN 200 pod's MAC was learned at %v, want only [na vlan 200]", got)
	}

	// u2oInterconnection on VLAN 100.
	if _, err := c.cp.dc.Resource(subnetGVR).Patch(ctx, "sub100", types.MergePatchType, []byte(`{"spec":{"u2oInterconnection":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitSubnetStatus(t, c, "sub100", "u2oInterconnectionIP")
	u2o := strings.Split(st["u2oInterconnectionIP"], ",")
	if len(u2o) != len(fam.cidrs[100]) || st["u2oInterconnectionVPC"] != "ovn-cluster" || st["u2oInterconnectionMAC"] == "" {
		t.Fatalf("Subnet sub100 status after u2oInterconnection: %v, want an address per family of %v", st, fam.cidrs[100])
	}
	for i, ip := range u2o {
		a, err := netip.ParseAddr(ip)
		if err != nil || !netip.MustParsePrefix(fam.cidrs[100][i]).Contains(a) || slices.Contains(fam.gateways[100], ip) || slices.Contains(a100.ips, ip) || slices.Contains(b100.ips, ip) {
			t.Fatalf("u2oInterconnectionIP %q: %s is not an unused address of %s", st["u2oInterconnectionIP"], ip, fam.cidrs[100][i])
		}
	}
	c100 := c.addPod(t, 0, "u100", "c100", nil, nil)
	over := c.addPod(t, 1, "default", "over", map[string]string{"app": "over"}, nil)
	sc.waitChassisCaughtUp(t)
	checkUnderlayPodAddresses(t, c, c100, fam, 100, u2o)
	if len(over.ips) != len(c100.ips) {
		t.Fatalf("overlay pod addresses %v, want one per family as c100's %v", over.ips, c100.ips)
	}
	diag := func(dst string) string {
		return u2oState(c, sw, c100, "", "", dst) + "u2o policies:\n" + run(t, "ovn-nbctl", "--db="+c.cp.central.NB(), "lr-policy-list", "ovn-cluster")
	}
	sc.markReady(t, over)
	serveName(t, over.netns, 8080, false, "over")
	var vips []string
	if len(over.ips) == 2 {
		require := corev1.IPFamilyPolicyRequireDualStack
		vips = sc.createFamilyService(t, "default", "over", map[string]string{"app": "over"}, corev1.ProtocolTCP, 80, 8080, &require, nil)
	} else {
		vips = []string{sc.createService(t, "default", "over", map[string]string{"app": "over"}, corev1.ProtocolTCP, 80, 8080, false)}
	}
	if len(vips) != len(over.ips) {
		t.Fatalf("Service over: ClusterIPs %v, want one per family", vips)
	}
	for i, vip := range vips {
		sc.waitBackends(t, "default", "over", corev1.ProtocolTCP, net.JoinHostPort(vip, "80"), over.ips[i])
	}
	sc.waitChassisCaughtUp(t) // the load balancer is on node-a's flows too
	for i := range c100.ips {
		if err := ping(c100.netns, over.ips[i], 3); err != nil {
			t.Fatalf("interconnected underlay pod to an overlay pod on the other node at %s: %v\n%s", over.ips[i], err, diag(over.ips[i]))
		}
		if err := ping(over.netns, c100.ips[i], 3); err != nil {
			t.Fatalf("overlay pod to the interconnected underlay pod at %s: %v\n%s", c100.ips[i], err, diag(c100.ips[i]))
		}
		addr := net.JoinHostPort(vips[i], "80")
		if got, err := askWithin(c100.netns, addr, 10*time.Second); err != nil || got != "over" {
			t.Fatalf("interconnected underlay pod to ClusterIP %s (backend the overlay pod): %q %v\n%s", addr, got, err, diag(over.ips[i]))
		}
		if err := ping(c100.netns, fam.gateways[100][i], 3); err != nil {
			t.Fatalf("interconnected underlay pod to its physical gateway %s: %v", fam.gateways[100][i], err)
		}
		// Beyond the physical gateway (the router's VLAN 200 address):
		// through the cluster router, which passes it on to the gateway.
		beyond := fam.gateways[200][i]
		if err := ping(c100.netns, beyond, 3); err != nil {
			t.Fatalf("interconnected underlay pod beyond its physical gateway at %s: %v\n%s", beyond, err, diag(beyond))
		}
	}
	t.Logf("%s: %.1f s", fam.name, time.Since(start).Seconds())
}

// checkUnderlayPodAddresses: the pod has an address of each family of its
// VLAN's Subnet, in cidrBlock's order, which its ip_address annotation
// lists too, with vlan_id and provider_network; its default route of each
// family is via that family's gateway (the physical router, or the
// interconnection address).
func checkUnderlayPodAddresses(t *testing.T, c *cluster, p *clusterPod, fam underlayFamily, vid int, gateways []string) {
	t.Helper()
	cidrs := fam.cidrs[vid]
	if len(p.ips) != len(cidrs) {
		t.Fatalf("%s/%s got %v, want one address of each of %v", p.namespace, p.name, p.ips, cidrs)
	}
	for i, ip := range p.ips {
		if !netip.MustParsePrefix(cidrs[i]).Contains(netip.MustParseAddr(ip)) {
			t.Fatalf("%s/%s got %v: %s is not in %s", p.namespace, p.name, p.ips, ip, cidrs[i])
		}
	}
	pod, err := c.cp.kc.CoreV1().Pods(p.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := pod.Annotations
	if a[annotations.IPAddress] != strings.Join(p.ips, ",") || a[annotations.VlanID] != fmt.Sprint(vid) || a[annotations.ProviderNetwork] != "physnet1" {
		t.Errorf("%s/%s annotations ip_address %q vlan_id %q provider_network %q, want %q, %d and physnet1", p.namespace, p.name,
			a[annotations.IPAddress], a[annotations.VlanID], a[annotations.ProviderNetwork], strings.Join(p.ips, ","), vid)
	}
	for _, gw := range gateways {
		family := "-4"
		if netip.MustParseAddr(gw).Is6() {
			family = "-6"
		}
		if r := run(t, "ip", "-n", p.netns, family, "route", "show", "default"); !strings.Contains(r, "via "+gw+" ") {
			t.Errorf("%s/%s's default route (%s) is not via %s:\n%s", p.namespace, p.name, family, gw, r)
		}
	}
	if r := run(t, "ip", "-n", p.netns, "-6", "route", "show", "default"); len(gateways) == 1 && netip.MustParseAddr(gateways[0]).Is4() && r != "" {
		t.Errorf("%s/%s of an IPv4 subnet has an IPv6 default route:\n%s", p.namespace, p.name, r)
	}
}

// captureOne starts tcpdump on dev in network namespace ns for the first
// frame matching filter, link-level header printed; it returns once
// tcpdump listens. The function returned waits (10 s at most) for the
// frame and returns tcpdump's line for it ("" when none came).
func captureOne(t *testing.T, ns, dev, filter string) func() string {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-e", "-n", "-l", "-c", "1", "-i", dev, filter)
	var out strings.Builder
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	done := make(chan error, 1)
	listening := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stderr)
		var said []string
		for s.Scan() {
			said = append(said, s.Text())
			if strings.Contains(s.Text(), "listening on") {
				close(listening)
				for s.Scan() {
				}
				break
			}
		}
		done <- fmt.Errorf("%v: %s", cmd.Wait(), strings.Join(said, "; "))
	}()
	stop := func() { _ = cmd.Process.Kill() }
	t.Cleanup(stop)
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("tcpdump on %s in %s ended before listening: %v", dev, ns, err)
	case <-time.After(10 * time.Second):
		stop()
		t.Fatalf("tcpdump on %s in %s: not listening after 10 s", dev, ns)
	}
	return func() string {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			stop()
			<-done
		}
		return strings.TrimSpace(out.String())
	}
}

// sendRouterAdvertisement sends one IPv6 router advertisement (router
// lifetime 1800 s, no option) to all nodes on dev, from network namespace
// ns, as a physical router does periodically.
func sendRouterAdvertisement(ns, dev string) error {
	return inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// Hop limit 255, as receivers require; the kernel fills in the
		// ICMPv6 checksum and the link-local source.
		for _, o := range []int{unix.IPV6_MULTICAST_HOPS, unix.IPV6_UNICAST_HOPS} {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o, 255); err != nil {
				return err
			}
		}
		ra := []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
		to := &unix.SockaddrInet6{ZoneId: uint32(ifi.Index), Addr: netip.MustParseAddr("ff02::1").As16()}
		return unix.Sendto(fd, ra, 0, to)
	})
}
