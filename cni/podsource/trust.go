package podsource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// The node wires a pod only from values the controller confirmed: a pod's
// author can write any annotation, including the ones the controller
// writes. The API server records who wrote each field (managedFields); the
// node waits until a trusted field manager (the controller's) owns the
// controller's keys. That is only a hint (a field manager is a name any
// client can claim): the address, MAC and logical switch must then equal
// what OVN holds for the pod's port (matchOVN, ovnports.go), and the cidr
// and gateway the admin-owned Subnet of that switch (checkAgainstSubnet).
// cni/README.md (Trust) explains the choice.

// DefaultControllerManagers are the field managers trusted by default.
var DefaultControllerManagers = []string{annotations.ControllerFieldManager, annotations.KubeOVNFieldManager}

// controllerOnlyKeys are written by the controller alone: they must be
// owned by a trusted manager.
var controllerOnlyKeys = []string{annotations.Allocated, annotations.Routed, annotations.CIDR, annotations.Gateway, annotations.MTU,
	annotations.VlanID, annotations.ProviderNetwork}

// userSettableKeys may be set by a pod's author before allocation (static
// address, chosen subnet). The ovnhost controller co-owns them once it
// confirms them (server-side apply); an older writer that merely
// confirmed an unchanged value (upstream kube-ovn-controller's merge
// patches) leaves them with their author, which is accepted when the
// author's last write is not newer than the controller's.
var userSettableKeys = []string{annotations.IPAddress, annotations.MACAddress, annotations.LogicalSwitch, annotations.VirtualMachine}

// slimOwners keeps of a pod's managedFields only the ownership of its
// network annotations, the default network's (ovn.kubernetes.io/) and the
// attachment networks' (<provider>.kubernetes.io/); kubelet's status fields
// are most of them.
func slimOwners(mf []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range mf {
		if e.FieldsV1 == nil {
			continue
		}
		ks := []string{}
		for k := range annotations.OwnedAnnotations(e.FieldsV1.Raw, "") {
			if annotations.IsNetworkKey(k) {
				b, _ := json.Marshal("f:" + k)
				ks = append(ks, string(b)+`:{}`)
			}
		}
		if len(ks) == 0 {
			continue
		}
		sort.Strings(ks)
		raw := `{"f:metadata":{"f:annotations":{` + strings.Join(ks, ",") + `}}}`
		out = append(out, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, Time: e.Time,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}})
	}
	return out
}

// trustError says that a value the node would act on was not written by
// the controller. It is awaited, not fatal: the controller confirms the
// values it agrees with (server-side apply makes it their co-owner) and
// overwrites the others; the ADD that times out carries the message.
type trustError struct {
	key, writer string
	msg         string
}

func (e *trustError) Error() string { return e.msg }

// checkConfirmed returns nil when every controller key of p that the node
// reads is owned by one of trusted.
func checkConfirmed(p *corev1.Pod, trusted map[string]bool) *trustError {
	return checkConfirmedKeys(p, trusted, controllerOnlyKeys, userSettableKeys, annotations.Allocated)
}

// checkConfirmedFor is checkConfirmed for the network of ref: an
// attachment network's keys follow the same rules as the default
// network's (allocated, cidr and gateway the controller's alone; the
// address, MAC and logical switch, which users may set, confirmed by it).
func checkConfirmedFor(ref PodRef, p *corev1.Pod, trusted map[string]bool) *trustError {
	if ref.Provider == "" {
		return checkConfirmed(p, trusted)
	}
	k := ref.AnnotationKey
	return checkConfirmedKeys(p, trusted,
		[]string{k(annotations.KeyAllocated), k(annotations.KeyCIDR), k(annotations.KeyGateway)},
		[]string{k(annotations.KeyIPAddress), k(annotations.KeyMACAddress), k(annotations.KeyLogicalSwitch)},
		k(annotations.KeyAllocated))
}

