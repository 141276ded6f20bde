package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cluster is a Kubernetes-mode cluster of node daemons in network
// namespaces: a real apiserver and controller (controlPlane), an underlay
// bridge joining the nodes (192.168.100.<i+1>/24 on ul0, Geneve in
// userspace), and the outside (world) behind each node's wan0
// (192.168.<207+i>.2, default route), answering with the source it sees.
type cluster struct {
	cp    *controlPlane
	nodes []*node
	names []string // Kubernetes node names: node-a, node-b, ...
	world *outside
}

// startCluster starts the control plane and n ready node daemons.
func startCluster(t testing.TB, n int, extraArgs ...string) *cluster {
	t.Helper()
	return startClusterWith(t, clusterSpec{nodes: n}, extraArgs...)
}

// clusterSpec is what differs between the clusters of the tests.
type clusterSpec struct {
	nodes int
	// dualStack: ovn-default and join in both families, Service ranges
	// in both (kube-apiserver's, the controller's and the nodes'
	// SVC_CIDR), and the outside reachable over IPv6 too: node i's wan0
	// has fd00:<207+i>::2/64 with its default IPv6 route via
	// fd00:<207+i>::1. The tunnel stays IPv4.
	dualStack bool
	// ipv6Only: as dualStack but every cluster range IPv6 only, and the
	// underlay too: node i's ul0 has fd00:192:168:100::<i+1>/64 (no IPv4
	// address), its Node's InternalIP, so Geneve runs over IPv6.
	ipv6Only bool
	// crds are more CRDs for the control plane (controlPlaneSpec.crds).
	crds []string
	// nodeNB gives the nodes the NB address too (OVN_NB_ADDR): their
	// node APIs then answer netctl's NB reads (nbctl, vpc, diagnose pod).
	nodeNB bool
}

// Address plans of startClusterWith: dual-stack and IPv6-only.
const (
	dualStackDefaultCIDR = "10.16.0.0/16,fd00:10:16::/64"
	dualStackJoinCIDR    = "100.64.0.0/16,fd00:100:64::/112"
	dualStackServiceCIDR = "10.96.0.0/12,fd00:10:96::/112"
	ipv6DefaultCIDR      = "fd00:10:16::/64"
	ipv6JoinCIDR         = "fd00:100:64::/112"
	ipv6ServiceCIDR      = "fd00:10:96::/112"
)

// ranges are the cluster's default, join and Service ranges ("": the
// programs' IPv4 defaults).
func (s clusterSpec) ranges() (def, join, svc string) {
	switch {
	case s.ipv6Only:
		return ipv6DefaultCIDR, ipv6JoinCIDR, ipv6ServiceCIDR
	case s.dualStack:
		return dualStackDefaultCIDR, dualStackJoinCIDR, dualStackServiceCIDR
	}
	return "", "", ""
}

