package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// Test200PodsTwoNodesSubnetChoiceStaticConflictAndReuse: 200 pods on two
// fake nodes spread over four ways of choosing a subnet get unique addresses
// from the right subnet and matching logical ports; a static IP is honoured;
// a conflicting one is refused with an event and the pod cannot take the
// address by annotating it; a deleted pod's address and port are released and
// the address is handed out again.
func Test200PodsTwoNodesSubnetChoiceStaticConflictAndReuse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	e.createNode("node-b", "192.168.10.12")
	for name, cidr := range map[string]string{"ns-annotated": "10.50.0.0/16", "listed": "10.51.0.0/16", "by-pod": "10.52.0.0/16"} {
		spec := map[string]any{"cidrBlock": cidr}
		if name == "listed" {
			spec["namespaces"] = []any{"team-b"}
		}
		if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj(name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.createNamespace("team-a", map[string]string{annotations.LogicalSwitch: "ns-annotated"})
	e.createNamespace("team-b", nil)
	e.createNamespace("team-c", nil)
	e.startController()
	for _, s := range []string{"ovn-default", "ns-annotated", "listed", "by-pod"} {
		e.waitSubnetReady(s)
	}

	type group struct {
		ns, cidr, subnet string
		ann              map[string]string
	}
	groups := []group{
		{"default", "10.16.0.0/16", "ovn-default", nil},
		{"team-a", "10.50.0.0/16", "ns-annotated", nil},
		{"team-b", "10.51.0.0/16", "listed", nil},
		{"team-c", "10.52.0.0/16", "by-pod", map[string]string{annotations.LogicalSwitch: "by-pod"}},
	}
	node := func(i int) string { return []string{"node-a", "node-b"}[i%2] }
	for _, g := range groups {
		g := g
		if err := e.createPods(g.ns, 50, 8, func(i int) string { return fmt.Sprintf("p%d", i) }, node, func(int) map[string]string { return g.ann }); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor(60*time.Second, "200 pods annotated with matching logical ports", func() (bool, string) {
		n := 0
		for _, p := range e.podList("") {
			if !annotated(p) {
				continue
			}
			if ok, why := e.podPortMatches(p); !ok {
				return false, why
			}
			n++
		}
		return n == 200, fmt.Sprintf("%d/200 annotated with ports", n)
	})
	seen := map[string]string{}
	for _, g := range groups {
		for _, p := range e.podList(g.ns) {
			a := p.Annotations
			ip := a[annotations.IPAddress]
			if other, dup := seen[ip]; dup {
				t.Fatalf("address %s given to %s and %s/%s", ip, other, p.Namespace, p.Name)
			}
			seen[ip] = p.Namespace + "/" + p.Name
			gw := strings.TrimSuffix(g.cidr, "0/16") + "1"
			if !inCIDR(ip, g.cidr) || a[annotations.LogicalSwitch] != g.subnet || a[annotations.CIDR] != g.cidr || a[annotations.Gateway] != gw {
				t.Fatalf("pod %s/%s: %v, want subnet %s %s gw %s", p.Namespace, p.Name, a, g.subnet, g.cidr, gw)
			}
		}
	}
	e.waitFor(30*time.Second, "ovn-default status counting 50 pods", func() (bool, string) {
		s := e.subnet("ovn-default")
		return s.Status.V4UsingIPs == 50 && s.Status.V4AvailableIPs == 65533-50 && s.Status.V4UsingIPRange != "", fmt.Sprintf("%+v", s.Status)
	})

	// Static IP honoured.
	e.createPod("default", "static", "node-a", map[string]string{annotations.IPAddress: "10.16.200.7", annotations.MACAddress: "0a:00:00:10:c8:07"})
	e.waitFor(30*time.Second, "static pod gets 10.16.200.7 and its MAC", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/static")
		if !ok || !annotated(p.(*corev1.Pod)) {
			return false, "not annotated"
		}
		pp := p.(*corev1.Pod)
		good, why := e.podPortMatches(pp)
		return good && pp.Annotations[annotations.IPAddress] == "10.16.200.7" && pp.Annotations[annotations.MACAddress] == "0a:00:00:10:c8:07", why + fmt.Sprint(pp.Annotations)
	})
	// A conflicting static IP and one outside the CIDR are refused with events; the
	// thief does not get the address even when it claims allocated=true.
	e.createPod("default", "thief", "node-b", map[string]string{annotations.IPAddress: "10.16.200.7"})
	e.createPod("default", "outside", "node-b", map[string]string{annotations.IPAddress: "10.99.0.5"})
	e.createPod("default", "lost", "node-b", map[string]string{annotations.LogicalSwitch: "no-such-subnet"})
	e.createPod("default", "forger", "node-b", map[string]string{annotations.IPAddress: "10.16.200.7", annotations.Allocated: "true", annotations.LogicalSwitch: "ovn-default"})
	e.waitFor(30*time.Second, "events IPConflict on thief and IPOutOfRange on outside", func() (bool, string) {
		th, out := strings.Join(e.events("default", "thief"), "|"), strings.Join(e.events("default", "outside"), "|")
		return strings.Contains(th, "IPConflict: ") && strings.Contains(th, "10.16.200.7 is already held by default/static") &&
			strings.Contains(out, "IPOutOfRange: ") && strings.Contains(out, "outside subnet"), th + " / " + out
	})
	e.waitFor(30*time.Second, "event UnknownSubnet on lost", func() (bool, string) {
		ev := strings.Join(e.events("default", "lost"), "|")
		return strings.Contains(ev, `UnknownSubnet: subnet "no-such-subnet" does not exist`), ev
	})
	e.waitFor(30*time.Second, "forger re-addressed away from 10.16.200.7 with an event", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/forger")
		if !ok {
			return false, "no pod"
		}
		pp := p.(*corev1.Pod)
		ev := strings.Join(e.events("default", "forger"), "|")
		good, _ := e.podPortMatches(pp)
		return good && pp.Annotations[annotations.IPAddress] != "10.16.200.7" && strings.Contains(ev, "AddressReassigned"), fmt.Sprint(pp.Annotations, ev)
	})
	if p, _, _ := e.pods.GetStore().GetByKey("default/thief"); annotated(p.(*corev1.Pod)) {
		t.Fatalf("thief got annotated: %v", p.(*corev1.Pod).Annotations)
	}
	if l, ok := e.lsp("static.default"); !ok || !strings.HasSuffix(l.Addresses[0], " 10.16.200.7") {
		t.Fatal("static pod's port lost its address")
	}

	// Delete the static pod: address and port released, the waiting thief gets it.
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "static", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "port static.default gone and thief holding 10.16.200.7", func() (bool, string) {
		_, still := e.lsp("static.default")
		p, _, _ := e.pods.GetStore().GetByKey("default/thief")
		pp := p.(*corev1.Pod)
		good, why := e.podPortMatches(pp)
		return !still && good && pp.Annotations[annotations.IPAddress] == "10.16.200.7", fmt.Sprint(still, why, pp.Annotations)
	})
	// A namespace pointing at a missing subnet, then fixed: its waiting pod gets an address.
	e.createNamespace("team-x", map[string]string{annotations.LogicalSwitch: "not-yet"})
	e.createPod("team-x", "waiter", "node-a", nil)
	e.waitFor(30*time.Second, "UnknownSubnet event on team-x/waiter", func() (bool, string) {
		ev := strings.Join(e.events("team-x", "waiter"), "|")
		return strings.Contains(ev, `UnknownSubnet: subnet "not-yet" does not exist`), ev
	})
	ns, err := e.kc.CoreV1().Namespaces().Get(ctx, "team-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Annotations[annotations.LogicalSwitch] = "by-pod"
	if _, err := e.kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "team-x/waiter addressed from by-pod after the namespace was fixed", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("team-x/waiter")
		if !ok || !annotated(p.(*corev1.Pod)) {
			return false, "not annotated"
		}
		return inCIDR(p.(*corev1.Pod).Annotations[annotations.IPAddress], "10.52.0.0/16"), fmt.Sprint(p.(*corev1.Pod).Annotations)
	})

	// A dynamic address freed is reused (lowest free first).
	p0, _, _ := e.pods.GetStore().GetByKey("default/p0")
	freed := p0.(*corev1.Pod).Annotations[annotations.IPAddress]
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "p0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "port p0.default deleted", func() (bool, string) {
		_, still := e.lsp("p0.default")
		return !still, "port still there"
	})
	e.createPod("default", "newcomer", "node-a", nil)
	e.waitFor(30*time.Second, "newcomer reuses "+freed, func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/newcomer")
		if !ok {
			return false, "no pod"
		}
		pp := p.(*corev1.Pod)
		good, why := e.podPortMatches(pp)
		return good && pp.Annotations[annotations.IPAddress] == freed, why + fmt.Sprint(pp.Annotations)
	})
}

