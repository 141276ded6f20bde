package podsource

import (
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/providernet"

	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Route is a route of the pod's interface (GW invalid: on-link).
type Route struct {
	Dst netip.Prefix
	GW  netip.Addr
}

// PodNetwork is everything the server needs to wire one pod.
type PodNetwork struct {
	Switch      string
	Addrs       []netip.Prefix // address with the subnet's prefix length
	Gateways    []netip.Addr   // one per family present
	MAC         net.HardwareAddr
	Routes      []Route // from the routes annotation
	IngressMbps int
	EgressMbps  int
	// MTU is the Subnet's mtu (0: the node's pod MTU).
	MTU    int
	Mirror bool
	// ProviderNetwork is an underlay pod's provider network ("" overlay):
	// without a Subnet mtu, the pod gets that network's MTU on this node.
	ProviderNetwork string
	// Provider is the attachment network ("<nad>.<namespace>.ovn") of this
	// interface, "" for the default network. An attachment gets no default
	// route: the pod's default route stays on its default network (eth0).
	Provider string
	// LSP is the logical switch port the interface binds to (its OVS
	// iface-id): the pod's own (PodRef.LSP), or a virtual machine's
	// "<vm>.<namespace>" for a KubeVirt pod (VMPort).
	LSP string
}

// AnnotationError is a bad or missing annotation: it fails that pod only.
type AnnotationError struct {
	Key, Value, Problem string
}

func (e *AnnotationError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("annotation %s: %s", e.Key, e.Problem)
	}
	return fmt.Sprintf("annotation %s=%q: %s", e.Key, e.Value, e.Problem)
}

// requiredAnnotations are what the controller writes before a pod can be wired.
var requiredAnnotations = []string{annotations.Allocated, annotations.Routed, annotations.IPAddress, annotations.MACAddress, annotations.CIDR, annotations.Gateway}

// attachmentRequired are what the controller writes for an attachment
// network (key suffixes for annotations.ProviderKey): no routed, which
// Kube-OVN writes for the default network only.
var attachmentRequired = []string{annotations.KeyAllocated, annotations.KeyIPAddress, annotations.KeyMACAddress, annotations.KeyCIDR, annotations.KeyGateway}

// missingFor lists what the controller has not written yet for the
// network of ref.
func missingFor(ref PodRef, ann map[string]string) []string {
	if ref.Provider == "" {
		return missingAnnotations(ann)
	}
	var miss []string
	for _, s := range attachmentRequired {
		k := ref.AnnotationKey(s)
		v, ok := ann[k]
		switch {
		case !ok || v == "":
			miss = append(miss, k)
		case s == annotations.KeyAllocated && v != "true":
			miss = append(miss, k+"=true")
		}
	}
	return miss
}

// attachmentKeys are the attachment network's keys the node reads (key
// suffixes): its address, and the routes its pod's author may give it.
var attachmentKeys = []string{annotations.KeyIPAddress, annotations.KeyMACAddress, annotations.KeyCIDR, annotations.KeyGateway, annotations.KeyLogicalSwitch, "routes"}

// networkAnnotations are the annotations of ref's network under the
// default network's keys ("ovn.kubernetes.io/<key>"), so that one parser
// and one set of checks read both; for the default network, ann itself.
// An attachment's rates, mirror, MTU and provider network are not read
// (Kube-OVN gives an attachment none of them).
func networkAnnotations(ref PodRef, ann map[string]string) map[string]string {
	if ref.Provider == "" {
		return ann
	}
	out := make(map[string]string, len(attachmentKeys))
	for _, s := range attachmentKeys {
		if v, ok := ann[ref.AnnotationKey(s)]; ok {
			out[annotations.Prefix+s] = v
		}
	}
	return out
}

// renameKey gives an error about a key of networkAnnotations' map the
// name of the key the pod carries.
func renameKey(ref PodRef, key string) string {
	if s, ok := strings.CutPrefix(key, annotations.Prefix); ok && ref.Provider != "" {
		return ref.AnnotationKey(s)
	}
	return key
}

// ParseNetwork reads the network of ref (the default network or an
// attachment) from the pod's annotations; errors name the pod's keys.
func ParseNetwork(ref PodRef, ann map[string]string) (*PodNetwork, error) {
	n, err := ParseAnnotations(networkAnnotations(ref, ann))
	if err != nil {
		var ae *AnnotationError
		if errors.As(err, &ae) {
			return nil, &AnnotationError{Key: renameKey(ref, ae.Key), Value: ae.Value, Problem: ae.Problem}
		}
		return nil, err
	}
	n.Provider = ref.Provider
	return n, nil
}

// missingAnnotations lists what the controller has not written yet.
func missingAnnotations(ann map[string]string) []string {
	var miss []string
	for _, k := range requiredAnnotations {
		v, ok := ann[k]
		switch {
		case !ok || v == "":
			miss = append(miss, k)
		case (k == annotations.Allocated || k == annotations.Routed) && v != "true":
			miss = append(miss, k+"=true")
		}
	}
	return miss
}

