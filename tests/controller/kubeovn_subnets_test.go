package controller_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func kubeOVNSubnetsPath() string {
	return filepath.Join(testenv.RepoRoot(), "controller", "apis", "kubeovn", "v1", "testdata", "kubeovn-subnets.yaml")
}

// TestKubeOVNSubnetsAcceptedAndApplied (issue 13): the eight Subnets a
// Kube-OVN user brings (its stored ovn-default and join, the examples of its
// guides, one as Kube-OVN 1.11 stored it) are admitted by the shipped CRD
// and are Validated=True/Ready=True with reason ValidationSucceeded; pods
// land in the subnets the namespaces and the namespace selector choose; the
// private subnet is isolated (ovn-trace through the real northd's logical
// flows: a packet from a subnet it does not allow is dropped, from its
// allowSubnets and from inside it delivered), and isolation goes away when
// private is edited off.
func TestKubeOVNSubnetsAcceptedAndApplied(t *testing.T) {
	testenv.RequireCommands(t, "ovn-trace")
	e := newEnv(t)
	e.applyYAML(kubeOVNSubnetsPath())
	e.createNode("node-a", "192.168.10.11")
	for _, ns := range []string{"ns1", "priv"} {
		e.createNamespace(ns, nil)
	}
	if _, err := e.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue", Labels: map[string]string{"team": "blue"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startController()
	names := []string{"ovn-default", "join", "subnet-guide", "private-guide", "stored-1-11", "gateway-guide", "dual-guide", "selector-guide"}
	e.waitFor(60*time.Second, "all eight Subnets Validated=True ValidationSucceeded and Ready=True", func() (bool, string) {
		var bad []string
		for _, n := range names {
			s := e.subnet(n)
			v, r := cond(s, kubeovnv1.Validated), cond(s, kubeovnv1.Ready)
			if v == nil || r == nil || v.Status != "True" || v.Reason != kubeovnv1.ValidationSucceeded || r.Status != "True" {
				bad = append(bad, fmt.Sprintf("%s: %+v %+v", n, v, r))
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})

	pods := map[string]struct{ ns, subnet, cidr string }{
		"a": {"ns1", "subnet-guide", "10.66.0.0/16"},
		"b": {"priv", "private-guide", "10.69.0.0/16"},
		"c": {"default", "ovn-default", "10.16.0.0/16"},
		"d": {"priv", "private-guide", "10.69.0.0/16"},
		"e": {"blue", "selector-guide", "10.71.0.0/16"},
	}
	for name, p := range pods {
		e.createPod(p.ns, name, "node-a", nil)
	}
	got := map[string]*corev1.Pod{}
	e.waitFor(60*time.Second, "five pods annotated in their subnets", func() (bool, string) {
		var bad []string
		for name, p := range pods {
			o, ok, _ := e.pods.GetStore().GetByKey(p.ns + "/" + name)
			if !ok || !annotated(o.(*corev1.Pod)) {
				bad = append(bad, name+": not annotated")
				continue
			}
			pod := o.(*corev1.Pod)
			if pod.Annotations[annotations.LogicalSwitch] != p.subnet || !inCIDR(pod.Annotations[annotations.IPAddress], p.cidr) {
				bad = append(bad, fmt.Sprintf("%s: %v", name, pod.Annotations))
			}
			got[name] = pod
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
	// subnet-guide excludes 10.66.0.1..10.66.0.10: its first pod gets .11.
	if ip := got["a"].Annotations[annotations.IPAddress]; ip != "10.66.0.11" {
		t.Fatalf("pod a in subnet-guide got %s, want 10.66.0.11 (excludeIps honoured)", ip)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.waitFor(30*time.Second, "isolation ACLs on switch private-guide", func() (bool, string) {
		acls, err := e.nb.SwitchACLs(ctx, "private-guide", nil)
		return err == nil && len(acls) == 5, fmt.Sprint(acls, err)
	})
	if err := e.central.WaitNorthd(ctx); err != nil {
		t.Fatal(err)
	}
	trace := func(from, to string) string {
		return e.trace(t, got[from], got[to])
	}
	expectDelivered := func(from, to string, want bool) {
		t.Helper()
		out := trace(from, to)
		port := ovnnet.PortName(got[to].Namespace, got[to].Name)
		delivered := strings.Contains(out, `output("`+port+`")`) || strings.Contains(out, `output(\"`+port+`\")`)
		if delivered != want {
			t.Fatalf("packet %s -> %s: delivered=%v, want %v; ovn-trace:\n%s", from, to, delivered, want, out)
		}
	}
	expectDelivered("c", "b", true)  // ovn-default is in allowSubnets
	expectDelivered("d", "b", true)  // inside the subnet
	expectDelivered("a", "b", false) // subnet-guide is not allowed in
	expectDelivered("b", "a", false) // nor out
	expectDelivered("a", "c", true)  // other subnets are not affected

	e.editSubnet("private-guide", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, false, "spec", "private")
	})
	e.waitFor(30*time.Second, "isolation ACLs removed from private-guide", func() (bool, string) {
		acls, err := e.nb.SwitchACLs(ctx, "private-guide", nil)
		return err == nil && len(acls) == 0, fmt.Sprint(acls, err)
	})
	if err := e.central.WaitNorthd(ctx); err != nil {
		t.Fatal(err)
	}
	expectDelivered("a", "b", true)
}

// trace runs ovn-trace on the real SB for an ICMP echo from pod src to pod
// dst (routed through the cluster router when they are on different
// switches) that opens a connection, and returns its minimal output.
func (e *env) trace(t *testing.T, src, dst *corev1.Pod) string {
	t.Helper()
	sa, da := src.Annotations, dst.Annotations
	ethDst := da[annotations.MACAddress]
	if sa[annotations.LogicalSwitch] != da[annotations.LogicalSwitch] {
		ethDst = ovnnb.RouterPortMAC(ovnnb.RouterPortName(ovnnet.DefaultRouter, sa[annotations.LogicalSwitch]))
	}
	flow := fmt.Sprintf(`inport == "%s" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == %s && ip.ttl == 64 && icmp4.type == 8`,
		ovnnet.PortName(src.Namespace, src.Name), sa[annotations.MACAddress], ethDst, sa[annotations.IPAddress], da[annotations.IPAddress])
	// A new connection at every conntrack step (ovn-trace assumes established ones otherwise).
	out, err := exec.Command("ovn-trace", "--db="+e.central.SB(), "--minimal", "--ct=trk,new", "--ct=trk,new", "--ct=trk,new", "--ct=trk,new", flow).CombinedOutput()
	if err != nil {
		t.Fatalf("ovn-trace %s: %v: %s", flow, err, out)
	}
	return string(out)
}
