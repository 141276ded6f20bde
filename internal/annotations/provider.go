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
