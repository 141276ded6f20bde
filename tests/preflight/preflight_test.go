package preflight_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/capability"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func loadConfig(t *testing.T, env ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(nil, append([]string{"NODE_NAME=node1"}, env...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// settings are the host checks' view of env's settings.
func settings(t *testing.T, env ...string) nodeconfig.HostSettings {
	t.Helper()
	return loadConfig(t, env...).HostSettings()
}

func findCheck(t *testing.T, cs []hostcheck.Check, name string) hostcheck.Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, cs)
	return hostcheck.Check{}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// A copy of a binary given CAP_SYS_MODULE in its file capabilities, checked
// and exec'd by a child whose bounding set lacks CAP_SYS_MODULE (Talos):
// the check fails naming the binary and the capability, and the exec's
// EPERM is explained the same way.
func TestFileCapsOutsideBoundingSet(t *testing.T) {
	testenv.RequireRoot(t)
	dir := capsDir(t)
	copyFile(t, "/bin/true", filepath.Join(dir, "ovsdb-server"), 0o755)
	vswitchd := filepath.Join(dir, "ovs-vswitchd")
	copyFile(t, "/bin/true", vswitchd, 0o755)
	// What `setcap cap_net_admin,cap_sys_module+ep` writes.
	val := hostcheck.EncodeFileCaps(hostcheck.CapMask(capability.CAP_NET_ADMIN, capability.CAP_SYS_MODULE), 0, true)
	if err := unix.Setxattr(vswitchd, hostcheck.XattrCaps, val, 0); err != nil {
		t.Fatalf("setting file capabilities: %v", err)
	}
	// The collector reads back what was written.
	fc, err := hostcheck.NewHost().FileCaps(vswitchd)
	if err != nil || fc == nil || fc.String() != "cap_net_admin,cap_sys_module+ep" {
		t.Fatalf("FileCaps = %v, %v", fc, err)
	}
	if fc, err := hostcheck.NewHost().FileCaps(filepath.Join(dir, "ovsdb-server")); fc != nil || err != nil {
		t.Fatalf("no caps expected: %v %v", fc, err)
	}

	// With the full bounding set, the same binary runs.
	if err := execRun(vswitchd); err != nil {
		t.Fatalf("exec with the full bounding set: %v", err)
	}

	rep, err := runChild(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DropErr != "" || rep.BoundingHas {
		t.Fatalf("child could not drop CAP_SYS_MODULE: %+v", rep)
	}
	c := findCheck(t, rep.Checks, "exec:ovs-vswitchd")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, vswitchd) || !strings.Contains(c.Found, "CAP_SYS_MODULE") ||
		!strings.Contains(c.Fix, "setcap 'cap_net_admin+ep' "+vswitchd) {
		t.Errorf("check: %+v", c)
	}
	if c := findCheck(t, rep.Checks, "exec:ovsdb-server"); c.Status != hostcheck.Pass {
		t.Errorf("ovsdb-server: %+v", c)
	}
	if !rep.ExecEPERM {
		t.Fatalf("exec did not fail with EPERM: %q", rep.ExecErr)
	}
	if !rep.IsExecError || len(rep.Missing) != 1 || rep.Missing[0] != "CAP_SYS_MODULE" ||
		!strings.Contains(rep.Explained, vswitchd) || !strings.Contains(rep.Explained, "setcap") {
		t.Errorf("explained: %+v", rep)
	}
	t.Logf("explained: %s", rep.Explained)
}

func execRun(p string) error { return exec.Command(p).Run() }

// The Talos `mkdir /etc/origin: read-only file system` case: a read-only
// bind mount as the OVS state directory, and a directory to be created
// under it.
func TestReadOnlyStateDir(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(ro, ro, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(ro, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", ro, err)
		}
	})
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	if pi := hostcheck.NewHost().Path(ro); !pi.Exists || !pi.IsDir || !pi.ReadOnly || pi.Writable == nil {
		t.Fatalf("Path(%s) = %+v", ro, pi)
	}
	if pi := hostcheck.NewHost().Path(dir); !pi.Exists || pi.ReadOnly || pi.Writable != nil {
		t.Fatalf("Path(%s) = %+v", dir, pi)
	}
	cfg := loadConfig(t, "OPENVSWITCH_DIR="+ro, "OVN_DIR="+filepath.Join(ro, "origin", "ovn"), "OVS_LOGDIR="+filepath.Join(dir, "log"))
	r := hostcheck.PreflightWith(context.Background(), cfg.HostSettings(), hostcheck.NewHost(), hostcheck.Options{NoModuleLoad: true})
	var buf bytes.Buffer
	r.Print(&buf)
	if !r.Failed() {
		t.Fatalf("not failed:\n%s", buf.String())
	}
	c := findCheck(t, r.Checks, "path:ovs-db-dir")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, ro+" is on a read-only filesystem") || !strings.Contains(c.Fix, "OPENVSWITCH_DIR") {
		t.Errorf("%+v", c)
	}
	c = findCheck(t, r.Checks, "path:ovn-db-dir")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "cannot be created: "+ro+" is on a read-only filesystem") || !strings.Contains(c.Fix, "OVN_DIR") {
		t.Errorf("%+v", c)
	}
	if c := findCheck(t, r.Checks, "path:ovs-log-dir"); c.Status != hostcheck.Pass {
		t.Errorf("%+v", c)
	}
	// Nothing was created under the writable directory.
	if _, err := os.Stat(filepath.Join(dir, "log")); !os.IsNotExist(err) {
		t.Errorf("preflight created %s", filepath.Join(dir, "log"))
	}
}

