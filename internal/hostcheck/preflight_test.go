package hostcheck_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/capability"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// hostFake is a host made of fixed facts (the preflight ones).
type hostFake struct {
	genl      map[string]bool
	genlErr   error
	loadErr   error
	loadAdds  string // family that appears once LoadModule succeeds
	loads     []string
	linkKinds map[string]bool
	caps      hostcheck.ProcCaps
	capsErr   error
	bins      map[string]string // name -> path
	fcaps     map[string]*hostcheck.FileCaps
	paths     map[string]hostcheck.PathInfo
	links     []hostcheck.Link
	defaults  []string
	files     map[string]string
}

func (f *hostFake) GenlFamily(n string) (bool, error) { return f.genl[n], f.genlErr }
func (f *hostFake) LoadModule(n string) error {
	f.loads = append(f.loads, n)
	if f.loadErr == nil && f.loadAdds != "" {
		f.genl[f.loadAdds] = true
	}
	return f.loadErr
}
func (f *hostFake) LinkKind(k string) (bool, error)                { return f.linkKinds[k], nil }
func (f *hostFake) ProcessCaps() (hostcheck.ProcCaps, error)       { return f.caps, f.capsErr }
func (f *hostFake) FileCaps(p string) (*hostcheck.FileCaps, error) { return f.fcaps[p], nil }
func (f *hostFake) LookPath(n string, _ []string) (string, error) {
	if p, ok := f.bins[n]; ok {
		return p, nil
	}
	return "", errors.New("not found")
}
func (f *hostFake) Path(p string) hostcheck.PathInfo {
	if pi, ok := f.paths[p]; ok {
		return pi
	}
	return hostcheck.PathInfo{}
}
func (f *hostFake) Links() ([]hostcheck.Link, error)      { return f.links, nil }
func (f *hostFake) DefaultRouteIfaces() ([]string, error) { return f.defaults, nil }
func (f *hostFake) ReadFile(p string) ([]byte, error) {
	if s, ok := f.files[p]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

func allCaps() uint64 { return 1<<41 - 1 }

// defaultConfig is what the settings table makes of env for the checks.
func defaultConfig(t *testing.T, env ...string) nodeconfig.HostSettings {
	t.Helper()
	cfg, err := config.Load(nil, append([]string{"NODE_NAME=node1"}, env...), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.HostSettings()
}

func healthyFake() *hostFake {
	dirWritable := hostcheck.PathInfo{Exists: true, IsDir: true}
	return &hostFake{
		genl:      map[string]bool{"ovs_datapath": true},
		linkKinds: map[string]bool{"geneve": true, "vxlan": true},
		caps:      hostcheck.ProcCaps{Effective: allCaps(), Permitted: allCaps(), Bounding: allCaps()},
		bins: map[string]string{"ovsdb-tool": "/usr/bin/ovsdb-tool", "ovsdb-server": "/usr/sbin/ovsdb-server", "ovs-vswitchd": "/usr/sbin/ovs-vswitchd",
			"ovn-controller": "/usr/bin/ovn-controller", "ovn-northd": "/usr/bin/ovn-northd"},
		paths: map[string]hostcheck.PathInfo{"/var/lib": dirWritable, "/run": dirWritable, "/var/log": dirWritable, "/opt": dirWritable, "/etc": dirWritable},
		links: []hostcheck.Link{
			{Name: "lo", Index: 1, MTU: 65536, Up: true, Loopback: true, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
			{Name: "ens33", Index: 2, MTU: 1500, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("fe80::1/64"), netip.MustParsePrefix("192.168.1.10/24")}},
			{Name: "ens34", Index: 3, MTU: 9000, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
		},
		defaults: []string{"ens33"},
		files: map[string]string{"/proc/sys/net/ipv6/conf/all/disable_ipv6": "0\n", "/proc/sys/net/ipv6/conf/default/disable_ipv6": "0\n",
			"/proc/sys/net/ipv6/conf/all/forwarding": "1\n", "/proc/sys/net/ipv6/conf/ens33/disable_ipv6": "0\n"},
	}
}

// An IPv6-only cluster (its Service CIDR) on a node whose tunnel interface
// has no IPv6 address: preflight fails, naming the interface and the fix,
// before anything is touched; a dual-stack cluster on the same node starts
// (its IPv4 tunnel carries the pods' IPv6).
func TestIPv6OnlyClusterNeedsANodeIPv6Address(t *testing.T) {
	r := hostcheck.PreflightWith(context.Background(), defaultConfig(t, "SVC_CIDR=fd00:10:96::/112"), healthyFake(), hostcheck.Options{})
	c := find(t, r.Checks, "ipv6")
	if !r.Failed() || c.Status != hostcheck.Fail || !strings.Contains(c.Found, "the cluster is IPv6-only (its Service CIDRs), but the tunnel interface ens33 has no global IPv6 address") || !strings.Contains(c.Fix, "give ens33 an IPv6 address") {
		t.Fatalf("IPv6-only cluster, no IPv6 on ens33: failed=%v %+v", r.Failed(), c)
	}
	r = hostcheck.PreflightWith(context.Background(), defaultConfig(t, "SVC_CIDR=10.96.0.0/12,fd00:10:96::/112"), healthyFake(), hostcheck.Options{})
	if c := find(t, r.Checks, "ipv6"); r.Failed() || c.Status != hostcheck.Pass {
		t.Fatalf("dual-stack cluster: failed=%v %+v", r.Failed(), c)
	}
}

func find(t *testing.T, cs []hostcheck.Check, name string) hostcheck.Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, cs)
	return hostcheck.Check{}
}

func TestHealthyHostPasses(t *testing.T) {
	r := hostcheck.PreflightWith(context.Background(), defaultConfig(t), healthyFake(), hostcheck.Options{})
	var buf bytes.Buffer
	r.Print(&buf)
	if r.Failed() || hostcheck.Worst(r.Checks) != hostcheck.Pass {
		t.Fatalf("healthy host did not pass:\n%s", buf.String())
	}
	if fd := r.Findings; !fd.KernelDatapath || fd.TunnelIface != "ens33" || fd.EncapIP != "192.168.1.10" || fd.UnderlayMTU != 1500 {
		t.Fatalf("got %+v", fd)
	}
}

func TestDatapath(t *testing.T) {
	cases := []struct {
		name       string
		env        []string
		present    bool
		loadErr    error
		loadAdds   bool
		opts       hostcheck.Options
		wantKernel bool
		wantStatus hostcheck.Status
		wantLoads  int
		wantFound  string
	}{
		{"present", nil, true, nil, false, hostcheck.Options{}, true, hostcheck.Pass, 0, "present"},
		{"auto, disabled modules, falls back", []string{"DISABLE_MODULES_MANAGEMENT=true"}, false, nil, false, hostcheck.Options{}, false, hostcheck.Warn, 0, "DISABLE_MODULES_MANAGEMENT=true"},
		{"kernel, disabled modules, fails", []string{"DISABLE_MODULES_MANAGEMENT=true", "OVNHOST_DATAPATH=kernel"}, false, nil, false, hostcheck.Options{}, false, hostcheck.Fail, 0, "datapath=kernel requires it"},
		{"netdev never probes", []string{"OVNHOST_DATAPATH=netdev"}, false, nil, false, hostcheck.Options{}, false, hostcheck.Pass, 0, "datapath=netdev"},
		{"auto loads module", nil, false, nil, true, hostcheck.Options{}, true, hostcheck.Pass, 1, "loaded module openvswitch"},
		{"auto load fails", nil, false, errors.New("modprobe: FATAL"), false, hostcheck.Options{}, false, hostcheck.Warn, 1, "modprobe: FATAL"},
		{"doctor never loads", nil, false, nil, true, hostcheck.Options{NoModuleLoad: true}, false, hostcheck.Warn, 0, "diagnostics only look"},
		{"kernel, load fails", []string{"OVNHOST_DATAPATH=kernel"}, false, errors.New("not found"), false, hostcheck.Options{}, false, hostcheck.Fail, 1, "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFake()
			f.genl["ovs_datapath"] = tc.present
			f.loadErr = tc.loadErr
			if tc.loadAdds {
				f.loadAdds = "ovs_datapath"
			}
			dp, cs := hostcheck.CheckDatapath(defaultConfig(t, tc.env...), f, tc.opts)
			if dp != tc.wantKernel || cs[0].Status != tc.wantStatus || len(f.loads) != tc.wantLoads || !strings.Contains(cs[0].Found, tc.wantFound) {
				t.Fatalf("got %t %+v loads=%v", dp, cs, f.loads)
			}
			if cs[0].Status != hostcheck.Pass && cs[0].Fix == "" {
				t.Fatal("no fix")
			}
		})
	}
}

