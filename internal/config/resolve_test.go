package config

import (
	"slices"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Resolve carries every setting the node's subsystems read into the
// NodeConfig: they read nothing else.
func TestResolveFillsEverySection(t *testing.T) {
	c, err := load(t, []string{"--node-name=n1", "--ovn-db-ips=10.0.0.1", "--enable-ssl", "--ssl-dir=/pki",
		"--nat-backend=nft", "--adopt-children", "--keep-datapath", "--child-probe-misses=7", "--start-timeout=9s",
		"--cni-socket=/run/x.sock", "--cni-socket-group=0", "--mirror-output=m0", "--kubeconfig=/etc/kc",
		"--ovn-remote-probe-interval=2000", "--run-dir-owner=-1:-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.Resolve(nodeconfig.Findings{TunnelIface: "eth0", EncapIP: "10.0.0.9", UnderlayMTU: 1500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := nc.Daemons
	switch {
	case nc.Name != "n1" || nc.AllInOne || nc.SB.Endpoint != "ssl:10.0.0.1:6642" || nc.NB.Endpoint != "ssl:10.0.0.1:6641":
		t.Fatalf("identity and remotes: %+v", nc)
	case !d.AdoptChildren || !d.KeepDatapath || d.ProbeMisses != 7 || d.StartTimeout != 9*time.Second || d.RemoteProbeInterval != 2*time.Second:
		t.Fatalf("daemons: %+v", d)
	case !d.TLS.Enabled || d.TLS.Key != "/pki/ovn-privkey.pem" || d.TLS.CACert != "/pki/cacert.pem":
		t.Fatalf("TLS files: %+v", d.TLS)
	case !slices.Equal(d.BinDirs, c.BinDirs) || d.OVSSchema != c.OVSSchema || d.RunOwner.UID != -1:
		t.Fatalf("programs and owner: %+v", d)
	case nc.NATBackend != nodeconfig.NATNft:
		t.Fatalf("NAT backend: %q", nc.NATBackend)
	case nc.CNI.Socket != "/run/x.sock" || nc.CNI.SocketGroup != "0" || nc.CNI.MirrorOutput != "m0" || nc.CNI.BinDir != "/opt/cni/bin" || len(nc.CNI.ControllerFieldManagers) != 2:
		t.Fatalf("CNI: %+v", nc.CNI)
	case nc.Kubernetes.Kubeconfig != "/etc/kc":
		t.Fatalf("Kubernetes: %+v", nc.Kubernetes)
	}
}

// OVN_NB_ADDR gives a remote node the NB its node API reads for netctl;
// an all-in-one node keeps its own.
func TestNBAddrOverridesTheRemoteNB(t *testing.T) {
	c, err := load(t, []string{"--node-name=n1", "--ovn-sb-addr=unix:/c/sb.sock", "--ovn-nb-addr=unix:/c/nb.sock"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != Remote || c.NBRemote != "unix:/c/nb.sock" || c.SBRemote != "unix:/c/sb.sock" {
		t.Fatalf("SB and NB addresses: mode %v, NB %q, SB %q", c.Mode, c.NBRemote, c.SBRemote)
	}
	c, err = load(t, []string{"--node-name=n1", "--ovn-db-ips=10.0.0.1", "--ovn-nb-addr=tcp:10.0.0.5:6641"}, nil)
	if err != nil || c.NBRemote != "tcp:10.0.0.5:6641" || c.SBRemote != "tcp:10.0.0.1:6642" {
		t.Fatalf("ovn-db-ips with ovn-nb-addr: %v NB %q SB %q", err, c.NBRemote, c.SBRemote)
	}
	if _, err := load(t, []string{"--node-name=n1", "--ovn-nb-addr=nb.sock"}, nil); err == nil {
		t.Fatal("ovn-nb-addr without a scheme: no error")
	}
}
