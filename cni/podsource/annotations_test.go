package podsource

import (
	"errors"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

func good() map[string]string {
	return map[string]string{
		annotations.Allocated: "true", annotations.Routed: "true", annotations.IPAddress: "10.16.0.5", annotations.MACAddress: "0a:58:0a:10:00:05",
		annotations.CIDR: "10.16.0.0/16", annotations.Gateway: "10.16.0.1", annotations.LogicalSwitch: "ovn-default",
	}
}

func TestParseAnnotations(t *testing.T) {
	ann := good()
	ann[annotations.IngressRate] = "10"
	ann[annotations.EgressRate] = "5"
	ann[annotations.Mirror] = "true"
	ann[annotations.Routes] = `[{"dst":"192.168.0.0/24","gw":"10.16.0.254"},{"gw":"10.16.0.253"}]`
	n, err := ParseAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if n.Addrs[0].String() != "10.16.0.5/16" || n.Gateways[0].String() != "10.16.0.1" || n.MAC.String() != "0a:58:0a:10:00:05" {
		t.Fatalf("parsed %+v", n)
	}
	if n.IngressMbps != 10 || n.EgressMbps != 5 || !n.Mirror || len(n.Routes) != 2 {
		t.Fatalf("optional fields %+v", n)
	}
	// The annotated default route replaces the gateway's.
	rs := n.PodRoutes()
	if len(rs) != 2 || rs[1].Dst.String() != "0.0.0.0/0" || rs[1].GW.String() != "10.16.0.253" {
		t.Fatalf("routes %+v", rs)
	}
	dual := good()
	dual[annotations.IPAddress], dual[annotations.CIDR], dual[annotations.Gateway] = "10.16.0.5,fd00:10:16::5", "10.16.0.0/16,fd00:10:16::/64", "10.16.0.1,fd00:10:16::1"
	n, err = ParseAnnotations(dual)
	if err != nil || len(n.Addrs) != 2 || n.Addrs[1].String() != "fd00:10:16::5/64" || len(n.PodRoutes()) != 2 {
		t.Fatalf("dual stack: %+v %v", n, err)
	}
}

func TestBadAnnotationsArePrecise(t *testing.T) {
	for key, c := range map[string]struct{ val, want string }{
		annotations.IPAddress:   {"10.17.0.5", "outside the pod's CIDR"},
		annotations.MACAddress:  {"01:00:5e:00:00:01", "not a unicast Ethernet MAC"},
		annotations.CIDR:        {"10.16.0.0", "not a CIDR"},
		annotations.IngressRate: {"fast", "whole number of Mbit/s"},
		annotations.EgressRate:  {"-3", "whole number of Mbit/s"},
		annotations.Mirror:      {"yes please", "not a boolean"},
		annotations.Routes:      {`[{"dst":"x"}]`, `dst "x" is not a CIDR`},
	} {
		ann := good()
		ann[key] = c.val
		_, err := ParseAnnotations(ann)
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: got %v, want an error naming the key and %q", key, c.val, err, c.want)
		}
	}
	ann := good()
	delete(ann, annotations.Routed)
	ann[annotations.Allocated] = "false"
	miss := missingAnnotations(ann)
	if strings.Join(miss, ",") != annotations.Allocated+"=true,"+annotations.Routed {
		t.Fatalf("missing %v", miss)
	}
}

// TestMTUAnnotation: the controller's ovn.kubernetes.io/mtu (the Subnet's
// mtu) reaches PodNetwork.MTU; a value that is no MTU fails the pod with an
// AnnotationError naming the key (cni/server has the MTU precedence).
// An underlay pod's provider network is read; a value no ProviderNetwork
// can be named fails the pod, naming the key.
func TestProviderNetworkAnnotation(t *testing.T) {
	ann := good()
	ann[annotations.ProviderNetwork] = "physnet1"
	if n, err := ParseAnnotations(ann); err != nil || n.ProviderNetwork != "physnet1" {
		t.Fatalf("%s=physnet1: %+v %v", annotations.ProviderNetwork, n, err)
	}
	ann[annotations.ProviderNetwork] = "../etc"
	var ae *AnnotationError
	if _, err := ParseAnnotations(ann); !errors.As(err, &ae) || ae.Key != annotations.ProviderNetwork {
		t.Fatalf("bad provider network accepted or not named: %v", err)
	}
}

func TestMTUAnnotation(t *testing.T) {
	n, err := ParseAnnotations(good())
	if err != nil || n.MTU != 0 {
		t.Fatalf("no mtu annotation: MTU %d, err %v (want 0: the node decides)", n.MTU, err)
	}
	ann := good()
	ann[annotations.MTU] = "1300"
	if n, err = ParseAnnotations(ann); err != nil || n.MTU != 1300 {
		t.Fatalf("%s=1300: %+v %v", annotations.MTU, n, err)
	}
	for _, bad := range []string{"abc", "100", "-1", "70000"} {
		ann := good()
		ann[annotations.MTU] = bad
		_, err := ParseAnnotations(ann)
		var ae *AnnotationError
		if !errors.As(err, &ae) || ae.Key != annotations.MTU || ae.Value != bad || !strings.Contains(err.Error(), annotations.MTU) {
			t.Errorf("%s=%q: got %#v, want an *AnnotationError naming the key", annotations.MTU, bad, err)
		}
	}

}