func TestTunnelSupport(t *testing.T) {
	f := healthyFake()
	if c := hostcheck.CheckTunnelSupport(defaultConfig(t), nodeconfig.Userspace, f); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
	if c := hostcheck.CheckTunnelSupport(defaultConfig(t, "TUNNEL_TYPE=stt"), nodeconfig.Userspace, f); c.Status != hostcheck.Fail {
		t.Fatal(c)
	}
	f.linkKinds["geneve"] = false
	c := hostcheck.CheckTunnelSupport(defaultConfig(t), nodeconfig.Kernel, f)
	if c.Status != hostcheck.Fail || !strings.Contains(c.Fix, "vxlan") {
		t.Fatal(c)
	}
	if c := hostcheck.CheckTunnelSupport(defaultConfig(t, "TUNNEL_TYPE=vxlan"), nodeconfig.Kernel, f); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
}

func TestProcessCaps(t *testing.T) {
	cfg := defaultConfig(t)
	full := hostcheck.ProcCaps{Effective: allCaps(), Bounding: allCaps()}
	if c := hostcheck.CheckProcessCaps(cfg, full, nil); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
	noAdmin := full
	noAdmin.Effective &^= hostcheck.CapMask(capability.CAP_NET_ADMIN)
	c := hostcheck.CheckProcessCaps(cfg, noAdmin, nil)
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "effective set: CAP_NET_ADMIN") {
		t.Fatal(c)
	}
	noBoundNice := full
	noBoundNice.Bounding &^= hostcheck.CapMask(capability.CAP_SYS_NICE)
	c = hostcheck.CheckProcessCaps(cfg, noBoundNice, nil)
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "bounding set (children cannot get them): CAP_SYS_NICE") {
		t.Fatal(c)
	}
	noLock := full
	noLock.Effective &^= hostcheck.CapMask(capability.CAP_IPC_LOCK)
	if c := hostcheck.CheckProcessCaps(cfg, noLock, nil); c.Status != hostcheck.Pass {
		t.Fatal("IPC_LOCK required without mlockall", c)
	}
	cfg.MLockAll = true
	if c := hostcheck.CheckProcessCaps(cfg, noLock, nil); c.Status != hostcheck.Fail || !strings.Contains(c.Found, "CAP_IPC_LOCK") {
		t.Fatal(c)
	}
}

