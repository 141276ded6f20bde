package hostcheck

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckKernelGeneve(t *testing.T) {
	for _, tc := range []struct {
		release, modver   string
		loaded, gen, user bool
		tunnel            string
		status            Status
		found             string
	}{
		{"6.1.0-18-amd64", "", true, true, false, "geneve", Pass, "4.3 or newer"},
		{"3.10.0-1160.el7.x86_64", "", true, true, false, "geneve", Pass, "Red Hat's 3.10 backports"},
		{"3.10.0-1160.el7.x86_64", "2.17.7", true, false, false, "geneve", Pass, "out-of-tree module"},
		{"3.16.0-4-amd64", "", true, false, false, "geneve", Fail, "no Geneve"},
		{"3.19.0-25-generic", "", true, false, false, "geneve", Warn, "need 4.3"},
		{"3.16.0-4-amd64", "", false, false, true, "geneve", Pass, "userspace datapath"},
		{"3.16.0-4-amd64", "", true, false, false, "vxlan", Pass, "not geneve"},
	} {
		c := CheckKernelGeneve(tc.release, tc.modver, tc.loaded, tc.gen, tc.user, tc.tunnel)
		if c.Status != tc.status || !strings.Contains(c.Found, tc.found) || (c.Status != Pass && c.Fix == "") {
			t.Errorf("%s %s: %+v", tc.release, tc.modver, c)
		}
	}
}

// An audit.log of a CentOS 7 host where ovsdb-server may not create its
// socket in a directory ovnhost moved.
const auditLog = `type=AVC msg=audit(1700000000.123:456): avc:  denied  { create } for  pid=1234 comm="ovsdb-server" name="db.sock" scontext=system_u:system_r:openvswitch_t:s0 tcontext=system_u:object_r:var_t:s0 tclass=sock_file permissive=0
type=SYSCALL msg=audit(1700000000.123:456): arch=c000003e syscall=49 success=no exit=-13
type=AVC msg=audit(1700000001.000:457): avc:  denied  { create } for  pid=1234 comm="ovsdb-server" name="db.sock" scontext=system_u:system_r:openvswitch_t:s0 tcontext=system_u:object_r:var_t:s0 tclass=sock_file permissive=0
type=AVC msg=audit(1700000002.000:458): avc:  denied  { read } for  pid=99 comm="sshd" scontext=system_u:system_r:sshd_t:s0 tcontext=system_u:object_r:etc_t:s0 tclass=file permissive=0
`

func TestSELinux(t *testing.T) {
	d := ParseAVC(auditLog, daemonComms...)
	if len(d) != 1 || d[0].Rule() != "allow openvswitch_t var_t:sock_file { create };" {
		t.Fatalf("%+v", d)
	}
	if c := CheckSELinux("1\n", auditLog, []string{"/var/lib/ovs"}); c.Status != Fail || !strings.Contains(c.Found, "ovsdb-server: allow openvswitch_t var_t:sock_file { create };") || !strings.Contains(c.Fix, "semanage fcontext -a -t openvswitch_var_lib_t '/var/lib/ovs(/.*)?'") || !strings.Contains(c.Fix, "audit2allow") {
		t.Fatalf("%+v", c)
	}
	if c := CheckSELinux("1", "", []string{"/var/lib/ovs"}); c.Status != Warn || !strings.Contains(c.Fix, "spc_t") {
		t.Fatalf("%+v", c)
	}
	if c := CheckSELinux("0", auditLog, nil); c.Status != Pass || !strings.Contains(c.Found, "permissive") {
		t.Fatalf("%+v", c)
	}
	if c := CheckSELinux("", "", nil); c.Status != Pass {
		t.Fatalf("%+v", c)
	}
}

func TestSocketOwner(t *testing.T) {
	acct := ParseAccounts("root:x:0:0:root:/root:/bin/bash\nopenvswitch:x:996:994::/:/sbin/nologin\n", "root:x:0:\nhugetlbfs:x:994:openvswitch\n")
	sysconfig := "# Created by the openvswitch RPM\nOVS_USER_ID=\"openvswitch:hugetlbfs\"\n"
	uid := OVSUserID(sysconfig)
	if uid != "openvswitch:hugetlbfs" || OVSUserID("#OVS_USER_ID=\"openvswitch:hugetlbfs\"\n") != "" {
		t.Fatalf("OVSUserID = %q", uid)
	}
	good := []PathOwner{{Path: "/var/lib/openvswitch", UID: 996, GID: 994}, {Path: "/run/openvswitch/db.sock", UID: 996, GID: 994}}
	if c := CheckSocketOwner(uid, acct, good, ""); c.Status != Pass {
		t.Fatalf("%+v", c)
	}
	bad := []PathOwner{{Path: "/var/lib/openvswitch", UID: 996, GID: 994}, {Path: "/run/openvswitch", UID: 0, GID: 0}}
	c := CheckSocketOwner(uid, acct, bad, "")
	if c.Status != Fail || !strings.Contains(c.Found, "/run/openvswitch is 0:0") || !strings.Contains(c.Fix, "chown -R openvswitch:hugetlbfs") || !strings.Contains(c.Fix, "--run-owner=openvswitch:hugetlbfs") {
		t.Fatalf("%+v", c)
	}
	if c := CheckSocketOwner("ovs:nogroup", acct, good, ""); c.Status != Fail || !strings.Contains(c.Found, "does not have") {
		t.Fatalf("%+v", c)
	}
	if c := CheckSocketOwner("", acct, bad, ""); c.Status != Pass {
		t.Fatalf("%+v", c)
	}
}