// startClusterWith starts the control plane and spec.nodes ready node daemons.
func startClusterWith(t testing.TB, spec clusterSpec, extraArgs ...string) *cluster {
	t.Helper()
	cps := controlPlaneSpec{crds: spec.crds}
	def, join, svc := spec.ranges()
	if def != "" {
		cps.api.ServiceCIDRs = svc
		cps.ctrlArgs = []string{"--default-cidr=" + def, "--node-switch-cidr=" + join, "--service-cluster-ip-range=" + svc}
	}
	cp := startControlPlaneWith(t, cps)
	n := spec.nodes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &cluster{cp: cp, world: &outside{ns: newNetns(t, "ohx"), addr: "192.168.207.1:7000"}}
	underlay := newNetns(t, "ohu")
	run(t, "ip", "-n", underlay, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", underlay, "link", "set", "br0", "up")
	apiAddr := strings.TrimPrefix(cp.api.URL, "https://")
	for i := 0; i < n; i++ {
		nd := newNode(t)
		name := fmt.Sprintf("node-%c", 'a'+i)
		ip, ipNet := fmt.Sprintf("192.168.100.%d", i+1), "/24"
		if spec.ipv6Only {
			ip, ipNet = fmt.Sprintf("fd00:192:168:100::%d", i+1), "/64"
		}
		port := fmt.Sprintf("ul%c", 'a'+i)
		run(t, "ip", "link", "add", "ul0", "netns", nd.NS, "type", "veth", "peer", "name", port, "netns", underlay)
		run(t, "ip", "-n", underlay, "link", "set", port, "master", "br0", "up")
		addr := []string{"-n", nd.NS, "addr", "add", ip + ipNet, "dev", "ul0"}
		if spec.ipv6Only {
			addr = append(addr, "nodad")
		}
		run(t, "ip", addr...)
		run(t, "ip", "-n", nd.NS, "link", "set", "ul0", "up")
		wan := fmt.Sprintf("wan%c", 'a'+i)
		run(t, "ip", "link", "add", "wan0", "netns", nd.NS, "type", "veth", "peer", "name", wan, "netns", c.world.ns)
		run(t, "ip", "-n", nd.NS, "addr", "add", fmt.Sprintf("192.168.%d.2/24", 207+i), "dev", "wan0")
		run(t, "ip", "-n", nd.NS, "link", "set", "wan0", "up")
		run(t, "ip", "-n", nd.NS, "route", "add", "default", "via", fmt.Sprintf("192.168.%d.1", 207+i))
		run(t, "ip", "-n", c.world.ns, "addr", "add", fmt.Sprintf("192.168.%d.1/24", 207+i), "dev", wan)
		run(t, "ip", "-n", c.world.ns, "link", "set", wan, "up")
		if def != "" {
			// nodad: the addresses are usable at once (DAD would hold them
			// tentative for a second or two).
			run(t, "ip", "-n", nd.NS, "addr", "add", fmt.Sprintf("fd00:%d::2/64", 207+i), "dev", "wan0", "nodad")
			run(t, "ip", "-n", nd.NS, "-6", "route", "add", "default", "via", fmt.Sprintf("fd00:%d::1", 207+i))
			run(t, "ip", "-n", c.world.ns, "addr", "add", fmt.Sprintf("fd00:%d::1/64", 207+i), "dev", wan, "nodad")
		}
		if _, err := cp.kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		proxyAPIInto(t, nd.NS, apiAddr)
		nd.Env = []string{"OVN_SB_ADDR=" + cp.central.SB(), "IFACE=ul0", "KUBECONFIG=" + cp.api.Kubeconfig}
		if svc != "" {
			nd.Env = append(nd.Env, "SVC_CIDR="+svc)
		}
		if spec.nodeNB {
			nd.Env = append(nd.Env, "OVN_NB_ADDR="+cp.central.NB())
		}
		c.nodes, c.names = append(c.nodes, nd), append(c.names, name)
	}
	c.world.serve(t)
	for i, nd := range c.nodes {
		nd.Start(append([]string{"--userspace-tunnel", "--node-name=" + c.names[i]}, extraArgs...)...)
	}
	return c
}

// clusterPod is a pod of the cluster: its Kubernetes object and the network
// namespace the installed plugin wired as kubelet would.
type clusterPod struct {
	node      *node
	nodeName  string
	namespace string // Kubernetes namespace
	name      string
	netns     string
	ip        string   // the first address of the CNI result
	ips       []string // all of them (a dual-stack pod has one per family)
}

// ensureNamespace creates a Kubernetes namespace (with labels) if missing.
func (c *cluster) ensureNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	_, err := c.cp.kc.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// addPod creates a pod on node i and runs CNI ADD for it. The pod's
// interface is removed (CNI DEL) at the end of the test unless deletePod ran.
func (c *cluster) addPod(t testing.TB, i int, namespace, name string, labels, annotations map[string]string) *clusterPod {
	t.Helper()
	return c.addPodPorts(t, i, namespace, name, labels, annotations, nil)
}

// addPodPorts is addPod with the container's ports in the Pod object.
func (c *cluster) addPodPorts(t testing.TB, i int, namespace, name string, labels, annotations map[string]string, ports []corev1.ContainerPort) *clusterPod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &clusterPod{node: c.nodes[i], nodeName: c.names[i], namespace: namespace, name: name}
	if _, err := c.cp.kc.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: p.nodeName, Containers: []corev1.Container{{Name: "c", Image: "none", Ports: ports}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.netns = newNetns(t, "ohk")
	out, err := cniIn(p.node, "ADD", p.netns, namespace, name)
	if err != nil {
		t.Fatalf("CNI ADD %s/%s on %s: %v\n%s\n%s", namespace, name, p.nodeName, err, out, p.node.LogTail())
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("CNI ADD %s/%s result %s: %v", namespace, name, out, err)
	}
	for _, a := range res.IPs {
		p.ips = append(p.ips, strings.Split(a.Address, "/")[0])
	}
	p.ip = p.ips[0]
	t.Cleanup(func() { _, _ = cniIn(p.node, "DEL", p.netns, namespace, name) })
	return p
}

// deletePod removes a pod as kubelet and the API would: CNI DEL, then the object.
func (c *cluster) deletePod(t testing.TB, p *clusterPod) {
	t.Helper()
	if out, err := cniIn(p.node, "DEL", p.netns, p.namespace, p.name); err != nil {
		t.Fatalf("CNI DEL %s/%s: %v\n%s", p.namespace, p.name, err, out)
	}
	zero := int64(0)
	if err := c.cp.kc.CoreV1().Pods(p.namespace).Delete(context.Background(), p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// addExternalNetwork gives the outside an external network for EIP/SNAT
// (Kube-OVN's seed 002 layout): a bridge brext in the outside namespace
// holding 172.56.0.1/16, and on each node i of nodes a veth nic (the
// node's external NIC, up, no address) whose peer is a port of brext.
// Transmit checksum offload is off on the outside's side: the userspace
// datapath forwards what it reads from the NIC as it is.
func (c *cluster) addExternalNetwork(t testing.TB, nic string, nodes ...int) {
	t.Helper()
	w := c.world.ns
	if _, err := exec.Command("ip", "-n", w, "link", "show", "brext").CombinedOutput(); err != nil {
		run(t, "ip", "-n", w, "link", "add", "brext", "type", "bridge")
		run(t, "ip", "-n", w, "addr", "add", "172.56.0.1/16", "dev", "brext")
		run(t, "ip", "-n", w, "link", "set", "brext", "up")
		run(t, "ip", "netns", "exec", w, "ethtool", "-K", "brext", "tx", "off")
	}
	for _, i := range nodes {
		peer := fmt.Sprintf("ext%c", 'a'+i)
		run(t, "ip", "link", "add", nic, "netns", c.nodes[i].NS, "type", "veth", "peer", "name", peer, "netns", w)
		run(t, "ip", "-n", w, "link", "set", peer, "master", "brext", "up")
		run(t, "ip", "netns", "exec", w, "ethtool", "-K", peer, "tx", "off")
		run(t, "ip", "netns", "exec", c.nodes[i].NS, "ethtool", "-K", nic, "tx", "off")
		run(t, "ip", "-n", c.nodes[i].NS, "link", "set", nic, "up")
	}
}