// The Talos case: a binary with CAP_SYS_MODULE in its file capabilities on
// a host whose bounding set lacks it.
func TestBinariesFileCapsOutsideBoundingSet(t *testing.T) {
	f := healthyFake()
	f.caps.Bounding &^= hostcheck.CapMask(capability.CAP_SYS_MODULE)
	f.bins["iptables"] = "/usr/sbin/xtables-nft-multi"
	f.fcaps = map[string]*hostcheck.FileCaps{
		"/usr/sbin/ovs-vswitchd":      {Revision: 2, Effective: true, Permitted: hostcheck.CapMask(capability.CAP_NET_ADMIN, capability.CAP_SYS_MODULE)},
		"/usr/sbin/xtables-nft-multi": {Revision: 2, Effective: true, Permitted: hostcheck.CapMask(capability.CAP_NET_ADMIN, capability.CAP_NET_RAW)},
	}
	cfg := defaultConfig(t)
	cs := hostcheck.CheckBinaries(cfg, hostcheck.Binaries(cfg), f.caps, nil, f)
	c := find(t, cs, "exec:ovs-vswitchd")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "CAP_SYS_MODULE") || !strings.Contains(c.Found, "/usr/sbin/ovs-vswitchd") ||
		!strings.Contains(c.Fix, "setcap 'cap_net_admin+ep' /usr/sbin/ovs-vswitchd") {
		t.Fatalf("%+v", c)
	}
	if c := find(t, cs, "exec:iptables"); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
	if c := find(t, cs, "exec:ovsdb-server"); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
	// A capability granted through the inheritable sets does not block.
	f.caps.Inheritable = hostcheck.CapMask(capability.CAP_SYS_MODULE)
	f.fcaps["/usr/sbin/ovs-vswitchd"].Inheritable = hostcheck.CapMask(capability.CAP_SYS_MODULE)
	if c := find(t, hostcheck.CheckBinaries(cfg, hostcheck.Binaries(cfg), f.caps, nil, f), "exec:ovs-vswitchd"); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
}