// TestSubnetExhaustionReportedOnPodAndSubnet: a /29 with 5 usable addresses
// serves 5 pods; the 6th gets a SubnetExhausted event, the Subnet shows 0
// available and an Error condition; deleting a pod lets the 6th through.
func TestSubnetExhaustionReportedOnPodAndSubnet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("tiny", map[string]any{"cidrBlock": "10.60.0.0/29", "namespaces": []any{"small"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createNamespace("small", nil)
	e.startController()
	e.waitSubnetReady("tiny")
	for i := 0; i < 6; i++ {
		e.createPod("small", fmt.Sprintf("p%d", i), "node-a", nil)
	}
	e.waitFor(30*time.Second, "5 pods annotated, one SubnetExhausted event, Subnet Error=True", func() (bool, string) {
		n, victim := 0, ""
		for _, p := range e.podList("small") {
			if annotated(p) {
				n++
			} else {
				victim = p.Name
			}
		}
		s := e.subnet("tiny")
		c := cond(s, "Error")
		ev := strings.Join(e.events("small", victim), "|")
		ok := n == 5 && strings.Contains(ev, `SubnetExhausted: subnet "tiny" (10.60.0.0/29) has no free address`) &&
			c != nil && c.Status == "True" && c.Reason == "SubnetExhausted" && s.Status.V4AvailableIPs == 0 && s.Status.V4UsingIPs == 5
		return ok, fmt.Sprintf("%d annotated; events of %q: %s; status %+v", n, victim, ev, s.Status)
	})
	var victim, gone string
	for _, p := range e.podList("small") {
		if !annotated(p) {
			victim = p.Name
		} else if gone == "" {
			gone = p.Name
		}
	}
	if err := e.kc.CoreV1().Pods("small").Delete(ctx, gone, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "waiting pod "+victim+" annotated after "+gone+" was deleted; Error=False", func() (bool, string) {
		p, _, _ := e.pods.GetStore().GetByKey("small/" + victim)
		c := cond(e.subnet("tiny"), "Error")
		return annotated(p.(*corev1.Pod)) && c != nil && c.Status == "False", fmt.Sprintf("%v %+v", p.(*corev1.Pod).Annotations, c)
	})
}

// TestControllerRidesOutNBRestart: the northbound ovsdb-server goes away
// under a running controller; a pod created meanwhile gets its port and
// annotations once the NB is back, over the same controller process.
func TestControllerRidesOutNBRestart(t *testing.T) {
	e := newEnv(t)
	e.createNode("node-a", "192.168.10.11")
	e.startController()
	e.waitSubnetReady("ovn-default")
	e.createPod("default", "before", "node-a", nil)
	e.waitFor(30*time.Second, "pod before annotated", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/before")
		return ok && annotated(p.(*corev1.Pod)), "not annotated"
	})
	e.central.StopNB()
	e.createPod("default", "during", "node-a", nil)
	e.central.StartNB(t)
	e.waitFor(60*time.Second, "pod during annotated with a matching port after the NB restart", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/during")
		if !ok || !annotated(p.(*corev1.Pod)) {
			return false, "not annotated"
		}
		return e.podPortMatches(p.(*corev1.Pod))
	})
}
