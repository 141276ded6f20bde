// Package attachments reads what a pod asks of Multus and what its
// NetworkAttachmentDefinitions say, and picks the OVN attachment networks
// (Kube-OVN's provider subnets) among them. It is pure: the NADs come
// through a lookup function, the Subnets through another, so it is
// unit-tested without an apiserver. controller/pods allocates what Resolve
// returns.
package attachments

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// NADGVR is the NetworkAttachmentDefinition resource (network-plumbing-wg).
var NADGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// PluginTypes are the CNI types whose NADs are OVN attachment networks:
// ovnhost's plugin, and Kube-OVN's so that its NADs work unchanged.
var PluginTypes = []string{"ovnhost-cni", "kube-ovn"}

// Selection is one network of the pod's networks annotation, as Multus
// reads it.
type Selection struct {
	Namespace string // the NAD's namespace (the pod's when not given)
	Name      string // the NAD's name
	Interface string // the interface asked for ("" = Multus's netN)
}

// Ref is "namespace/name".
func (s Selection) Ref() string { return s.Namespace + "/" + s.Name }

// Multus's naming rule for each part of "namespace/name@interface".
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseNetworks parses a k8s.v1.cni.cncf.io/networks value as Multus does:
// a JSON list of {"name", "namespace", "interface"} objects, or a comma
// list of "[namespace/]name[@interface]". podNamespace is the default
// namespace. The error names the entry and the fix.
func ParseNetworks(value, podNamespace string) ([]Selection, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	if strings.HasPrefix(value, "[") {
		var list []struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			Interface string `json:"interface"`
		}
		if err := json.Unmarshal([]byte(value), &list); err != nil {
			return nil, fmt.Errorf("annotation %s is not a JSON list of networks (%v); write it as [{\"name\": \"<nad>\", \"namespace\": \"<ns>\"}] or \"<ns>/<nad>\"", annotations.NetworksAnnotation, err)
		}
		out := make([]Selection, 0, len(list))
		for i, e := range list {
			if e.Name == "" {
				return nil, fmt.Errorf("annotation %s: entry %d has no name; give each entry the name of a NetworkAttachmentDefinition", annotations.NetworksAnnotation, i)
			}
			if e.Namespace == "" {
				e.Namespace = podNamespace
			}
			out = append(out, Selection{Namespace: e.Namespace, Name: e.Name, Interface: e.Interface})
		}
		return out, nil
	}
	var out []Selection
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		s := Selection{Namespace: podNamespace}
		rest := item
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			s.Namespace, rest = ns, name
		}
		if name, ifname, ok := strings.Cut(rest, "@"); ok {
			rest, s.Interface = name, ifname
		}
		s.Name = rest
		for _, part := range []string{s.Namespace, s.Name} {
			if !dnsLabel.MatchString(part) {
				return nil, fmt.Errorf("annotation %s: entry %q is not [namespace/]name[@interface] (%q is not a lower-case DNS label); fix the entry", annotations.NetworksAnnotation, item, part)
			}
		}
		if strings.Contains(s.Interface, "@") || strings.Contains(s.Interface, "/") || (strings.Contains(item, "@") && s.Interface == "") {
			return nil, fmt.Errorf("annotation %s: entry %q has a bad interface name; write it as [namespace/]name@net1", annotations.NetworksAnnotation, item)
		}
		out = append(out, s)
	}
	return out, nil
}

// NADConfig is what a NAD's spec.config says of the OVN plugin.
type NADConfig struct {
	Ours     bool   // its type (or one of its plugins' types) is in PluginTypes
	Type     string // that type
	Provider string // its provider field
}

// ParseNADConfig reads a NAD's spec.config: a CNI config (one plugin) or a
// conflist ("plugins"). A NAD of another plugin (macvlan ...) is not Ours
// and is left to Multus. An empty config (Multus then reads a file on the
// node) is not ours either.
func ParseNADConfig(config string) (NADConfig, error) {
	if strings.TrimSpace(config) == "" {
		return NADConfig{}, nil
	}
	type plugin struct {
		Type     string `json:"type"`
		Provider string `json:"provider"`
	}
	var c struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return NADConfig{}, fmt.Errorf("spec.config is not JSON (%v); write a CNI config such as {\"cniVersion\": \"0.3.1\", \"type\": \"kube-ovn\", \"provider\": \"<nad>.<namespace>.ovn\"}", err)
	}
	for _, p := range append([]plugin{c.plugin}, c.Plugins...) {
		for _, t := range PluginTypes {
			if p.Type == t {
				return NADConfig{Ours: true, Type: p.Type, Provider: p.Provider}, nil
			}
		}
	}
	return NADConfig{}, nil
}

// Attachment is one OVN attachment network a pod asks for.
type Attachment struct {
	NAD       Selection
	Provider  string // "<nad>.<namespace>.ovn"
	Subnet    string // the Subnet whose spec.provider is Provider
	Interface string // the interface asked for (Multus's netN when none)
}