func TestBinariesMissing(t *testing.T) {
	f := healthyFake()
	delete(f.bins, "ovn-controller")
	cfg := defaultConfig(t)
	cs := hostcheck.CheckBinaries(cfg, hostcheck.Binaries(cfg), f.caps, nil, f)
	if c := find(t, cs, "exec:ovn-controller"); c.Status != hostcheck.Fail || !strings.Contains(c.Fix, "--bin-dirs") {
		t.Fatal(c)
	}
	for _, c := range cs {
		if c.Name == "exec:ipset" {
			t.Fatal("absent optional binary reported", c)
		}
	}
	remote := defaultConfig(t, "OVN_DB_IPS=10.0.0.1")
	for _, b := range hostcheck.Binaries(remote) {
		if b.Name == "ovn-northd" {
			t.Fatal("ovn-northd needed in remote mode")
		}
	}
}

func TestExplainExec(t *testing.T) {
	f := healthyFake()
	f.caps.Bounding &^= hostcheck.CapMask(capability.CAP_SYS_MODULE)
	f.fcaps = map[string]*hostcheck.FileCaps{"/usr/sbin/ovs-vswitchd": {Revision: 2, Effective: true, Permitted: hostcheck.CapMask(capability.CAP_NET_ADMIN, capability.CAP_SYS_MODULE)}}
	eperm := &fs.PathError{Op: "fork/exec", Path: "/usr/sbin/ovs-vswitchd", Err: syscall.EPERM}
	err := hostcheck.ExplainExecWith("/usr/sbin/ovs-vswitchd", eperm, f)
	var ee *hostcheck.ExecError
	if !errors.As(err, &ee) || !errors.Is(err, syscall.EPERM) {
		t.Fatalf("%T %v", err, err)
	}
	for _, want := range []string{"exec /usr/sbin/ovs-vswitchd", "CAP_SYS_MODULE", "setcap 'cap_net_admin+ep' "} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q lacks %q", err, want)
		}
	}
	// Relative names are looked up.
	if err := hostcheck.ExplainExecWith("ovs-vswitchd", eperm, f); !errors.As(err, &ee) {
		t.Fatal(err)
	}
	// Other errors, and EPERM the caps do not explain, pass through.
	other := &fs.PathError{Op: "fork/exec", Path: "x", Err: syscall.ENOENT}
	if err := hostcheck.ExplainExecWith("/usr/sbin/ovs-vswitchd", other, f); err != other {
		t.Fatal(err)
	}
	if err := hostcheck.ExplainExecWith("/usr/sbin/ovsdb-server", eperm, f); err != eperm {
		t.Fatal(err)
	}
	if hostcheck.ExplainExecWith("x", nil, f) != nil {
		t.Fatal("nil changed")
	}
}

func TestPaths(t *testing.T) {
	rw := hostcheck.PathInfo{Exists: true, IsDir: true}
	ro := hostcheck.PathInfo{Exists: true, IsDir: true, ReadOnly: true, Writable: syscall.EROFS}
	f := &hostFake{paths: map[string]hostcheck.PathInfo{
		"/var/lib/openvswitch": rw,
		"/etc":                 ro,
		"/run":                 rw,
		"/var/log":             rw,
		"/file":                {Exists: true},
		"/nowrite":             {Exists: true, IsDir: true, Writable: syscall.EACCES},
		"/ro":                  ro,
	}}
	ps := []nodeconfig.WritableDir{
		{Setting: "ovs-db-dir", Env: "OPENVSWITCH_DIR", Path: "/var/lib/openvswitch", Suggest: "/var/lib/openvswitch"},
		{Setting: "ovn-db-dir", Env: "OVN_DIR", Path: "/etc/origin/ovn", Suggest: "/var/lib/ovn"},
		{Setting: "ovs-run-dir", Env: "OVS_RUNDIR", Path: "/run/openvswitch", Suggest: "/run/openvswitch"},
		{Setting: "ovn-log-dir", Env: "OVN_LOGDIR", Path: "/file/x", Suggest: "/var/log/ovn"},
		{Setting: "ovs-log-dir", Env: "OVS_LOGDIR", Path: "/nowrite", Suggest: "/var/log/openvswitch"},
		{Setting: "ovn-run-dir", Env: "OVN_RUNDIR", Path: "/ro", Suggest: "/run/ovn"},
	}
	cs := hostcheck.CheckPaths(ps, f)
	want := []hostcheck.Status{hostcheck.Pass, hostcheck.Fail, hostcheck.Pass, hostcheck.Fail, hostcheck.Fail, hostcheck.Fail}
	for i, c := range cs {
		if c.Status != want[i] {
			t.Errorf("%s: got %s: %+v", ps[i].Path, c.Status, c)
		}
	}
	// The Talos case names the setting that relocates the path.
	c := cs[1]
	if !strings.Contains(c.Found, "/etc is on a read-only filesystem") || !strings.Contains(c.Fix, "--ovn-db-dir (OVN_DIR) to /var/lib/ovn") {
		t.Fatalf("%+v", c)
	}
	if !strings.Contains(cs[5].Found, "read-only") || !strings.Contains(cs[5].Fix, "OVN_RUNDIR") {
		t.Fatalf("%+v", cs[5])
	}
}

