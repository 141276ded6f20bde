package annotations

import "strings"

// DefaultProvider is the provider of a pod's default network: its keys are
// "ovn.kubernetes.io/<key>".
const DefaultProvider = "ovn"

// ProviderKey is Kube-OVN's annotation of provider for key: the default
// network's ("ovn") is "ovn.kubernetes.io/<key>", an attachment network's
// (provider "<nad>.<namespace>.ovn") "<nad>.<namespace>.ovn.kubernetes.io/<key>".
// key is the suffix after "ovn.kubernetes.io/" ("ip_address", "allocated", ...).
func ProviderKey(provider, key string) string {
	return provider + ".kubernetes.io/" + key
}

// Key suffixes of the per-provider annotations, as ProviderKey takes them.
const (
	KeyAllocated     = "allocated"
	KeyIPAddress     = "ip_address"
	KeyMACAddress    = "mac_address"
	KeyCIDR          = "cidr"
	KeyGateway       = "gateway"
	KeyLogicalSwitch = "logical_switch"
)

// NetworksAnnotation is Multus's list of a pod's extra networks.
const NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"

// AttachmentProviders are the attachment providers whose allocated
// annotation ("<provider>.kubernetes.io/allocated") ann holds as "true",
// the default network's ("ovn") left out.
func AttachmentProviders(ann map[string]string) []string {
	var out []string
	for k, v := range ann {
		p, ok := strings.CutSuffix(k, ".kubernetes.io/"+KeyAllocated)
		if ok && v == "true" && IsAttachmentProvider(p) {
			out = append(out, p)
		}
	}
	return out
}

// IsAttachmentProvider: an OVN attachment network's provider,
// "<nad>.<namespace>.ovn" (Kube-OVN's form), not the default "ovn".
func IsAttachmentProvider(p string) bool {
	rest, ok := strings.CutSuffix(p, ".ovn")
	if !ok {
		return false
	}
	nad, ns, ok := strings.Cut(rest, ".")
	return ok && nad != "" && ns != ""
}

// AttachmentNamespace is the namespace of the NetworkAttachmentDefinition
// an attachment provider "<nad>.<namespace>.ovn" names (namespaces have no
// dots, NAD names may), ok false when p is not an attachment provider.
func AttachmentNamespace(p string) (namespace string, ok bool) {
	if !IsAttachmentProvider(p) {
		return "", false
	}
	rest := strings.TrimSuffix(p, ".ovn")
	i := strings.LastIndexByte(rest, '.')
	return rest[i+1:], true
}

// IsNetworkKey: k is a key of a pod's network, the default network's
// ("ovn.kubernetes.io/<key>") or an attachment network's
// ("<nad>.<namespace>.ovn.kubernetes.io/<key>").
func IsNetworkKey(k string) bool {
	if strings.HasPrefix(k, prefix) {
		return true
	}
	p, _, ok := strings.Cut(k, ".kubernetes.io/")
	return ok && IsAttachmentProvider(p)
}
