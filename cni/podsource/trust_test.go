package podsource

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

func owner(manager string, at time.Time, keys ...string) metav1.ManagedFieldsEntry {
	var fs []string
	for _, k := range keys {
		fs = append(fs, fmt.Sprintf("%q:{}", "f:"+k))
	}
	raw := `{"f:metadata":{"f:annotations":{` + strings.Join(fs, ",") + `}},"f:spec":{"f:nodeName":{}}}`
	t := metav1.NewTime(at)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &t, FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
}

func trustedSet() map[string]bool {
	k := NewKube(nil, nil, KubeOptions{Node: "n", Log: slog.Default()})
	return k.trusted
}

func TestOnlyControllerOwnedAnnotationsAreHonoured(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	ctrl := annotations.ControllerFieldManager
	all := []string{annotations.Allocated, annotations.Routed, annotations.IPAddress, annotations.MACAddress, annotations.CIDR, annotations.Gateway, annotations.LogicalSwitch}
	for _, c := range []struct {
		name    string
		owners  []metav1.ManagedFieldsEntry
		ok      bool
		wantKey string
	}{
		{"controller owns everything", []metav1.ManagedFieldsEntry{owner(ctrl, t0, all...)}, true, ""},
		{"upstream kube-ovn-controller", []metav1.ManagedFieldsEntry{owner(annotations.KubeOVNFieldManager, t0, all...)}, true, ""},
		{"pod author wrote everything", []metav1.ManagedFieldsEntry{owner("kubectl-create", t0, all...)}, false, annotations.Allocated},
		{"author forged the controller's cidr after allocation", []metav1.ManagedFieldsEntry{
			owner(ctrl, t0, annotations.Allocated, annotations.Routed, annotations.IPAddress, annotations.MACAddress, annotations.Gateway, annotations.LogicalSwitch),
			owner("kubectl-annotate", t0.Add(time.Minute), annotations.CIDR)}, false, annotations.CIDR},
		{"static address set before the controller confirmed it (merge patch)", []metav1.ManagedFieldsEntry{
			owner("kubectl-create", t0, annotations.IPAddress),
			owner(annotations.KubeOVNFieldManager, t0, annotations.Allocated, annotations.Routed, annotations.MACAddress, annotations.CIDR, annotations.Gateway, annotations.LogicalSwitch)}, true, ""},
		{"static address changed after the controller confirmed", []metav1.ManagedFieldsEntry{
			owner("kubectl-annotate", t0.Add(time.Minute), annotations.IPAddress),
			owner(annotations.KubeOVNFieldManager, t0, annotations.Allocated, annotations.Routed, annotations.MACAddress, annotations.CIDR, annotations.Gateway, annotations.LogicalSwitch)}, false, annotations.IPAddress},
		{"managedFields stripped", nil, false, annotations.Allocated},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: good(), ManagedFields: slimOwners(c.owners)}}
		te := checkConfirmed(p, trustedSet())
		if c.ok != (te == nil) {
			t.Errorf("%s: trusted=%v, want %v (%v)", c.name, te == nil, c.ok, te)
			continue
		}
		if te != nil && (te.key != c.wantKey || !strings.Contains(te.msg, c.wantKey) || !strings.Contains(te.msg, "ns/p")) {
			t.Errorf("%s: error %q, want one naming %s and the pod", c.name, te.msg, c.wantKey)
		}
	}
	// The Subnet's mtu falls under the same rule.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: good(),
		ManagedFields: []metav1.ManagedFieldsEntry{owner(ctrl, t0, all...), owner("kubectl-annotate", t0, annotations.MTU)}}}
	p.Annotations[annotations.MTU] = "9000"
	if te := checkConfirmed(p, trustedSet()); te == nil || te.key != annotations.MTU {
		t.Fatalf("a user-written mtu: %v", te)
	}
}

