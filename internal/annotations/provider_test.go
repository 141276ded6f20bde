package annotations

import "testing"

func TestAttachmentKeys(t *testing.T) {
	for p, ns := range map[string]string{"attnet.default.ovn": "default", "my.nad.tenant-a.ovn": "tenant-a", "ovn": "", "x.ovn": "", "a.b": ""} {
		got, ok := AttachmentNamespace(p)
		if got != ns || ok != (ns != "") {
			t.Errorf("AttachmentNamespace(%q) = %q %v, want %q", p, got, ok, ns)
		}
	}
	for k, want := range map[string]bool{
		"ovn.kubernetes.io/ip_address": true, "attnet.default.ovn.kubernetes.io/ip_address": true,
		"k8s.v1.cni.cncf.io/networks": false, "macvlan.default.kubernetes.io/ip_address": false, "example.com/x": false,
	} {
		if IsNetworkKey(k) != want {
			t.Errorf("IsNetworkKey(%q) = %v", k, !want)
		}
	}
}
