package cluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// Attachment is one attachment network of a pod (Multus's networks
// annotation, Kube-OVN's per-provider annotations): its interface in the
// pod, its provider, address and logical port, and what its node holds.
type Attachment struct {
	Interface string `json:"interface"`          // net1 ... as Multus names it ("" when not known)
	NAD       string `json:"nad,omitempty"`      // namespace/name of the NetworkAttachmentDefinition
	Provider  string `json:"provider,omitempty"` // <nad>.<namespace>.ovn
	LSP       string `json:"logicalSwitchPort,omitempty"`
	Subnet    string `json:"subnet,omitempty"`
	IP        string `json:"ip,omitempty"`
	MAC       string `json:"mac,omitempty"`
	CIDR      string `json:"cidr,omitempty"`
	Gateway   string `json:"gateway,omitempty"`
	Allocated bool   `json:"allocated"`

	OVS   *OVSPort `json:"ovsPort,omitempty"`
	Bound string   `json:"boundChassis,omitempty"`
}

// NetworkSelection is one entry of the networks annotation.
type NetworkSelection struct {
	Namespace, Name, Interface string
}

// ParseNetworks reads a k8s.v1.cni.cncf.io/networks value as Multus does:
// a JSON list of {name, namespace, interface} or a comma list of
// [namespace/]name[@interface]; the namespace defaults to the pod's.
func ParseNetworks(value, podNamespace string) ([]NetworkSelection, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	var out []NetworkSelection
	if strings.HasPrefix(value, "[") {
		var list []struct{ Name, Namespace, Interface string }
		if err := json.Unmarshal([]byte(value), &list); err != nil {
			return nil, fmt.Errorf("annotation %s is not a JSON list of networks: %v", annotations.NetworksAnnotation, err)
		}
		for _, e := range list {
			if e.Namespace == "" {
				e.Namespace = podNamespace
			}
			out = append(out, NetworkSelection{Namespace: e.Namespace, Name: e.Name, Interface: e.Interface})
		}
		return out, nil
	}
	for _, item := range strings.Split(value, ",") {
		s := NetworkSelection{Namespace: podNamespace}
		rest := strings.TrimSpace(item)
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			s.Namespace, rest = ns, name
		}
		if name, ifname, ok := strings.Cut(rest, "@"); ok {
			rest, s.Interface = name, ifname
		}
		s.Name = rest
		out = append(out, s)
	}
	return out, nil
}

// Attachments lists the pod's attachment networks: each entry of its
// networks annotation in order (Multus names them net1, net2 ... unless
// the entry names its interface), its provider from providers (NAD
// "namespace/name" -> the provider its config names; a NAD missing there
// is taken as Kube-OVN's "<name>.<namespace>.ovn"), and the controller's
// <provider>.kubernetes.io annotations. Providers the pod is annotated
// with but the annotation no longer lists come last, without interface.
func Attachments(p *corev1.Pod, providers map[string]string) ([]*Attachment, error) {
	a := p.Annotations
	sels, err := ParseNetworks(a[annotations.NetworksAnnotation], p.Namespace)
	var out []*Attachment
	seen := map[string]bool{}
	for i, s := range sels {
		ref := s.Namespace + "/" + s.Name
		prov, ok := providers[ref]
		if !ok {
			prov = s.Name + "." + s.Namespace + ".ovn"
		}
		if prov == "" || !annotations.IsAttachmentProvider(prov) {
			continue // another plugin's network (macvlan ...): not ours
		}
		at := &Attachment{Interface: s.Interface, NAD: ref, Provider: prov}
		if at.Interface == "" {
			at.Interface = fmt.Sprintf("net%d", i+1)
		}
		fillAttachment(p, at)
		seen[prov] = true
		out = append(out, at)
	}
	left := annotations.AttachmentProviders(a)
	sort.Strings(left)
	for _, prov := range left {
		if seen[prov] {
			continue
		}
		at := &Attachment{Provider: prov}
		fillAttachment(p, at)
		out = append(out, at)
	}
	return out, err
}

func fillAttachment(p *corev1.Pod, at *Attachment) {
	key := func(k string) string { return p.Annotations[annotations.ProviderKey(at.Provider, k)] }
	at.LSP = p.Name + "." + p.Namespace + "." + at.Provider
	at.Subnet, at.IP, at.MAC = key(annotations.KeyLogicalSwitch), key(annotations.KeyIPAddress), key(annotations.KeyMACAddress)
	at.CIDR, at.Gateway = key(annotations.KeyCIDR), key(annotations.KeyGateway)
	at.Allocated = key(annotations.KeyAllocated) == "true"
}