func TestDisk(t *testing.T) {
	const gib = 1 << 30
	if c := CheckDisk([]DiskUse{{"/var/lib/openvswitch", 40 * gib, 100 * gib}}); c.Status != Pass {
		t.Fatalf("%+v", c)
	}
	if c := CheckDisk([]DiskUse{{"/var/lib/openvswitch", 40 * gib, 100 * gib}, {"/var/lib/ovn", 10 * gib, 100 * gib}}); c.Status != Warn || !strings.Contains(c.Fix, "/var/lib/ovn") {
		t.Fatalf("%+v", c)
	}
	if c := CheckDisk([]DiskUse{{"/var/lib/ovn", 50 << 20, 100 * gib}}); c.Status != Fail || !strings.Contains(c.Found, "No space left on device") {
		t.Fatalf("%+v", c)
	}
	if c := CheckDisk(nil); c.Status != Warn {
		t.Fatalf("%+v", c)
	}
}

func TestOOM(t *testing.T) {
	recs := []string{
		"6,1000,4000000000,-;ovs-vswitchd invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
		"6,1001,4000000100,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/system.slice/ovnhost.service,task_memcg=/system.slice/ovnhost.service,task=ovs-vswitchd,pid=4242,uid=0",
		"3,1002,4000000200,-;Memory cgroup out of memory: Killed process 4242 (ovs-vswitchd) total-vm:2000000kB, anon-rss:900000kB",
		"3,1003,100000000,-;Out of memory: Killed process 77 (ovn-controller) total-vm:1kB",
		"3,1004,4000000300,-;Out of memory: Killed process 88 (java) total-vm:1kB",
	}
	kills := ParseKmsg(recs)
	if len(kills) != 3 || kills[0].Comm != "ovs-vswitchd" || kills[0].PID != 4242 || !kills[0].Cgroup || kills[1].Cgroup {
		t.Fatalf("%+v", kills)
	}
	c := CheckOOM(kills, 4100, 0, "", nil)
	if c.Status != Fail || !strings.Contains(c.Found, "ovs-vswitchd (pid 4242) killed 2 min ago: its memory cgroup hit its limit") || strings.Contains(c.Found, "java") {
		t.Fatalf("%+v", c)
	}
	// ovn-controller's kill 100 s after boot is more than a day before uptime 100000.
	if c := CheckOOM(ParseKmsg(recs[3:4]), 100000, 0, "", nil); c.Status != Pass {
		t.Fatalf("%+v", c)
	}
	if n, ok := MemoryEventsOOMKills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n"); !ok || n != 2 {
		t.Fatal(n, ok)
	}
	if n, ok := MemoryEventsOOMKills("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"); !ok || n != 1 {
		t.Fatal(n, ok)
	}
	read := func(p string) string {
		if p == "/sys/fs/cgroup/system.slice/ovnhost.service/memory.events" {
			return "oom 1\noom_kill 1\n"
		}
		return ""
	}
	if n, cg := cgroupOOMKills("0::/system.slice/ovnhost.service\n", read); n != 1 || cg != "/system.slice/ovnhost.service" {
		t.Fatal(n, cg)
	}
	if c := CheckOOM(nil, 5000, 1, "/system.slice/ovnhost.service", nil); c.Status != Warn {
		t.Fatalf("%+v", c)
	}
	if c := CheckOOM(nil, 5000, 0, "", errors.New("permission denied")); c.Status != Warn {
		t.Fatalf("%+v", c)
	}
}

func TestVersionSkew(t *testing.T) {
	if v := ControllerVersion("ovn-controller 23.03.1\nOpen vSwitch Library 3.1.0\n"); v != "23.03.1" {
		t.Fatal(v)
	}
	if v := ControllerVersion("ovn-controller (Open vSwitch) 22.03.0\n"); v != "22.03.0" {
		t.Fatal(v)
	}
	for _, tc := range []struct {
		northd, controller string
		match              bool
		status             Status
		found, fix         string
	}{
		{"23.03.1-20.27.0-70.6", "23.03.1", false, Pass, "same release", ""},
		// Kube-OVN 1.15's central with the bundle's 23.03 controller.
		{"25.03.0-20.41.0-78.0", "23.03.1", false, Fail, "ovn-controller is older than northd", "upgrade this node's ovn-controller to 25.03"},
		{"22.03.3-20.21.0-59.1", "23.03.1", false, Pass, "supports ovn-northd 22.03 to 23.03", ""},
		{"22.03.3-20.21.0-59.1", "24.03.2", false, Pass, "within OVN's rolling-upgrade span", ""},
		{"22.03.3-20.21.0-59.1", "25.03.0", false, Fail, "beyond OVN's supported upgrade span", "upgrade the OVN central to 24.03"},
		{"22.03.3-20.21.0-59.1", "23.03.1", true, Fail, "ovn-match-northd-version=true", "remove ovn-match-northd-version"},
		{"25.03.0-20.41.0-78.0", "23.03.1", true, Fail, "keeps its installed flows", "upgrade this node's ovn-controller to 25.03"},
		{"25.03.0-20.41.0-78.0", "23.03.1", false, Fail, "ovn-match-northd-version is not true", "upgrade this node's ovn-controller to 25.03"},
		{"22.03.3-20.21.0-59.1", "25.03.0", true, Fail, "keeps its installed flows", "upgrade the OVN central to 24.03"},
		{"", "23.03.1", false, Warn, "no options:northd_internal_version", ""},
		{"23.03.1-20.27.0-70.6", "", false, Warn, "unknown", ""},
	} {
		c := CheckVersionSkew(tc.northd, tc.controller, tc.match)
		if c.Status != tc.status || !strings.Contains(c.Found, tc.found) || !strings.Contains(c.Fix, tc.fix) {
			t.Errorf("northd %s controller %s: %+v", tc.northd, tc.controller, c)
		}
	}
}
