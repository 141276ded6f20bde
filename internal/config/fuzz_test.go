package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: the configuration file and the environment as anyone with
// access to them may write them. Load never panics, and what it accepts
// passes its own checks (the node name is set, paths are absolute).
func FuzzLoad(f *testing.F) {
	f.Add("node-name: n1\ntunnel-type: vxlan\n", "IFACE=eth0,ens3", "OVNHOST_POD_MTU=1400")
	f.Add("datapath: netdev\nkeep-datapath: true\ncni-socket-group: \"0\"\n", "OVN_DB_IPS=10.0.0.1,10.0.0.2", "ENABLE_SSL=true")
	f.Add("ovs-run-dir: relative\n: :\n- list\n", "OVNHOST_X_SERVICE_HOST=1.2.3.4", "OVNHOST_DATAPTH=netdev")
	f.Add("\xff\xfe\x00", "NODE_NAME=", "OVN_REMOTE_PROBE_INTERVAL=-1")
	f.Fuzz(func(t *testing.T, file, env1, env2 string) {
		p := filepath.Join(t.TempDir(), "ovnhost.yaml")
		if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		env := []string{"NODE_NAME=fuzz-node", "OVNHOST_CONFIG=" + p}
		for _, e := range []string{env1, env2} {
			if strings.Contains(e, "=") && !strings.HasPrefix(e, "OVNHOST_CONFIG=") {
				env = append(env, e)
			}
		}
		c, err := Load(nil, env, nil)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no message")
			}
			return
		}
		if c.NodeName == "" || !filepath.IsAbs(c.Paths.OVSRunDir) || !filepath.IsAbs(c.CNISocket) {
			t.Fatalf("accepted a configuration that fails its own rules: node %q run dir %q socket %q", c.NodeName, c.Paths.OVSRunDir, c.CNISocket)
		}
	})
}