// testNetns creates a network namespace with a veth "ens33" holding
// 192.168.50.2/24 and a default route through it; closed by t.Cleanup.
func testNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	ns := newNS(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A veth pair (these kernels have no dummy driver); both ends stay in ns.
	d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ens33", MTU: 1500}, PeerName: "peer0"}
	if err := h.LinkAdd(d); err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName("ens33")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("192.168.50.2/24")
	if err := h.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ens33", "peer0"} {
		if err := h.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: n}}); err != nil {
			t.Fatal(n, err)
		}
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("192.168.50.1")}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// IFACE naming an interface that does not exist (eth0 on an ens33 host)
// fails and lists the real interfaces with their addresses; without IFACE
// the default-route interface is chosen.
func TestIfaceInNetns(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testNetns(t)
	host := hostcheck.NetnsHost{NS: ns}

	iface, encap, cs := hostcheck.CheckInterfaces(settings(t, "IFACE=eth0"), host)
	c := findCheck(t, cs, "tunnel-interface")
	if iface != "" || c.Status != hostcheck.Fail || !strings.Contains(c.Found, "IFACE=eth0 matches no interface") ||
		!strings.Contains(c.Found, "ens33 (192.168.50.2/24") || encap != "127.0.0.1" {
		t.Errorf("IFACE=eth0: %q %q %+v", iface, encap, cs)
	}

	iface, encap, cs = hostcheck.CheckInterfaces(settings(t), host)
	if iface != "ens33" || encap != "192.168.50.2" || hostcheck.Worst(cs) != hostcheck.Pass {
		t.Errorf("default route: %q %q %+v", iface, encap, cs)
	}
	iface, _, _ = hostcheck.CheckInterfaces(settings(t, "IFACE=eth0,ens[0-9]+"), host)
	if iface != "ens33" {
		t.Errorf("regexp: %q", iface)
	}
}

// DISABLE_MODULES_MANAGEMENT=true on a kernel without the OVS datapath:
// auto selects netdev with a warning, kernel fails; modprobe is never run.
func TestNoKernelDatapathModulesDisabled(t *testing.T) {
	testenv.RequireRoot(t)
	h := hostcheck.NewHost()
	if ok, err := h.GenlFamily("nlctrl"); !ok || err != nil {
		t.Fatalf("generic netlink controller not found: %v %v", ok, err)
	}
	if ok, _ := h.GenlFamily(hostcheck.OVSDatapathFamily); ok {
		// make test runs on a host without it (its tests of the kernel
		// datapath boot VMs); a developer's machine may have it.
		if testenv.Strict() {
			t.Fatal("this kernel has the OVS datapath (generic netlink family ovs_datapath): the case needs a host without it, as the CI host is")
		}
		t.Skip("this kernel has the OVS datapath; the case needs a machine without it")
	}
	spy := &noLoad{Host: h}
	dp, cs := hostcheck.CheckDatapath(settings(t, "DISABLE_MODULES_MANAGEMENT=true"), spy, hostcheck.Options{})
	if dp || cs[0].Status != hostcheck.Warn || !strings.Contains(cs[0].Found, "DISABLE_MODULES_MANAGEMENT=true") {
		t.Errorf("auto: %t %+v", dp, cs)
	}
	dp, cs = hostcheck.CheckDatapath(settings(t, "DISABLE_MODULES_MANAGEMENT=true", "OVNHOST_DATAPATH=kernel"), spy, hostcheck.Options{})
	if cs[0].Status != hostcheck.Fail || cs[0].Fix == "" {
		t.Errorf("kernel: %t %+v", dp, cs)
	}
	if spy.loads != 0 {
		t.Errorf("LoadModule called %d times with module management disabled", spy.loads)
	}
	// The whole run agrees.
	r := hostcheck.Preflight(context.Background(), settings(t, "DISABLE_MODULES_MANAGEMENT=true"))
	if r.Findings.KernelDatapath {
		t.Errorf("Run: kernel datapath found: %+v", r.Findings)
	}
	r = hostcheck.Preflight(context.Background(), settings(t, "DISABLE_MODULES_MANAGEMENT=true", "OVNHOST_DATAPATH=kernel"))
	if !r.Failed() {
		t.Error("Run with datapath=kernel did not fail")
	}
}

type noLoad struct {
	hostcheck.Host
	loads int
}

func (n *noLoad) LoadModule(string) error { n.loads++; return nil }

// The tunnel probe leaves nothing behind: it runs in a throwaway namespace.
func TestLinkKindProbe(t *testing.T) {
	testenv.RequireRoot(t)
	before, _ := netlink.LinkList()
	for _, k := range []string{"geneve", "vxlan"} {
		ok, err := hostcheck.NewHost().LinkKind(k)
		t.Logf("%s: %v %v", k, ok, err)
		if err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	after, _ := netlink.LinkList()
	if len(after) != len(before) {
		t.Errorf("links changed: %d -> %d", len(before), len(after))
	}
}

// capsDir is a temporary directory on a filesystem that honours file
// capabilities: on a nosuid mount (often /tmp) the kernel ignores them and
// the exec would succeed.
func capsDir(t *testing.T) string {
	t.Helper()
	for _, base := range []string{os.TempDir(), "/var/tmp", testenv.RepoRoot()} {
		var st unix.Statfs_t
		if err := unix.Statfs(base, &st); err != nil || st.Flags&unix.ST_NOSUID != 0 {
			continue
		}
		dir, err := os.MkdirTemp(base, "pfcaps")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Fatal("no directory on a filesystem without nosuid for the file-capability test")
	return ""
}