func TestInterfaces(t *testing.T) {
	cases := []struct {
		iface      string
		encap      string
		wantIface  string
		wantEncap  string
		wantStatus hostcheck.Status
	}{
		{"", "", "ens33", "192.168.1.10", hostcheck.Pass},
		{"ens34", "", "ens34", "10.0.0.5", hostcheck.Pass},
		{"eth0,ens3[0-9]", "", "ens33", "192.168.1.10", hostcheck.Pass},
		{"ens3.*", "", "ens33", "192.168.1.10", hostcheck.Pass}, // lowest index of the matches
		{"eth9,ens34", "", "ens34", "10.0.0.5", hostcheck.Pass},
		{"", "10.0.0.5", "ens33", "10.0.0.5", hostcheck.Pass},
		{"", "172.16.0.1", "ens33", "172.16.0.1", hostcheck.Warn},
	}
	for _, tc := range cases {
		env := []string{"IFACE=" + tc.iface}
		if tc.encap != "" {
			env = append(env, "ENCAP_IP="+tc.encap)
		}
		iface, encap, cs := hostcheck.CheckInterfaces(defaultConfig(t, env...), healthyFake())
		if iface != tc.wantIface || encap != tc.wantEncap || hostcheck.Worst(cs) != tc.wantStatus {
			t.Errorf("IFACE=%q ENCAP_IP=%q: got %s %s %+v", tc.iface, tc.encap, iface, encap, cs)
		}
	}
}

// The ens33-versus-eth0 case: a name that matches nothing fails and lists
// what exists.
func TestInterfaceMissingListsReal(t *testing.T) {
	iface, encap, cs := hostcheck.CheckInterfaces(defaultConfig(t, "IFACE=eth0"), healthyFake())
	c := find(t, cs, "tunnel-interface")
	if iface != "" || encap != "127.0.0.1" || c.Status != hostcheck.Fail {
		t.Fatalf("%s %s %+v", iface, encap, cs)
	}
	for _, want := range []string{"IFACE=eth0 matches no interface", "ens33 (fe80::1/64, 192.168.1.10/24)", "ens34 (10.0.0.5/24)"} {
		if !strings.Contains(c.Found, want) {
			t.Errorf("%q lacks %q", c.Found, want)
		}
	}
	if strings.Contains(c.Found, "lo ") {
		t.Errorf("loopback listed: %s", c.Found)
	}
}

func TestNoDefaultRoute(t *testing.T) {
	f := healthyFake()
	f.defaults = nil
	iface, encap, cs := hostcheck.CheckInterfaces(defaultConfig(t), f)
	if iface != "" || encap != "127.0.0.1" || hostcheck.Worst(cs) != hostcheck.Warn {
		t.Fatalf("%s %s %+v", iface, encap, cs)
	}
}

func TestMTU(t *testing.T) {
	f := healthyFake()
	f.links[1].MTU = 1300
	_, _, cs := hostcheck.CheckInterfaces(defaultConfig(t), f)
	if c := find(t, cs, "mtu"); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "leaves 1200") || !strings.Contains(c.Fix, "1380") {
		t.Fatal(c)
	}
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t, "TUNNEL_TYPE=vxlan"), f)
	if c := find(t, cs, "mtu"); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "leaves 1250") {
		t.Fatal(c)
	}
	f.links[1].MTU = 600
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t), f)
	if c := find(t, cs, "mtu"); c.Status != hostcheck.Fail {
		t.Fatal(c)
	}
}