func TestAddressesNoControllerHandsOutAreRefused(t *testing.T) {
	for _, c := range []struct {
		ip, cidr, gw, key, want string
	}{
		{"10.16.0.0", "10.16.0.0/16", "10.16.0.1", annotations.IPAddress, "network address"},
		{"10.16.255.255", "10.16.0.0/16", "10.16.0.1", annotations.IPAddress, "broadcast address"},
		{"10.16.0.1", "10.16.0.0/16", "10.16.0.1", annotations.IPAddress, "gateway address"},
		{"10.16.0.5", "10.16.0.0/16", "10.17.0.1", annotations.Gateway, "outside the pod's CIDR"},
		{"10.16.0.5", "0.0.0.0/0", "10.16.0.1", annotations.CIDR, "whole address space"},
		{"fd00::", "fd00::/64", "fd00::1", annotations.IPAddress, "network address"},
	} {
		ann := good()
		ann[annotations.IPAddress], ann[annotations.CIDR], ann[annotations.Gateway] = c.ip, c.cidr, c.gw
		n, err := ParseAnnotations(ann)
		if err == nil {
			err = validatePodNetwork(n)
		}
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ip %s cidr %s gw %s: %v, want an error naming %s and %q", c.ip, c.cidr, c.gw, err, c.key, c.want)
		}
	}
	// /31 and /32 have no network or broadcast address to refuse.
	ann := good()
	ann[annotations.IPAddress], ann[annotations.CIDR], ann[annotations.Gateway] = "10.16.0.4", "10.16.0.4/31", "10.16.0.5"
	n, err := ParseAnnotations(ann)
	if err != nil || validatePodNetwork(n) != nil {
		t.Fatalf("/31: %v %v", err, validatePodNetwork(n))
	}
}

func subnetObj(name, cidr, vpc string, validated bool) *unstructured.Unstructured {
	status := "False"
	if validated {
		status = "True"
	}
	spec := map[string]any{"cidrBlock": cidr, "gateway": strings.Replace(cidr, ".0/", ".1/", 1)[:strings.Index(cidr, "/")]}
	if vpc != "" {
		spec["vpc"] = vpc
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": name},
		"spec":   spec,
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Validated", "status": status}}},
	}}
}

func TestOVN0RoutesValidatedDefaultVPCSubnets(t *testing.T) {
	k := NewKube(nil, nil, KubeOptions{Node: "n", Log: slog.Default()})
	k.subnets = cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	for _, u := range []*unstructured.Unstructured{
		subnetObj("ovn-default", "10.244.0.0/16", "ovn-cluster", true),
		subnetObj("join", "100.64.0.0/16", "ovn-cluster", true),
		subnetObj("empty-yet", "10.250.0.0/24", "", true),
		subnetObj("not-validated", "192.168.7.0/24", "", false),
		subnetObj("other-vpc", "172.20.0.0/24", "tenant", true),
		subnetObj("everything", "0.0.0.0/0", "", true),
	} {
		if err := k.subnets.GetStore().Add(u); err != nil {
			t.Fatal(err)
		}
	}
	got := k.routedCIDRs([]netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")})
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.250.0.0/24")}
	if !slices.Equal(got, want) {
		t.Fatalf("ovn0 routes %v, want %v", got, want)
	}
	// A pod whose cidr disagrees with its Subnet is not wired.
	ann := good()
	ann[annotations.IPAddress], ann[annotations.CIDR], ann[annotations.Gateway] = "10.244.0.5", "10.244.0.0/16", "10.244.0.1"
	n, _ := ParseAnnotations(ann)
	p := PodRef{Name: "p", Namespace: "ns"}
	if w, mm := k.checkAgainstSubnet(p, ann, n); w != "" || mm != nil {
		t.Fatalf("matching subnet: %s %v", w, mm)
	}
	ann[annotations.IPAddress], ann[annotations.CIDR] = "10.244.0.5", "10.244.0.0/24"
	n, _ = ParseAnnotations(ann)
	if _, mm := k.checkAgainstSubnet(p, ann, n); mm == nil || mm.Field != annotations.CIDR || !strings.Contains(mm.Error(), "cidrBlock 10.244.0.0/16") ||
		!strings.Contains(mm.Error(), "10.244.0.0/24") || !strings.Contains(mm.Error(), "ns/p") {
		t.Fatalf("mismatching cidr: %v", mm)
	}
	ann[annotations.CIDR], ann[annotations.Gateway] = "10.244.0.0/16", "10.244.0.254"
	n, _ = ParseAnnotations(ann)
	if _, mm := k.checkAgainstSubnet(p, ann, n); mm == nil || mm.Field != annotations.Gateway || !strings.Contains(mm.Error(), "gateway 10.244.0.1") {
		t.Fatalf("mismatching gateway: %v", mm)
	}
	ann[annotations.LogicalSwitch] = "not-validated"
	n, _ = ParseAnnotations(ann)
	if w, _ := k.checkAgainstSubnet(p, ann, n); !strings.Contains(w, "not known to this node as validated") {
		t.Fatalf("subnet not validated: %q", w)
	}
}