// checkConfirmedKeys: controllerOnly must be owned by a trusted manager;
// userSettable too, or written by their author no later than the trusted
// manager's last write of allocated.
func checkConfirmedKeys(p *corev1.Pod, trusted map[string]bool, controllerOnly, userSettable []string, allocated string) *trustError {
	type owner struct {
		manager string
		time    time.Time
		trusted bool
	}
	owners := map[string][]owner{}
	for _, e := range p.ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		var t time.Time
		if e.Time != nil {
			t = e.Time.Time
		}
		for k := range annotations.OwnedAnnotations(e.FieldsV1.Raw, "") {
			owners[k] = append(owners[k], owner{e.Manager, t, trusted[e.Manager]})
		}
	}
	trustedOwns := func(k string) (bool, time.Time) {
		for _, o := range owners[k] {
			if o.trusted {
				return true, o.time
			}
		}
		return false, time.Time{}
	}
	writers := func(k string) string {
		var ws []string
		for _, o := range owners[k] {
			ws = append(ws, o.manager)
		}
		if len(ws) == 0 {
			return "no field manager (managedFields reset?)"
		}
		return "field manager " + strings.Join(ws, ", ")
	}
	trustedList := make([]string, 0, len(trusted))
	for m := range trusted {
		trustedList = append(trustedList, m)
	}
	sort.Strings(trustedList)
	for _, k := range controllerOnly {
		if _, set := p.Annotations[k]; !set {
			continue
		}
		if ok, _ := trustedOwns(k); !ok {
			w := writers(k)
			return &trustError{key: k, writer: w, msg: fmt.Sprintf(
				"annotation %s=%q of pod %s/%s was written by %s, not by the controller (trusted field managers: %s); the node acts only on values the controller confirmed; if the controller does not confirm it, remove the annotation from the pod (or its template) and let the controller write it",
				k, p.Annotations[k], p.Namespace, p.Name, w, strings.Join(trustedList, ", "))}
		}
	}
	_, confirmed := trustedOwns(allocated)
	for _, k := range userSettable {
		if _, set := p.Annotations[k]; !set {
			continue
		}
		if ok, _ := trustedOwns(k); ok {
			continue
		}
		newer := false
		for _, o := range owners[k] {
			if confirmed.IsZero() || o.time.IsZero() || o.time.After(confirmed) {
				newer = true
			}
		}
		if len(owners[k]) == 0 || newer {
			w := writers(k)
			return &trustError{key: k, writer: w, msg: fmt.Sprintf(
				"annotation %s=%q of pod %s/%s was changed by %s after the controller confirmed the pod; waiting for the controller to confirm it again",
				k, p.Annotations[k], p.Namespace, p.Name, w)}
		}
	}
	return nil
}

// validatePodNetwork refuses what no controller would confirm: an address
// that is its subnet's network, broadcast or gateway address, a gateway
// outside the CIDR. ParseAnnotations already refuses an address outside
// its CIDR.
func validatePodNetwork(n *PodNetwork) error {
	for _, a := range n.Addrs {
		p := a.Masked()
		addr := a.Addr()
		if a.Bits() == 0 {
			return &AnnotationError{annotations.CIDR, p.String(), "a pod subnet cannot be the whole address space"}
		}
		if addr == p.Addr() && hostBits(a) > 1 {
			return &AnnotationError{annotations.IPAddress, addr.String(), fmt.Sprintf("is the network address of %s; the controller never hands it out", p)}
		}
		if addr.Is4() && hostBits(a) > 1 && addr == broadcast(p) {
			return &AnnotationError{annotations.IPAddress, addr.String(), fmt.Sprintf("is the broadcast address of %s; the controller never hands it out", p)}
		}
		for _, g := range n.Gateways {
			if g.Is4() != addr.Is4() {
				continue
			}
			if g == addr {
				return &AnnotationError{annotations.IPAddress, addr.String(), "is the subnet's gateway address; the controller never hands it out"}
			}
			if !p.Contains(g) {
				return &AnnotationError{annotations.Gateway, g.String(), fmt.Sprintf("is outside the pod's CIDR %s", p)}
			}
		}
	}
	return nil
}

func hostBits(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() }

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<uint(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// matchOVN is the trust decision: the network the annotations of pod
// ("namespace/name") describe (n, from ann) must be what OVN holds for the
// pod's logical switch port (port, read from where). It returns the first
// field that differs, nil when the address, the MAC and the logical switch
// all agree. A missing logical_switch annotation is OVN's switch.
func matchOVN(pod string, ann map[string]string, n *PodNetwork, port OVNPort, where string) *MismatchError {
	mm := func(field, ovn string) *MismatchError {
		return &MismatchError{Pod: pod, Field: field, Annotation: ann[field], OVN: ovn, Source: where}
	}
	if port.Switch == "" {
		return mm(annotations.LogicalSwitch, "a port on a datapath without a logical switch name")
	}
	if n.Switch != "" && n.Switch != port.Switch {
		return mm(annotations.LogicalSwitch, port.Switch)
	}
	have := make([]netip.Addr, 0, len(n.Addrs))
	for _, a := range n.Addrs {
		have = append(have, a.Addr())
	}
	if !sameAddrs(have, port.IPs) {
		ips := make([]string, len(port.IPs))
		for i, a := range port.IPs {
			ips[i] = a.String()
		}
		return mm(annotations.IPAddress, strings.Join(ips, ","))
	}
	if !bytes.Equal(n.MAC, port.MAC) {
		return mm(annotations.MACAddress, port.MAC.String())
	}
	return nil
}

// sameAddrs: the same addresses, in any order.
func sameAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, func(p, q netip.Addr) int { return p.Compare(q) })
	slices.SortFunc(y, func(p, q netip.Addr) int { return p.Compare(q) })
	return slices.Equal(x, y)
}