// FindAttachment picks the attachment an --interface value names: its
// interface (net1), its provider, or its NAD (namespace/name or name).
func FindAttachment(atts []*Attachment, name string) (*Attachment, error) {
	for _, at := range atts {
		if at.Interface == name || at.Provider == name || at.NAD == name || strings.HasSuffix(at.NAD, "/"+name) {
			return at, nil
		}
	}
	var have []string
	for _, at := range atts {
		d := at.Provider
		if at.Interface != "" {
			d = at.Interface + " (" + at.Provider + ")"
		}
		have = append(have, d)
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("interface %q: the pod has no OVN attachment network (annotation %s); trace eth0 without --interface", name, annotations.NetworksAnnotation)
	}
	return nil, fmt.Errorf("interface %q: the pod's OVN attachment networks are %s; give one of them", name, strings.Join(have, ", "))
}

// AttachmentChecks are diagnose's findings of each attachment: its
// address, its OVS interface and its binding, like eth0's. nodeErr is why
// the node side is unknown ("" when the node answered).
func AttachmentChecks(scope, node, chassis string, atts []*Attachment, nodeErr string) []Finding {
	var out []Finding
	for _, at := range atts {
		name := at.Interface
		if name == "" {
			name = at.Provider
		}
		chk := func(c string) string { return c + "/" + name }
		if !at.Allocated {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-address"),
				Found: fmt.Sprintf("%s (NAD %s, provider %s) has no address: the controller has not allocated it", name, at.NAD, at.Provider),
				Fix:   "kubectl describe pod: the controller's event (NADNotFound, UnknownProvider, SubnetNotAllowed, ...) names the fix"})
			continue
		}
		out = append(out, Finding{Severity: Pass, Scope: scope, Check: chk("attachment-address"),
			Found: fmt.Sprintf("%s %s %s in %s (provider %s, port %s)", name, at.IP, at.MAC, at.Subnet, at.Provider, at.LSP)})
		switch {
		case nodeErr != "":
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-ovs-port"), Found: "cannot ask node " + node + ": " + nodeErr})
			continue
		case at.OVS == nil || at.OVS.Error != "":
			msg := "no OVS interface with external_ids:iface-id=" + at.LSP + " on node " + node
			if at.OVS != nil {
				msg = at.OVS.Error
			}
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-ovs-port"), Found: msg + ": Multus has not called the plugin for " + name + ", or the ADD failed",
				Fix: "kubectl describe pod (Multus's events); the node daemon's log on " + node + " names the ADD of " + name})
			continue
		case !at.OVS.OVNInstalled:
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-ovs-port"), Found: "OVS interface " + at.OVS.Interface + " has no ovn-installed: ovn-controller has not bound " + at.LSP,
				Fix: "netctl appctl " + node + " ovn-controller connection-status; netctl sbctl find Port_Binding logical_port=" + at.LSP})
		default:
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: chk("attachment-ovs-port"), Found: fmt.Sprintf("%s ofport %d, ovn-installed, bound to %s", at.OVS.Interface, at.OVS.OFPort, at.LSP)})
		}
		switch {
		case at.Bound == "":
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-binding"), Found: "logical port " + at.LSP + " is bound to no chassis in SB"})
		case chassis != "" && at.Bound != chassis:
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: chk("attachment-binding"), Found: fmt.Sprintf("logical port %s is bound to chassis %s, but node %s is chassis %s", at.LSP, at.Bound, node, chassis),
				Fix: "duplicate or stale chassis: netctl diagnose all"})
		default:
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: chk("attachment-binding"), Found: "bound to chassis " + at.Bound})
		}
	}
	return out
}

// PodVpcCheck: the pod's VPC as the controller annotated it
// (ovn.kubernetes.io/logical_router) against its Subnet's.
func PodVpcCheck(scope string, p *corev1.Pod, subnetVpc string) Finding {
	got := p.Annotations[annotations.LogicalRouter]
	f := Finding{Scope: scope, Check: "pod-vpc"}
	switch {
	case got == "" || got == subnetVpc:
		f.Severity, f.Found = Pass, "VPC "+subnetVpc+" (router "+subnetVpc+")"
	default:
		f.Severity = Fail
		f.Found = fmt.Sprintf("annotation %s says %s, but Subnet %s is in VPC %s", annotations.LogicalRouter, got, p.Annotations[annotations.LogicalSwitch], subnetVpc)
		f.Fix = "the Subnet's spec.vpc changed under the pod: recreate the pod so it is wired in its Subnet's VPC"
	}
	return f
}

// NADProvider is the provider of a NetworkAttachmentDefinition's
// spec.config when its type (or one of its plugins') is ovnhost-cni or
// kube-ovn, "" for another plugin's NAD.
func NADProvider(config string) string {
	var c struct {
		Type     string `json:"type"`
		Provider string `json:"provider"`
		Plugins  []struct {
			Type     string `json:"type"`
			Provider string `json:"provider"`
		} `json:"plugins"`
	}
	if json.Unmarshal([]byte(config), &c) != nil {
		return ""
	}
	ours := func(t string) bool { return t == "ovnhost-cni" || t == "kube-ovn" }
	if ours(c.Type) {
		return c.Provider
	}
	for _, p := range c.Plugins {
		if ours(p.Type) {
			return p.Provider
		}
	}
	return ""
}
