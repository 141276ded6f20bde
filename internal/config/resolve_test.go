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