// Refusal is why a pod's attachments cannot be given: an event reason and
// a message naming the input, the problem and the fix.
type Refusal struct {
	Reason  string
	Message string
	// Provider is the provider a pod refused for a missing or wrong
	// Subnet waits for ("" otherwise).
	Provider string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Event reasons of refusals.
const (
	ReasonInvalidNetworks = "InvalidNetworks"  // the networks annotation does not parse, or lists an OVN NAD twice
	ReasonNADNotFound     = "NADNotFound"      // a NAD the annotation names does not exist
	ReasonInvalidNAD      = "InvalidNAD"       // an OVN NAD whose config or provider is wrong
	ReasonUnknownProvider = "UnknownProvider"  // no Subnet has the NAD's provider
	ReasonWrongSubnet     = "AttachmentSubnet" // the provider's logical_switch annotation names a Subnet of another provider
)

// Lookups are what Resolve reads of the cluster.
type Lookups struct {
	// NAD returns a NAD's spec.config; found false when it does not exist.
	NAD func(namespace, name string) (config string, found bool, err error)
	// SubnetsOf lists the Subnets whose spec.provider is provider (sorted).
	SubnetsOf func(provider string) []string
	// ProviderOf is the spec.provider of a Subnet ("" when unknown).
	ProviderOf func(subnet string) string
}

// Resolve lists the pod's OVN attachment networks from its annotations
// (ann: its networks annotation and the per-provider logical_switch
// choices). NADs of other plugins are skipped. The first problem refuses
// the pod (Refusal); another error is a lookup failure to retry.
func Resolve(podNamespace string, ann map[string]string, l Lookups) ([]Attachment, error) {
	sels, err := ParseNetworks(ann[annotations.NetworksAnnotation], podNamespace)
	if err != nil {
		return nil, &Refusal{Reason: ReasonInvalidNetworks, Message: err.Error()}
	}
	var out []Attachment
	seen := map[string]string{}
	for i, s := range sels {
		cfg, found, err := l.NAD(s.Namespace, s.Name)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &Refusal{Reason: ReasonNADNotFound, Message: fmt.Sprintf("annotation %s names NetworkAttachmentDefinition %s, which does not exist; create it or remove %q from the annotation",
				annotations.NetworksAnnotation, s.Ref(), s.Ref())}
		}
		c, err := ParseNADConfig(cfg)
		if err != nil {
			return nil, &Refusal{Reason: ReasonInvalidNAD, Message: fmt.Sprintf("NetworkAttachmentDefinition %s: %v", s.Ref(), err)}
		}
		if !c.Ours {
			continue
		}
		want := s.Name + "." + s.Namespace + ".ovn"
		if !annotations.IsAttachmentProvider(c.Provider) {
			return nil, &Refusal{Reason: ReasonInvalidNAD, Message: fmt.Sprintf("NetworkAttachmentDefinition %s (type %s) has provider %q, which is not an OVN attachment network's; set \"provider\": %q in its config and give a Subnet spec.provider %q",
				s.Ref(), c.Type, c.Provider, want, want)}
		}
		if c.Provider != want {
			// A NAD is namespaced and tenants may write it: a provider naming
			// another NAD would reach that network's Subnets.
			return nil, &Refusal{Reason: ReasonInvalidNAD, Message: fmt.Sprintf("NetworkAttachmentDefinition %s has provider %q, which names another NetworkAttachmentDefinition; a NAD's provider must name itself: set \"provider\": %q",
				s.Ref(), c.Provider, want)}
		}
		if prev, dup := seen[c.Provider]; dup {
			return nil, &Refusal{Reason: ReasonInvalidNetworks, Message: fmt.Sprintf("annotation %s asks for provider %q twice (%s and %s); a pod has one interface per OVN attachment network: list it once",
				annotations.NetworksAnnotation, c.Provider, prev, s.Ref())}
		}
		seen[c.Provider] = s.Ref()
		a := Attachment{NAD: s, Provider: c.Provider, Interface: s.Interface}
		if a.Interface == "" {
			a.Interface = fmt.Sprintf("net%d", i+1) // Multus's name for the entry's interface
		}
		chosen := ann[annotations.ProviderKey(c.Provider, annotations.KeyLogicalSwitch)]
		subnets := l.SubnetsOf(c.Provider)
		switch {
		case chosen != "":
			if p := l.ProviderOf(chosen); p != c.Provider {
				return nil, &Refusal{Reason: ReasonWrongSubnet, Provider: c.Provider, Message: fmt.Sprintf("annotation %s names Subnet %q, whose provider is %q, not %q; name a Subnet with spec.provider %q (%s) or remove the annotation",
					annotations.ProviderKey(c.Provider, annotations.KeyLogicalSwitch), chosen, p, c.Provider, c.Provider, listOrNone(subnets))}
			}
			a.Subnet = chosen
		case len(subnets) == 0:
			return nil, &Refusal{Reason: ReasonUnknownProvider, Provider: c.Provider, Message: fmt.Sprintf("NetworkAttachmentDefinition %s has provider %q, and no Subnet has spec.provider %q; create a Subnet with that provider, or fix the NAD's provider",
				s.Ref(), c.Provider, c.Provider)}
		default:
			a.Subnet = subnets[0]
		}
		out = append(out, a)
	}
	return out, nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none exists"
	}
	return "such as " + strings.Join(names, ", ")
}