func TestInterfaceNoAddress(t *testing.T) {
	f := healthyFake()
	f.links[2].Addrs = nil
	_, encap, cs := hostcheck.CheckInterfaces(defaultConfig(t, "IFACE=ens34"), f)
	if c := find(t, cs, "encap-ip"); c.Status != hostcheck.Fail || encap != "127.0.0.1" {
		t.Fatal(c)
	}
	// After a start the address lives on br-phy's internal port.
	f.links = append(f.links, hostcheck.Link{Name: "br-phy", Index: 9, MTU: 9000, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}})
	_, encap, cs = hostcheck.CheckInterfaces(defaultConfig(t, "IFACE=ens34"), f)
	if c := find(t, cs, "encap-ip"); c.Status != hostcheck.Pass || encap != "10.0.0.5" || !strings.Contains(c.Found, "br-phy") {
		t.Fatal(c)
	}
}

func TestSystemID(t *testing.T) {
	cfg := defaultConfig(t)
	f := &hostFake{files: map[string]string{}}
	if c := hostcheck.CheckSystemID(cfg, f); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "generated") {
		t.Fatal(c)
	}
	f.files[layout.New(cfg.Paths).SystemIDFile] = "  \n"
	if c := hostcheck.CheckSystemID(cfg, f); c.Status != hostcheck.Fail {
		t.Fatal(c)
	}
	f.files[layout.New(cfg.Paths).SystemIDFile] = "6c1c5a5e-0d3a-4cf3-9b33-07c0d2f1a1aa\n"
	if c := hostcheck.CheckSystemID(cfg, f); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "6c1c5a5e-") {
		t.Fatal(c)
	}
}

