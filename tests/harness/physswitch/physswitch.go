// Package physswitch is the physical network of the underlay tests: an
// 802.1Q switch with trunk and access ports, in its own network
// namespace. It is an Open vSwitch of its own (its own ovsdb-server and
// ovs-vswitchd on the userspace datapath, nothing shared with the nodes
// under test) because the kernel these tests run on has neither the 8021q
// module nor bridge VLAN filtering; OVS's normal action is a learning
// VLAN switch like any top-of-rack one. The kernel-datapath VMs use
// Linux VLANs instead.
package physswitch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/proc"
)

// Bridge is the switch's one bridge.
const Bridge = "brsw"

// Switch is a running switch.
type Switch struct {
	NS  string
	dir string
	env []string
}

// Start runs the switch in network namespace ns; it is stopped at the
// end of the test.
func Start(t testing.TB, ns string) *Switch {
	t.Helper()
	s := &Switch{NS: ns, dir: t.TempDir()}
	s.env = append(os.Environ(), "OVS_RUNDIR="+s.dir, "OVS_DBDIR="+s.dir, "OVS_LOGDIR="+s.dir)
	db := filepath.Join(s.dir, "conf.db")
	if out, err := exec.Command("ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("physswitch: ovsdb-tool create: %v\n%s", err, out)
	}
	sock := filepath.Join(s.dir, "db.sock")
	var dbProc *proc.Process
	if err := proc.WaitFile(sock, 20*time.Second, func() error {
		p, err := proc.Start(proc.Spec{Name: "physswitch ovsdb-server", Path: "ovsdb-server", Env: s.env, Log: filepath.Join(s.dir, "ovsdb-server.log"),
			Args: []string{db, "--remote=punix:" + sock, "--unixctl=" + filepath.Join(s.dir, "ovsdb-server.ctl")}, Pdeathsig: true})
		dbProc = p
		return err
	}); err != nil {
		t.Fatalf("physswitch: %v", err)
	}
	t.Cleanup(func() { dbProc.Terminate(5 * time.Second) })
	s.vsctl(t, "--no-wait", "init")
	vs, err := proc.Start(proc.Spec{Name: "physswitch ovs-vswitchd", Path: "ovs-vswitchd", Env: s.env, NetNS: ns, Pdeathsig: true,
		Log:  filepath.Join(s.dir, "ovs-vswitchd.log"),
		Args: []string{"unix:" + sock, "--unixctl=" + filepath.Join(s.dir, "ovs-vswitchd.ctl")}})
	if err != nil {
		t.Fatalf("physswitch: %v", err)
	}
	t.Cleanup(func() { vs.Terminate(5 * time.Second) })
	// ovs-vsctl waits for ovs-vswitchd to apply the bridge: its readiness.
	s.vsctl(t, "add-br", Bridge, "--", "set", "Bridge", Bridge, "datapath_type=netdev")
	return s
}

func (s *Switch) vsctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("ovs-vsctl", append([]string{"--db=unix:" + filepath.Join(s.dir, "db.sock"), "--timeout=30"}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("physswitch: ovs-vsctl %s: %v\n%s\n%s", strings.Join(args, " "), err, out, s.Log())
	}
	return string(out)
}

// Trunk plugs port (a link in the switch's namespace) in as a trunk
// carrying vids, tagged.
func (s *Switch) Trunk(t testing.TB, port string, vids ...int) {
	t.Helper()
	var v []string
	for _, id := range vids {
		v = append(v, strconv.Itoa(id))
	}
	s.plug(t, port, "trunks="+strings.Join(v, ","), "vlan_mode=trunk")
}

// Access plugs port in as an access port of vid (untagged on the wire).
func (s *Switch) Access(t testing.TB, port string, vid int) {
	t.Helper()
	s.plug(t, port, "tag="+strconv.Itoa(vid), "vlan_mode=access")
}

func (s *Switch) plug(t testing.TB, port string, settings ...string) {
	t.Helper()
	// The userspace datapath forwards what it reads as it is: a partial
	// checksum left to an offload would leave it unfinished.
	if out, err := exec.Command("ip", "netns", "exec", s.NS, "ethtool", "-K", port, "tx", "off").CombinedOutput(); err != nil {
		t.Fatalf("physswitch: ethtool %s: %v\n%s", port, err, out)
	}
	if out, err := exec.Command("ip", "-n", s.NS, "link", "set", port, "up").CombinedOutput(); err != nil {
		t.Fatalf("physswitch: %s up: %v\n%s", port, err, out)
	}
	s.vsctl(t, append([]string{"add-port", Bridge, port, "--", "set", "Port", port}, settings...)...)
}

// Learned is where the switch learned mac: the port's name and the VLAN
// (ok false when it has not).
func (s *Switch) Learned(t testing.TB, mac string) (entries []string) {
	t.Helper()
	names := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(s.vsctl(t, "--bare", "--columns=ofport,name", "list", "Interface")), "\n\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			names[f[0]] = f[1]
		}
	}
	out, err := exec.Command("ovs-appctl", "--target="+filepath.Join(s.dir, "ovs-vswitchd.ctl"), "fdb/show", Bridge).CombinedOutput()
	if err != nil {
		t.Fatalf("physswitch: fdb/show: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+([0-9a-f:]{17})\s`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := row.FindStringSubmatch(l); m != nil && m[3] == strings.ToLower(mac) {
			entries = append(entries, fmt.Sprintf("%s vlan %s", names[m[1]], m[2]))
		}
	}
	return entries
}

// Log is the tail of the switch's ovs-vswitchd log.
func (s *Switch) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "ovs-vswitchd.log"))
	return proc.LastLines(string(b), 20)
}

// FDB is the switch's whole MAC table as ovs-appctl prints it.
func (s *Switch) FDB() string {
	out, _ := exec.Command("ovs-appctl", "--target="+filepath.Join(s.dir, "ovs-vswitchd.ctl"), "fdb/show", Bridge).CombinedOutput()
	return string(out)
}