// ParseAnnotations reads a pod's network from its annotations (after the
// controller has written them).
func ParseAnnotations(ann map[string]string) (*PodNetwork, error) {
	n := &PodNetwork{Switch: ann[annotations.LogicalSwitch]}
	ips := strings.Split(ann[annotations.IPAddress], ",")
	cidrs := strings.Split(ann[annotations.CIDR], ",")
	var prefixes []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, &AnnotationError{annotations.CIDR, ann[annotations.CIDR], "not a CIDR (want 10.16.0.0/16 or v4,v6)"}
		}
		prefixes = append(prefixes, p)
	}
	for _, s := range ips {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			s = p.Addr().String()
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, &AnnotationError{annotations.IPAddress, ann[annotations.IPAddress], "not an IP address (want 10.16.0.5 or v4,v6)"}
		}
		a = a.Unmap()
		found := false
		for _, p := range prefixes {
			if p.Contains(a) {
				n.Addrs = append(n.Addrs, netip.PrefixFrom(a, p.Bits()))
				found = true
				break
			}
		}
		if !found {
			return nil, &AnnotationError{annotations.IPAddress, ann[annotations.IPAddress], fmt.Sprintf("address %s is outside the pod's CIDR %s", a, ann[annotations.CIDR])}
		}
	}
	for _, s := range strings.Split(ann[annotations.Gateway], ",") {
		g, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, &AnnotationError{annotations.Gateway, ann[annotations.Gateway], "not an IP address"}
		}
		n.Gateways = append(n.Gateways, g.Unmap())
	}
	mac, err := net.ParseMAC(strings.TrimSpace(ann[annotations.MACAddress]))
	if err != nil || len(mac) != 6 || mac[0]&1 == 1 {
		return nil, &AnnotationError{annotations.MACAddress, ann[annotations.MACAddress], "not a unicast Ethernet MAC (want 0a:58:0a:10:00:05)"}
	}
	n.MAC = mac
	if v := strings.TrimSpace(ann[annotations.MTU]); v != "" {
		mtu, err := strconv.Atoi(v)
		if err != nil || mtu < 576 || mtu > 65535 {
			return nil, &AnnotationError{annotations.MTU, v, "not an MTU from 576 to 65535 (the Subnet's mtu, written by the controller)"}
		}
		n.MTU = mtu
	}
	if v := strings.TrimSpace(ann[annotations.ProviderNetwork]); v != "" {
		if providernet.NameProblem(v) != "" {
			return nil, &AnnotationError{annotations.ProviderNetwork, v, "not a ProviderNetwork name (written by the controller from the Subnet's Vlan)"}
		}
		n.ProviderNetwork = v
	}
	if err := parseOptional(ann, n); err != nil {
		return nil, err
	}
	return n, nil
}

// parseOptional reads the user-set annotations: rates, mirror and routes.
func parseOptional(ann map[string]string, n *PodNetwork) error {
	var err error
	if n.IngressMbps, err = parseRate(ann, annotations.IngressRate); err != nil {
		return err
	}
	if n.EgressMbps, err = parseRate(ann, annotations.EgressRate); err != nil {
		return err
	}
	if v, ok := ann[annotations.Mirror]; ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return &AnnotationError{annotations.Mirror, v, "not a boolean (want true or false)"}
		}
		n.Mirror = b
	}
	if v := strings.TrimSpace(ann[annotations.Routes]); v != "" {
		var rs []struct {
			Dst string `json:"dst"`
			GW  string `json:"gw"`
		}
		if err := json.Unmarshal([]byte(v), &rs); err != nil {
			return &AnnotationError{annotations.Routes, v, `not a JSON list of routes (want [{"dst":"192.168.0.0/24","gw":"10.16.0.254"}])`}
		}
		for _, r := range rs {
			var rt Route
			gw, err := netip.ParseAddr(strings.TrimSpace(r.GW))
			if r.GW != "" && err != nil {
				return &AnnotationError{annotations.Routes, v, fmt.Sprintf("gw %q is not an IP address", r.GW)}
			}
			rt.GW = gw
			switch d := strings.TrimSpace(r.Dst); d {
			case "", "default":
				if !rt.GW.IsValid() {
					return &AnnotationError{annotations.Routes, v, "a default route needs a gw"}
				}
				if rt.GW.Is4() {
					rt.Dst = netip.MustParsePrefix("0.0.0.0/0")
				} else {
					rt.Dst = netip.MustParsePrefix("::/0")
				}
			default:
				p, err := netip.ParsePrefix(d)
				if err != nil {
					a, aerr := netip.ParseAddr(d)
					if aerr != nil {
						return &AnnotationError{annotations.Routes, v, fmt.Sprintf("dst %q is not a CIDR", r.Dst)}
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				rt.Dst = p.Masked()
			}
			if rt.GW.IsValid() && rt.GW.Is4() != rt.Dst.Addr().Is4() {
				return &AnnotationError{annotations.Routes, v, fmt.Sprintf("dst %s and gw %s are of different families", rt.Dst, rt.GW)}
			}
			n.Routes = append(n.Routes, rt)
		}
	}
	return nil
}

func parseRate(ann map[string]string, key string) (int, error) {
	v := strings.TrimSpace(ann[key])
	if v == "" {
		return 0, nil
	}
	r, err := strconv.Atoi(v)
	if err != nil || r < 0 || r > 100000 {
		return 0, &AnnotationError{key, v, "not a whole number of Mbit/s between 0 and 100000"}
	}
	return r, nil
}

// PodRoutes is the pod's full route list: a default route per gateway
// family unless the routes annotation gives one, then the annotated routes.
// An attachment network's interface gets only its annotated routes
// ("<provider>.kubernetes.io/routes"): its subnet is on-link, and the
// pod's default route stays on the default network.
func (n *PodNetwork) PodRoutes() []Route {
	if n.Provider != "" {
		return n.Routes
	}
	var out []Route
	has := func(v4 bool) bool {
		for _, r := range n.Routes {
			if r.Dst.Bits() == 0 && r.Dst.Addr().Is4() == v4 {
				return true
			}
		}
		return false
	}
	for _, g := range n.Gateways {
		if !has(g.Is4()) {
			dst := netip.MustParsePrefix("0.0.0.0/0")
			if g.Is6() {
				dst = netip.MustParsePrefix("::/0")
			}
			out = append(out, Route{Dst: dst, GW: g})
		}
	}
	return append(out, n.Routes...)
}
