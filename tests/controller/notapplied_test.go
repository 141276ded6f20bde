package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
)

// TestSubnetFieldsAcceptedNotApplied: Kube-OVN fields ovnhost accepts but
// does not program (here enableDHCP, and gatewayNode on a distributed
// subnet) are reported: Validated=True with reason AcceptedNotApplied naming
// each field and its consequence, and one Warning event per change of that
// set of fields (not per sync, not per controller restart). Editing the
// fields away brings back ValidationSucceeded. natOutgoing is applied
// (egress through each pod's node, masqueraded there): ovn-default
// (natOutgoing: true, as in Kube-OVN) is plainly valid.
func TestSubnetFieldsAcceptedNotApplied(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	stop := e.startController()
	e.waitSubnetReady("ovn-default")
	e.waitFor(30*time.Second, "ovn-default Validated=True ValidationSucceeded (natOutgoing is applied)", func() (bool, string) {
		c := cond(e.subnet("ovn-default"), kubeovnv1.Validated)
		if c == nil {
			return false, "no Validated condition"
		}
		return c.Status == "True" && c.Reason == kubeovnv1.ValidationSucceeded && c.Message == "", fmt.Sprintf("%+v", *c)
	})

	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("nat-gw", map[string]any{
		"cidrBlock": "10.80.0.0/24", "natOutgoing": true, "enableDHCP": true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSubnetReady("nat-gw")
	var gwType string
	e.waitFor(30*time.Second, "nat-gw Validated=True AcceptedNotApplied naming enableDHCP only", func() (bool, string) {
		c := cond(e.subnet("nat-gw"), kubeovnv1.Validated)
		if c == nil {
			return false, "no Validated condition"
		}
		gwType = c.Message
		return c.Status == "True" && c.Reason == kubeovnv1.AcceptedNotApplied &&
			strings.HasPrefix(c.Message, "enableDHCP is not applied: ") &&
			!strings.Contains(c.Message, "natOutgoing") && !strings.Contains(c.Message, "gatewayNode"), fmt.Sprintf("%+v", *c)
	})
	e.waitFor(30*time.Second, "one AcceptedNotApplied Warning on nat-gw with the condition's message", func() (bool, string) {
		evs := e.subnetWarnings("nat-gw")
		return len(evs) == 1 && evs[0] == "1x "+gwType, strings.Join(evs, " | ")
	})

	// A spec edit that keeps the set of fields: status follows, no new event.
	e.editSubnet("nat-gw", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.80.0.2..10.80.0.11"}, "spec", "excludeIps")
	})
	e.waitAvailableFrom("nat-gw", "10.80.0.12-")
	e.expectWarnings("nat-gw", "1x "+gwType)

	// A restart (the controller edited while down) does not announce it again.
	stop()
	e.editSubnet("nat-gw", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.80.0.2..10.80.0.21"}, "spec", "excludeIps")
	})
	e.startController()
	e.waitAvailableFrom("nat-gw", "10.80.0.22-")
	e.expectWarnings("nat-gw", "1x "+gwType)
	e.expectWarnings("ovn-default")

	// Edited away: the normal reason and no message again, no new event.
	e.editSubnet("nat-gw", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, false, "spec", "enableDHCP")
	})
	e.waitFor(30*time.Second, "nat-gw back to Validated=True ValidationSucceeded", func() (bool, string) {
		s := e.subnet("nat-gw")
		c, r := cond(s, kubeovnv1.Validated), cond(s, kubeovnv1.Ready)
		if c == nil || r == nil {
			return false, fmt.Sprintf("%+v", s)
		}
		return c.Status == "True" && c.Reason == kubeovnv1.ValidationSucceeded && c.Message == "" && r.Status == "True", fmt.Sprintf("%+v", *c)
	})
	e.expectWarnings("nat-gw", "1x "+gwType)

	// A new such field is a new set: one more event, naming only it.
	e.editSubnet("nat-gw", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "node-a", "spec", "gatewayNode")
	})
	var gwNode string
	e.waitFor(30*time.Second, "nat-gw AcceptedNotApplied naming gatewayNode only", func() (bool, string) {
		c := cond(e.subnet("nat-gw"), kubeovnv1.Validated)
		if c == nil {
			return false, "no Validated condition"
		}
		gwNode = c.Message
		return c.Status == "True" && c.Reason == kubeovnv1.AcceptedNotApplied && strings.HasPrefix(c.Message, "gatewayNode is not applied to a distributed subnet: ") &&
			!strings.Contains(c.Message, "natOutgoing") && !strings.Contains(c.Message, "enableDHCP"), fmt.Sprintf("%+v", *c)
	})
	e.waitFor(30*time.Second, "a second AcceptedNotApplied Warning on nat-gw, for gatewayNode", func() (bool, string) {
		evs := e.subnetWarnings("nat-gw")
		return len(evs) == 2 && strings.Contains(strings.Join(evs, "\n"), "1x "+gwNode), strings.Join(evs, " | ")
	})
	e.expectWarnings("ovn-default")
}

// subnetWarnings lists the AcceptedNotApplied events about a Subnet as
// "<count>x <message>", sorted by first timestamp.
func (e *env) subnetWarnings(name string) []string {
	var evs []*corev1.Event
	for _, o := range e.evs.GetStore().List() {
		ev := o.(*corev1.Event)
		if ev.InvolvedObject.Kind == "Subnet" && ev.InvolvedObject.Name == name && ev.Reason == kubeovnv1.AcceptedNotApplied {
			evs = append(evs, ev)
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Before(&evs[j].FirstTimestamp) })
	var out []string
	for _, ev := range evs {
		if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.APIVersion != "kubeovn.io/v1" {
			out = append(out, fmt.Sprintf("unexpected %s event for %s: %s", ev.Type, ev.InvolvedObject.APIVersion, ev.Message))
			continue
		}
		out = append(out, fmt.Sprintf("%dx %s", ev.Count, ev.Message))
	}
	return out
}

// expectWarnings: exactly these AcceptedNotApplied events about the Subnet, now.
func (e *env) expectWarnings(name string, want ...string) {
	e.t.Helper()
	got := e.subnetWarnings(name)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Fatalf("Subnet %s AcceptedNotApplied events: got %q, want %q", name, got, want)
	}
}

// editSubnet changes a Subnet's spec (retrying on conflicts with status writes).
func (e *env) editSubnet(name string, edit func(*unstructured.Unstructured)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := e.dc.Resource(kubeovnv1.SubnetGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(u)
		_, err = e.dc.Resource(kubeovnv1.SubnetGVR).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("editing Subnet %s: %v", name, err)
	}
}

// waitAvailableFrom waits until the Subnet's v4 available range starts with prefix.
func (e *env) waitAvailableFrom(name, prefix string) {
	e.t.Helper()
	e.waitFor(30*time.Second, "Subnet "+name+" v4availableIPrange starting "+prefix, func() (bool, string) {
		s := e.subnet(name)
		if s == nil {
			return false, "no subnet"
		}
		return strings.HasPrefix(s.Status.V4AvailableIPRange, prefix), s.Status.V4AvailableIPRange
	})
}
