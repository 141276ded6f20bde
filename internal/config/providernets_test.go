package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

func TestProviderNetworksFromEnvFlagAndFile(t *testing.T) {
	want := []nodeconfig.ProviderNetwork{{Name: "physnet1", NIC: "eth1"}, {Name: "storage", NIC: "enp3s0f1.20"}}
	c, err := load(t, nil, []string{"NODE_NAME=n", "OVNHOST_PROVIDER_NETWORKS=physnet1:eth1, storage:enp3s0f1.20"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.ProviderNetworks, want) {
		t.Fatalf("from the environment: %+v", c.ProviderNetworks)
	}
	if c.HostSettings().ProviderNetworks == nil {
		t.Fatal("the host checks do not see the provider networks")
	}
	c, err = load(t, []string{"--provider-networks=physnet1:eth1,storage:enp3s0f1.20"}, []string{"NODE_NAME=n"})
	if err != nil || !reflect.DeepEqual(c.ProviderNetworks, want) {
		t.Fatalf("from the flag: %+v %v", c, err)
	}
	f := filepath.Join(t.TempDir(), "ovnhost.yaml")
	if err := os.WriteFile(f, []byte("provider-networks: [physnet1:eth1, storage:enp3s0f1.20]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = load(t, []string{"--config=" + f}, []string{"NODE_NAME=n"})
	if err != nil || !reflect.DeepEqual(c.ProviderNetworks, want) {
		t.Fatalf("from the file: %+v %v", c, err)
	}
	c, err = load(t, nil, []string{"NODE_NAME=n"})
	if err != nil || len(c.ProviderNetworks) != 0 {
		t.Fatalf("default: %+v %v", c.ProviderNetworks, err)
	}
}

// Each refusal names the key, the problem and the fix, before anything
// touches the host.
func TestProviderNetworksRefused(t *testing.T) {
	cases := []struct {
		value string
		extra []string
		want  []string // in the message
	}{
		{"physnet1", nil, []string{`"physnet1" is not name:nic`, "e.g. physnet1:eth1"}},
		{"physnet-too-long:eth1", nil, []string{"16 characters long", "at most 12", "br-physnet-too-long"}},
		{"PhysNet:eth1", nil, []string{"lower-case letters"}},
		{"phys_net:eth1", nil, []string{"lower-case letters"}},
		{"-net:eth1", nil, []string{"starting and ending"}},
		{"int:eth1", nil, []string{"reserved", "br-int"}},
		{"external:eth1", nil, []string{"reserved", "EIP/SNAT"}},
		{"physnet1:", nil, []string{`the NIC "" in "physnet1:" is empty`}},
		{"physnet1:averyveryverylongnic", nil, []string{"20 bytes long", "at most 15"}},
		{"physnet1:eth1:0", nil, []string{"'/', ':' or white space"}},
		{"a:eth1,a:eth2", nil, []string{"network a is listed twice", "keep one entry"}},
		{"a:eth1,b:eth1", nil, []string{"NIC eth1 is given to a and b", "one bridge only"}},
		{"a:br-int", nil, []string{"OVN's integration bridge"}},
		{"a:br-b,b:eth2", nil, []string{"the bridge of the network b"}},
		{"a:eth1", []string{"IFACE=eth1", "OVNHOST_USERSPACE_TUNNEL=true"}, []string{"tunnel interface (IFACE=eth1)", "--userspace-tunnel", "set IFACE to another NIC"}},
	}
	for _, tc := range cases {
		env := append([]string{"NODE_NAME=n", "OVNHOST_PROVIDER_NETWORKS=" + tc.value}, tc.extra...)
		_, err := load(t, nil, env)
		if err == nil {
			t.Errorf("%q accepted", tc.value)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "provider-networks") && !strings.Contains(msg, "OVNHOST_PROVIDER_NETWORKS") {
			t.Errorf("%q: the error does not name the key: %s", tc.value, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: %q missing from: %s", tc.value, w, msg)
			}
		}
	}
	// The tunnel interface may be a provider network's NIC without
	// --userspace-tunnel: its address moves to br-<name> and stays the
	// node's encap IP (Kube-OVN allows it too).
	if _, err := load(t, nil, []string{"NODE_NAME=n", "IFACE=eth1", "OVNHOST_PROVIDER_NETWORKS=a:eth1"}); err != nil {
		t.Fatalf("tunnel interface as a provider NIC without --userspace-tunnel: %v", err)
	}
}
