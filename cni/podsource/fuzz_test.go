package podsource

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// Fuzz targets: `go test` (make test) runs their seeds; `make fuzz` runs
// each for FUZZTIME. Whatever a pod's author can write reaches these
// parsers.

// FuzzPodAnnotations: the annotations the node acts on never panic the
// parser, and what it accepts is what the node may wire.
func FuzzPodAnnotations(f *testing.F) {
	f.Add("10.16.0.5", "10.16.0.0/16", "10.16.0.1", "0a:58:0a:10:00:05", "1400", "10", `[{"dst":"192.168.0.0/24","gw":"10.16.0.254"}]`)
	f.Add("10.16.0.5,fd00::5", "10.16.0.0/16,fd00::/64", "10.16.0.1,fd00::1", "0a:58:0a:10:00:05", "", "", "")
	f.Add("10.16.255.255", "0.0.0.0/0", "1.1.1.1", "01:00:5e:00:00:01", "99999999999", "-1", `[{"dst":"default"}]`)
	f.Add("::ffff:10.0.0.1", "10.0.0.0/8", "10.0.0.1", "0a:58:0a:10:00:05", "576", "100000", `[{"dst":"10.0.0.7","gw":"fd00::1"}]`)
	f.Fuzz(func(t *testing.T, ip, cidr, gw, mac, mtu, rate, routes string) {
		ann := map[string]string{annotations.Allocated: "true", annotations.Routed: "true", annotations.IPAddress: ip, annotations.CIDR: cidr,
			annotations.Gateway: gw, annotations.MACAddress: mac, annotations.MTU: mtu, annotations.IngressRate: rate, annotations.Routes: routes}
		n, err := ParseAnnotations(ann)
		if err != nil {
			if _, ok := err.(*AnnotationError); !ok {
				t.Fatalf("not an AnnotationError: %T %v", err, err)
			}
			return
		}
		if err := validatePodNetwork(n); err != nil {
			return
		}
		for _, a := range n.Addrs {
			if !a.Masked().Contains(a.Addr()) || a.Bits() == 0 {
				t.Fatalf("accepted %s", a)
			}
			for _, g := range n.Gateways {
				if g == a.Addr() {
					t.Fatalf("accepted the gateway %s as the pod's address", g)
				}
			}
		}
		if len(n.MAC) != 6 || n.MAC[0]&1 == 1 {
			t.Fatalf("accepted MAC %s", n.MAC)
		}
		_ = n.PodRoutes()
	})
}

// FuzzAnnotationOwnership: managedFields as anyone may shape them; a key
// is never confirmed unless a trusted manager's entry names it.
func FuzzAnnotationOwnership(f *testing.F) {
	f.Add(`{"f:metadata":{"f:annotations":{"f:ovn.kubernetes.io/allocated":{},"f:ovn.kubernetes.io/cidr":{}}}}`, "ovnhost-controller", int64(0))
	f.Add(`{"f:metadata":{"f:annotations":{".":{},"f:ovn.kubernetes.io/ip_address":{}}}}`, "kubectl-create", int64(60))
	f.Add(`{"f:metadata":[]}`, "", int64(-5))
	f.Add(`null`, "kube-ovn-controller", int64(1))
	f.Fuzz(func(t *testing.T, fields, manager string, offset int64) {
		keys := annotations.OwnedAnnotations([]byte(fields), annotations.Prefix)
		for k := range keys {
			if !strings.HasPrefix(k, annotations.Prefix) {
				t.Fatalf("key %q outside the prefix", k)
			}
		}
		at := metav1.NewTime(time.Unix(1700000000+offset%100000, 0))
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{
			annotations.Allocated: "true", annotations.CIDR: "10.16.0.0/16"}}}
		p.ManagedFields = slimOwners([]metav1.ManagedFieldsEntry{{Manager: manager, Time: &at, FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}})
		te := checkConfirmed(p, trustedSet())
		trusted := trustedSet()[manager]
		if te == nil && (!trusted || !keys[annotations.Allocated] || !keys[annotations.CIDR]) {
			t.Fatalf("confirmed without a trusted owner of allocated and cidr: manager %q keys %v", manager, keys)
		}
	})
}