func TestPrintShowsEveryFailure(t *testing.T) {
	f := healthyFake()
	f.genl["ovs_datapath"] = false
	f.loadErr = errors.New("no module")
	delete(f.bins, "ovs-vswitchd")
	f.paths["/run"] = hostcheck.PathInfo{Exists: true, IsDir: true, ReadOnly: true}
	cfg := defaultConfig(t, "OVNHOST_DATAPATH=kernel", "IFACE=eth0")
	r := hostcheck.PreflightWith(context.Background(), cfg, f, hostcheck.Options{})
	if !r.Failed() {
		t.Fatal("not failed")
	}
	var buf bytes.Buffer
	r.Print(&buf)
	out := buf.String()
	for _, c := range r.Checks {
		if c.Name == "tunnel-support" {
			t.Errorf("tunnel support probed without a kernel datapath: %+v", c)
		}
	}
	for _, want := range []string{"FAIL  datapath", "FAIL  exec:ovs-vswitchd", "FAIL  path:ovs-run-dir", "FAIL  path:ovn-run-dir", "FAIL  tunnel-interface", "fix: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFileCapsRoundTrip(t *testing.T) {
	perm := hostcheck.CapMask(capability.CAP_NET_ADMIN, capability.CAP_SYS_MODULE, capability.CAP_BPF)
	fc, err := hostcheck.ParseFileCaps(hostcheck.EncodeFileCaps(perm, 0, true))
	if err != nil || fc.Revision != 2 || fc.Permitted != perm || !fc.Effective || fc.Inheritable != 0 {
		t.Fatalf("%+v %v", fc, err)
	}
	if got := fc.String(); got != "cap_net_admin,cap_sys_module,cap_bpf+ep" {
		t.Fatal(got)
	}
	// Revision 3 carries a root uid.
	v3 := append(hostcheck.EncodeFileCaps(perm, 0, false), 0xe8, 0x03, 0, 0)
	v3[3] = 0x03
	fc, err = hostcheck.ParseFileCaps(v3)
	if err != nil || fc.Revision != 3 || fc.RootID != 1000 || fc.Effective {
		t.Fatalf("%+v %v", fc, err)
	}
	// Revision 1: one 32-bit word pair.
	v1 := []byte{0, 0, 0, 1, 0, 0x10, 0, 0, 0, 0, 0, 0}
	fc, err = hostcheck.ParseFileCaps(v1)
	if err != nil || fc.Revision != 1 || fc.Permitted != hostcheck.CapMask(capability.CAP_NET_ADMIN) {
		t.Fatalf("%+v %v", fc, err)
	}
	for _, bad := range [][]byte{nil, {1, 2}, {0, 0, 0, 2, 0}, {0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := hostcheck.ParseFileCaps(bad); err == nil {
			t.Errorf("%v parsed", bad)
		}
	}
}

func TestSSLFiles(t *testing.T) {
	if cs := hostcheck.CheckSSL(defaultConfig(t), &hostFake{}); cs != nil {
		t.Fatal(cs)
	}
	cfg := defaultConfig(t, "ENABLE_SSL=true", "OVN_DB_IPS=192.0.2.1") // all-in-one ignores ENABLE_SSL
	f := &hostFake{files: map[string]string{cfg.SSLKey: "-----BEGIN PRIVATE KEY-----\n", cfg.SSLCert: "garbage"}}
	cs := hostcheck.CheckSSL(cfg, f)
	if len(cs) != 3 || cs[0].Status != hostcheck.Pass || cs[1].Status != hostcheck.Fail || cs[2].Status != hostcheck.Fail || !strings.Contains(cs[2].Found, "cacert.pem") {
		t.Fatalf("%+v", cs)
	}
}

// Talos: no CAP_SYS_MODULE, module management left on: modprobe is not
// tried and the message says what to set.
func TestDatapathWithoutSysModule(t *testing.T) {
	f := healthyFake()
	f.genl["ovs_datapath"] = false
	f.caps.Effective &^= hostcheck.CapMask(capability.CAP_SYS_MODULE)
	dp, cs := hostcheck.CheckDatapath(defaultConfig(t), f, hostcheck.Options{})
	if dp || len(f.loads) != 0 || !strings.Contains(cs[0].Found, "lacks CAP_SYS_MODULE") {
		t.Fatalf("%t %+v %v", dp, cs, f.loads)
	}
}

// A provider network's NIC is matched exactly; a missing one warns (the
// node runs without that network), naming a near match or what exists.
func TestProviderNetworkNIC(t *testing.T) {
	f := healthyFake()
	_, _, cs := hostcheck.CheckInterfaces(defaultConfig(t, "OVNHOST_PROVIDER_NETWORKS=physnet1:ens34"), f)
	if c := find(t, cs, "provider-network physnet1"); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "ens34, bridged into br-physnet1") {
		t.Fatal(c)
	}
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t, "OVNHOST_PROVIDER_NETWORKS=physnet1:ENS34"), f)
	if c := find(t, cs, "provider-network physnet1"); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "ENS34 not found; ens34 exists") {
		t.Fatal(c)
	}
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t, "OVNHOST_PROVIDER_NETWORKS=physnet1:eth1"), f)
	if c := find(t, cs, "provider-network physnet1"); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "eth1 not found; this host has ens33, ens34") || !strings.Contains(c.Fix, "--provider-networks") {
		t.Fatal(c)
	}
	// The default-route interface as a provider NIC: fine alone (its
	// address moves to br-physnet1 and stays the encap IP), refused with
	// --userspace-tunnel, which wants the same NIC in br-phy.
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t, "OVNHOST_PROVIDER_NETWORKS=physnet1:ens33"), f)
	if hostcheck.Worst(cs) != hostcheck.Pass {
		t.Fatalf("%+v", cs)
	}
	_, _, cs = hostcheck.CheckInterfaces(defaultConfig(t, "OVNHOST_PROVIDER_NETWORKS=physnet1:ens33", "OVNHOST_USERSPACE_TUNNEL=true"), f)
	if hostcheck.Worst(cs) != hostcheck.Fail || !strings.Contains(fmt.Sprint(cs), "set IFACE to another NIC") {
		t.Fatalf("%+v", cs)
	}
	// After a start the tunnel NIC's address lives on br-physnet1.
	f.links[2].Addrs = nil
	f.links = append(f.links, hostcheck.Link{Name: "br-physnet1", Index: 9, MTU: 1500, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}})
	_, encap, cs := hostcheck.CheckInterfaces(defaultConfig(t, "IFACE=ens34", "OVNHOST_PROVIDER_NETWORKS=physnet1:ens34"), f)
	if c := find(t, cs, "encap-ip"); c.Status != hostcheck.Pass || encap != "10.0.0.5" || !strings.Contains(c.Found, "br-physnet1") {
		t.Fatal(c)
	}
}
