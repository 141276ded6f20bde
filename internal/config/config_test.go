package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/layout"
)

func load(t *testing.T, args, env []string) (*Config, error) {
	t.Helper()
	return Load(args, env, io.Discard)
}

func TestDefaultsAreAllInOneUnderVarLibAndRun(t *testing.T) {
	c, err := load(t, nil, []string{"NODE_NAME=n1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != AllInOne || c.SBRemote != "unix:/run/ovn/ovnsb_db.sock" || c.NBRemote != "unix:/run/ovn/ovnnb_db.sock" {
		t.Fatalf("mode %s sb %s nb %s", c.Mode, c.SBRemote, c.NBRemote)
	}
	want := layout.Paths{OVSDBDir: "/var/lib/openvswitch", OVSRunDir: "/run/openvswitch", OVSLogDir: "/var/log/openvswitch", OVNDBDir: "/var/lib/ovn", OVNRunDir: "/run/ovn", OVNLogDir: "/var/log/ovn"}
	if c.Paths != want {
		t.Fatalf("paths %+v", c.Paths)
	}
	for _, p := range []string{c.Paths.OVSDBDir, c.Paths.OVSRunDir, c.Paths.OVNDBDir, c.CNISocket} {
		if strings.HasPrefix(p, "/etc") || strings.HasPrefix(p, "/usr") {
			t.Errorf("default %s is under /etc or /usr (read-only on Talos)", p)
		}
	}
	if c.TunnelType != "geneve" || c.ProbeInterval != 10*time.Second || c.OpenflowProbeInterval != 180*time.Second || c.HealthAddr != "127.0.0.1:10665" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestKubeOVNEnvironmentNames(t *testing.T) {
	c, err := load(t, nil, []string{
		"NODE_NAME=worker-1", "OVN_DB_IPS=10.0.0.2,10.0.0.3", "TUNNEL_TYPE=vxlan", "IFACE=ens33,eth.*",
		"OVN_REMOTE_PROBE_INTERVAL=5000", "OVN_REMOTE_OPENFLOW_INTERVAL=60", "HW_OFFLOAD=true",
		"DISABLE_MODULES_MANAGEMENT=true", "OPENVSWITCH_DIR=/var/lib/ovs-alt", "OVN_DIR=/var/lib/ovn-alt",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != Remote || c.SBRemote != "tcp:10.0.0.2:6642,tcp:10.0.0.3:6642" || c.NBRemote != "tcp:10.0.0.2:6641,tcp:10.0.0.3:6641" {
		t.Fatalf("remote: %s %s %s", c.Mode, c.SBRemote, c.NBRemote)
	}
	if c.NodeName != "worker-1" || c.TunnelType != "vxlan" || strings.Join(c.Iface, "|") != "ens33|eth.*" || c.ProbeInterval != 5*time.Second ||
		c.OpenflowProbeInterval != time.Minute || !c.HWOffload || !c.DisableMod || c.Paths.OVSDBDir != "/var/lib/ovs-alt" || c.Paths.OVNDBDir != "/var/lib/ovn-alt" {
		t.Fatalf("%+v", c)
	}
}

func TestSSLAndSBOverride(t *testing.T) {
	c, err := load(t, nil, []string{"NODE_NAME=n", "OVN_DB_IPS=fd00::2", "ENABLE_SSL=true", "OVN_SB_ADDR=ssl:10.1.1.1:16642"})
	if err != nil {
		t.Fatal(err)
	}
	if c.NBRemote != "ssl:[fd00::2]:6641" || c.SBRemote != "ssl:10.1.1.1:16642" || c.SSLCert != "/var/lib/ovn/pki/ovn-cert.pem" {
		t.Fatalf("%s %s %s", c.NBRemote, c.SBRemote, c.SSLCert)
	}
}

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ovnhost.yaml")
	if err := os.WriteFile(f, []byte("node-name: from-file\ntunnel-type: vxlan\nlog-level: debug\nbin-dirs: [/opt/ovs/sbin, /usr/sbin]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := load(t, []string{"--config=" + f, "--node-name=from-flag"}, []string{"NODE_NAME=from-env", "TUNNEL_TYPE=stt"})
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "from-flag" || c.TunnelType != "stt" || c.LogLevel != "debug" || c.Datapath != "auto" {
		t.Fatalf("node %s tunnel %s log %s datapath %s", c.NodeName, c.TunnelType, c.LogLevel, c.Datapath)
	}
	if strings.Join(c.BinDirs, ",") != "/opt/ovs/sbin,/usr/sbin" {
		t.Fatalf("list from YAML: %v", c.BinDirs)
	}
	// OVNHOST_CONFIG names the file when --config is absent.
	c, err = load(t, nil, []string{"OVNHOST_CONFIG=" + f})
	if err != nil || c.NodeName != "from-file" {
		t.Fatalf("OVNHOST_CONFIG: %v %v", c, err)
	}
}

func TestEveryBadValueIsReportedWithKeySourceAndFix(t *testing.T) {
	_, err := load(t, []string{"--health-addr=nonsense", "--datapath=dpdk"}, []string{
		"NODE_NAME=n", "TUNNEL_TYPE=gre", "ENABLE_SSL=maybe", "OVN_REMOTE_PROBE_INTERVAL=-5", "IFACE=eth[", "OVN_SB_ADDR=tcp:host:1",
	})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v, want Errors", err)
	}
	want := map[string]string{
		"--health-addr": "host:port", "--datapath": "auto, kernel, netdev", "TUNNEL_TYPE": "geneve, vxlan, stt",
		"ENABLE_SSL": "true or false", "OVN_REMOTE_PROBE_INTERVAL": "positive", "IFACE": "regular expression", "OVN_SB_ADDR": "not an IP address",
	}
	got := map[string]*Error{}
	for _, e := range errs {
		got[e.Key] = e
	}
	for k, sub := range want {
		e, ok := got[k]
		if !ok {
			t.Errorf("no error for %s; all: %v", k, err)
			continue
		}
		if !strings.Contains(e.Error(), sub) {
			t.Errorf("%s: %q lacks %q", k, e.Error(), sub)
		}
		if e.Fix == "" {
			t.Errorf("%s: no fix given", k)
		}
	}
}

func TestUnknownNamesAreRejectedWithASuggestion(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte("ovs-rundir: /x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := load(t, []string{"--config=" + f}, []string{"NODE_NAME=n", "OVNHOST_DATAPTH=netdev"})
	if err == nil || !strings.Contains(err.Error(), "ovs-rundir") || !strings.Contains(err.Error(), "did you mean ovs-run-dir") ||
		!strings.Contains(err.Error(), "OVNHOST_DATAPTH") || !strings.Contains(err.Error(), "OVNHOST_DATAPATH") {
		t.Fatalf("got %v", err)
	}
	if _, err := load(t, []string{"--node-nmae=x"}, nil); err == nil || !strings.Contains(err.Error(), "node-nmae") {
		t.Fatalf("unknown flag: %v", err)
	}
}

func TestCrossChecks(t *testing.T) {
	if _, err := load(t, []string{"--datapath=netdev"}, []string{"NODE_NAME=n", "TUNNEL_TYPE=stt"}); err == nil || !strings.Contains(err.Error(), "STT") {
		t.Fatalf("stt on netdev: %v", err)
	}
	if _, err := load(t, nil, []string{"NODE_NAME=Bad_Name"}); err == nil || !strings.Contains(err.Error(), "node name") {
		t.Fatalf("bad node name: %v", err)
	}
}

func TestSBAddressAloneMeansRemote(t *testing.T) {
	c, err := load(t, nil, []string{"NODE_NAME=n", "OVN_SB_ADDR=unix:/run/central/sb.sock"})
	if err != nil || c.Mode != Remote || c.SBRemote != "unix:/run/central/sb.sock" || c.NBRemote != "" {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestBooleanFlagsTakeNoValue(t *testing.T) {
	c, err := load(t, []string{"--keep-datapath", "--hw-offload=false"}, []string{"NODE_NAME=n"})
	if err != nil || !c.KeepDatapath || c.HWOffload {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestLogFileSizes(t *testing.T) {
	c, err := load(t, []string{"--log-file-max-size=64Ki"}, []string{"NODE_NAME=n"})
	if err != nil || c.LogFileMaxSize != 64<<10 {
		t.Fatalf("%v %v", c.LogFileMaxSize, err)
	}
	if _, err := load(t, []string{"--log-file-max-size=lots"}, []string{"NODE_NAME=n"}); err == nil || !strings.Contains(err.Error(), "Ki, Mi or Gi") {
		t.Fatalf("bad size: %v", err)
	}
	if c, _ := load(t, nil, []string{"NODE_NAME=n"}); c.LogFileMaxSize != 100<<20 {
		t.Fatalf("default %d", c.LogFileMaxSize)
	}
}

// Kubernetes injects service-link variables for a Service named ovnhost or
// ovnhost-* in the DaemonSet's namespace: they are not settings and must
// not stop the node (issue 14.5); real typos still do.
func TestServiceLinkVariablesAreIgnored(t *testing.T) {
	links := []string{
		"OVNHOST_METRICS_SERVICE_HOST=10.96.0.7", "OVNHOST_METRICS_SERVICE_PORT=9476", "OVNHOST_METRICS_SERVICE_PORT_HTTP=9476",
		"OVNHOST_METRICS_PORT=tcp://10.96.0.7:9476", "OVNHOST_METRICS_PORT_9476_TCP=tcp://10.96.0.7:9476",
		"OVNHOST_METRICS_PORT_9476_TCP_PROTO=tcp", "OVNHOST_METRICS_PORT_9476_TCP_PORT=9476", "OVNHOST_METRICS_PORT_9476_TCP_ADDR=10.96.0.7",
		"OVNHOST_SERVICE_HOST=10.96.0.8", "OVNHOST_PORT=tcp://10.96.0.8:53", "OVNHOST_PORT_53_UDP_ADDR=10.96.0.8",
	}
	c, err := load(t, nil, append([]string{"NODE_NAME=n"}, links...))
	if err != nil {
		t.Fatalf("service-link variables refused: %v", err)
	}
	if len(c.IgnoredEnv) != len(links) {
		t.Fatalf("ignored %v, want all %d service-link variables", c.IgnoredEnv, len(links))
	}
	for _, typo := range []string{"OVNHOST_DATAPTH=netdev", "OVNHOST_PORTS=1", "OVNHOST_X_SERVICE_HOSTS=a"} {
		if _, err := load(t, nil, append([]string{"NODE_NAME=n", typo}, links...)); err == nil || !strings.Contains(err.Error(), strings.Split(typo, "=")[0]) {
			t.Errorf("typo %s: %v", typo, err)
		}
	}
}

// A standalone node's pod and join ranges: one CIDR per family, the join
// range covering each family of the pod range; a dual-stack pair loads.
func TestStandaloneCIDRs(t *testing.T) {
	c, err := load(t, []string{"--default-cidr=10.16.0.0/16,fd00:10:16::/64"}, []string{"NODE_NAME=n", "JOIN_CIDR=100.64.0.0/16,fd00:100:64::/112"})
	if err != nil || len(c.StandaloneCIDRs) != 2 || len(c.StandaloneJoinCIDRs) != 2 {
		t.Fatalf("dual-stack ranges: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args, env []string
		key, sub  string
	}{
		{[]string{"--default-cidr=10.16.0.0/16,10.17.0.0/16"}, nil, "--default-cidr", "same IP family"},
		{nil, []string{"POD_CIDR=10.16.0.1/16"}, "POD_CIDR", "use 10.16.0.0/16"},
		{[]string{"--default-cidr=10.16.0.0/16,fd00:10:16::/64"}, nil, "node-switch-cidr", "fd00:100:64::/112"},
		{[]string{"--default-cidr=fd00:10:16::/64", "--node-switch-cidr=100.64.0.0/16"}, nil, "node-switch-cidr", "lacks an IP family"},
	} {
		_, err := load(t, tc.args, append([]string{"NODE_NAME=n"}, tc.env...))
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.sub) {
			t.Errorf("%v %v: %v, want an error naming %s with %q", tc.args, tc.env, err, tc.key, tc.sub)
		}
	}
}

// ovn-ofctrl-wait-before-clear: a default, flag/env/file forms, and
// negative, fractional or absurd values refused with the key and a fix.
func TestOfctrlWaitBeforeClear(t *testing.T) {
	c, err := load(t, nil, []string{"NODE_NAME=n"})
	if err != nil {
		t.Fatal(err)
	}
	if c.OfctrlWaitBeforeClear != DefaultOfctrlWaitBeforeClearMs*time.Millisecond {
		t.Fatalf("default %v", c.OfctrlWaitBeforeClear)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("ovn-ofctrl-wait-before-clear: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args, env []string
		want      time.Duration
	}{
		{[]string{"--ovn-ofctrl-wait-before-clear=10000"}, nil, 10 * time.Second},
		{nil, []string{"OVNHOST_OVN_OFCTRL_WAIT_BEFORE_CLEAR=500"}, 500 * time.Millisecond},
		{[]string{"--config=" + file}, nil, 0},
	} {
		c, err := load(t, tc.args, append([]string{"NODE_NAME=n"}, tc.env...))
		if err != nil || c.OfctrlWaitBeforeClear != tc.want {
			t.Errorf("%v %v: %v %v, want %v", tc.args, tc.env, c, err, tc.want)
		}
	}
	for _, bad := range []string{"-1", "1.5", "10s", "300001", "99999999999"} {
		_, err := load(t, []string{"--ovn-ofctrl-wait-before-clear=" + bad}, []string{"NODE_NAME=n"})
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Key != "--ovn-ofctrl-wait-before-clear" ||
			!strings.Contains(errs[0].Reason, "from 0 to 300000") || !strings.Contains(errs[0].Fix, "stopwatch/show flow-generation") {
			t.Errorf("%s: %v, want one error naming the key, the range and how to measure", bad, err)
		}
	}
}
