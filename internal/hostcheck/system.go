package hostcheck

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnversion"
)

// Host checks the seeds ask for beyond the daemons: kernel and OVS module
// against Geneve, SELinux, socket ownership under RPM builds'
// openvswitch:hugetlbfs, free disk under the databases, recent OOM kills,
// and OVN version skew between the central's northd and this node's
// ovn-controller. Each is pure logic over what Facts read, tested with
// fixtures.

// KernelVersion is "major.minor" of a kernel release ("3.10.0-1160.el7.x86_64" -> 3, 10).
func KernelVersion(release string) (major, minor int, ok bool) {
	m := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(strings.TrimSpace(release))
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

// CheckKernelGeneve judges the kernel datapath's Geneve support. OVN's
// tunnels are Geneve with option TLVs (the logical ports ride in them):
// the in-tree openvswitch module has Geneve from Linux 3.18, and flow-based
// tunnels through a geneve device in metadata mode from 4.3. RHEL/CentOS 7
// (3.10) has them only as Red Hat backports, which ship a geneve module;
// an out-of-tree OVS module says its version in /sys/module/openvswitch/version.
// userspace: the netdev datapath encapsulates itself and needs none of it.
func CheckKernelGeneve(release, ovsModVersion string, ovsModLoaded, geneveMod, userspace bool, tunnel string) Check {
	const name = "kernel-geneve"
	if tunnel != "" && tunnel != "geneve" {
		return Check{Name: name, Status: Pass, Found: "tunnel type is " + tunnel + ", not geneve"}
	}
	mod := "in-tree openvswitch module"
	if ovsModVersion != "" {
		mod = "openvswitch module " + ovsModVersion
	}
	if !ovsModLoaded {
		mod = "openvswitch module not loaded"
	}
	found := fmt.Sprintf("kernel %s, %s", strings.TrimSpace(release), mod)
	if userspace {
		return Check{Name: name, Status: Pass, Found: found + "; userspace datapath: Geneve is done by ovs-vswitchd, not the kernel"}
	}
	maj, min, ok := KernelVersion(release)
	switch {
	case !ok:
		return Check{Name: name, Status: Warn, Found: "cannot read the kernel release: " + found, Fix: "check uname -r"}
	case maj > 4 || (maj == 4 && min >= 3):
		return Check{Name: name, Status: Pass, Found: found + ": Geneve with options is in the kernel (4.3 or newer)"}
	case ovsModVersion != "":
		return Check{Name: name, Status: Pass, Found: found + ": the out-of-tree module carries its own Geneve"}
	case geneveMod || strings.Contains(release, ".el7"):
		return Check{Name: name, Status: Pass, Found: found + ": Red Hat's 3.10 backports Geneve (geneve module present)"}
	case maj == 3 && min >= 18:
		return Check{Name: name, Status: Warn, Found: found + ": Geneve is in the openvswitch module from 3.18, but flow-based geneve devices need 4.3; OVN's Geneve options may be refused",
			Fix: "upgrade the kernel to 4.3 or newer, install OVS's out-of-tree kernel module, or use --datapath=netdev"}
	}
	return Check{Name: name, Status: Fail, Found: found + ": this kernel has no Geneve for the openvswitch datapath (needs 3.18, better 4.3)",
		Fix: "upgrade the kernel (4.3 or newer), install OVS's out-of-tree kernel module, use TUNNEL_TYPE=vxlan, or --datapath=netdev"}
}

// Denial is one SELinux AVC denial in the audit log.
type Denial struct {
	Comm, Perms, SContext, TContext, Class string
}

var avcRe = regexp.MustCompile(`avc:\s+denied\s+\{([^}]*)\}.*?comm="([^"]*)".*?scontext=(\S+)\s+tcontext=(\S+)\s+tclass=(\S+)`)

// ParseAVC returns the denials of the given programs (comm names) in an
// audit log, unique by what would have to be allowed.
func ParseAVC(log string, comms ...string) []Denial {
	seen := map[string]bool{}
	var out []Denial
	for _, line := range strings.Split(log, "\n") {
		m := avcRe.FindStringSubmatch(line)
		if m == nil || (len(comms) > 0 && !contains(comms, m[2])) {
			continue
		}
		d := Denial{Perms: strings.TrimSpace(m[1]), Comm: m[2], SContext: m[3], TContext: m[4], Class: m[5]}
		k := d.Rule()
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	return out
}

// Rule is the policy line that allows d: "allow openvswitch_t var_t:sock_file { write };".
func (d Denial) Rule() string {
	return fmt.Sprintf("allow %s %s:%s { %s };", seType(d.SContext), seType(d.TContext), d.Class, d.Perms)
}

func seType(ctx string) string {
	f := strings.Split(ctx, ":")
	if len(f) >= 3 {
		return f[2]
	}
	return ctx
}

// daemonComms are the programs ovnhost runs.
var daemonComms = []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovnhost"}

// CheckSELinux reports enforcing SELinux with what it denied the daemons
// and what to allow. enforce is /sys/fs/selinux/enforce ("" = no SELinux).
func CheckSELinux(enforce, auditLog string, dirs []string) Check {
	const name = "selinux"
	switch strings.TrimSpace(enforce) {
	case "":
		return Check{Name: name, Status: Pass, Found: "SELinux is not enabled"}
	case "0":
		return Check{Name: name, Status: Pass, Found: "SELinux is permissive: it logs but denies nothing"}
	}
	label := fmt.Sprintf("semanage fcontext -a -t openvswitch_var_lib_t '%s(/.*)?' && restorecon -Rv %s (and openvswitch_var_run_t, openvswitch_log_t for the run and log dirs); in a container run privileged with seLinuxOptions type spc_t, as Kube-OVN's ovs-ovn does",
		strings.Join(dirs, "|"), strings.Join(dirs, " "))
	dn := ParseAVC(auditLog, daemonComms...)
	if len(dn) == 0 {
		return Check{Name: name, Status: Warn,
			Found: "SELinux is enforcing; no denial of the OVS/OVN daemons in the audit log",
			Fix:   "if a daemon fails with permission denied: ausearch -m AVC -c ovs-vswitchd; label ovnhost's state dirs: " + label}
	}
	var rules []string
	for _, d := range dn {
		rules = append(rules, d.Comm+": "+d.Rule())
	}
	sort.Strings(rules)
	return Check{Name: name, Status: Fail,
		Found: fmt.Sprintf("SELinux is enforcing and denied the daemons %d times: %s", len(rules), strings.Join(rules, "; ")),
		Fix:   "label the paths: " + label + "; or build a local module from the denials: ausearch -m AVC -ts recent | audit2allow -M ovnhost && semodule -i ovnhost.pp"}
}

// Account maps user and group names to ids (from /etc/passwd and /etc/group).
type Account struct{ users, groups map[string]int }

// ParseAccounts reads passwd and group files.
func ParseAccounts(passwd, group string) Account {
	a := Account{users: map[string]int{}, groups: map[string]int{}}
	for _, pair := range []struct {
		text string
		m    map[string]int
	}{{passwd, a.users}, {group, a.groups}} {
		for _, line := range strings.Split(pair.text, "\n") {
			f := strings.Split(line, ":")
			if len(f) >= 3 {
				if id, err := strconv.Atoi(f[2]); err == nil {
					pair.m[f[0]] = id
				}
			}
		}
	}
	return a
}

// OVSUserID is OVS_USER_ID of an RPM host's /etc/sysconfig/openvswitch
// ("openvswitch:hugetlbfs"); "" when unset or commented out.
func OVSUserID(sysconfig string) string {
	for _, line := range strings.Split(sysconfig, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "OVS_USER_ID="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// PathOwner is a path with its owner.
type PathOwner struct {
	Path     string
	UID, GID int
	Mode     uint32
}

// CheckSocketOwner: RPM builds run OVS as openvswitch:hugetlbfs
// (OVS_USER_ID); then the database dirs and db.sock must belong to that
// user and group, or ovsdb-server cannot open conf.db after a restart by
// the RPM's units and ovs-vswitchd/ovn-controller cannot reach db.sock.
func CheckSocketOwner(userID string, acct Account, paths []PathOwner, runOwner string) Check {
	const name = "ovs-owner"
	if userID == "" {
		return Check{Name: name, Status: Pass, Found: "OVS runs as root (no OVS_USER_ID)"}
	}
	user, group, _ := strings.Cut(userID, ":")
	uid, uok := acct.users[user]
	gid, gok := acct.groups[group]
	if group == "" {
		gok = true
		gid = -1
	}
	if !uok || !gok {
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("OVS_USER_ID=%s names a user or group this host does not have", userID),
			Fix: "create them (the openvswitch RPM does: useradd -r openvswitch; groupadd hugetlbfs) or unset OVS_USER_ID in /etc/sysconfig/openvswitch"}
	}
	var bad []string
	for _, p := range paths {
		if p.UID != uid || (gid >= 0 && p.GID != gid) {
			bad = append(bad, fmt.Sprintf("%s is %d:%d", p.Path, p.UID, p.GID))
		}
	}
	if len(bad) == 0 {
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("OVS runs as %s and owns %d paths it uses", userID, len(paths))}
	}
	fix := fmt.Sprintf("chown -R %s %s, and start ovnhost with --run-owner=%s so /run is recreated with that owner", userID, strings.Join(pathsOf(paths), " "), userID)
	if runOwner != "" && runOwner != userID {
		fix += fmt.Sprintf(" (it is %s now)", runOwner)
	}
	return Check{Name: name, Status: Fail,
		Found: fmt.Sprintf("OVS runs as %s (uid %d, gid %d, OVS_USER_ID in /etc/sysconfig/openvswitch) but %s: ovsdb-server cannot write its database or the daemons cannot reach db.sock", userID, uid, gid, strings.Join(bad, ", ")),
		Fix:   fix}
}

func pathsOf(ps []PathOwner) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Path)
	}
	return out
}

// DiskUse is the free space of one directory's filesystem.
type DiskUse struct {
	Dir          string
	Avail, Total uint64
}

// CheckDisk: ovsdb-server appends every transaction to its database and
// compacts it into a new file beside it, so a full filesystem stops OVS
// and OVN with "No space left on device". Below 5% or 100 MiB: fail;
// below 15% or 1 GiB: warn.
func CheckDisk(uses []DiskUse) Check {
	const name = "disk"
	const mib = 1 << 20
	status := Pass
	var found []string
	var fix []string
	for _, u := range uses {
		if u.Total == 0 {
			continue
		}
		pct := float64(u.Avail) * 100 / float64(u.Total)
		s := fmt.Sprintf("%s: %d MiB free (%.0f%%)", u.Dir, u.Avail/mib, pct)
		switch {
		case pct < 5 || u.Avail < 100*mib:
			status = Fail
			fix = append(fix, "free space on the filesystem of "+u.Dir)
		case pct < 15 || u.Avail < 1024*mib:
			if status == Pass {
				status = Warn
			}
			fix = append(fix, "free space on the filesystem of "+u.Dir+" before it fills")
		}
		found = append(found, s)
	}
	if len(found) == 0 {
		return Check{Name: name, Status: Warn, Found: "cannot read the free space of the database directories", Fix: "check df on them"}
	}
	c := Check{Name: name, Status: status, Found: strings.Join(found, "; ")}
	if status != Pass {
		c.Found += ": ovsdb-server stops with \"No space left on device\" when its database cannot grow or be compacted"
		c.Fix = strings.Join(uniq(fix), "; ") + " (old logs under the log dirs, container images)"
	}
	return c
}

// OOMKill is one kill by the kernel's OOM killer.
type OOMKill struct {
	Comm   string
	PID    int
	AtSecs float64 // seconds since boot
	Cgroup bool    // a memory cgroup's limit, not the whole machine
}

var (
	oomKilledRe = regexp.MustCompile(`(Memory cgroup out of memory|Out of memory).*?: Killed process (\d+) \(([^)]+)\)`)
	oomTaskRe   = regexp.MustCompile(`oom-kill:.*?oom_memcg=([^,]*).*?task=([^,]+),pid=(\d+)`)
)

// ParseKmsg finds OOM kills in /dev/kmsg records ("6,1234,5678901,-;text":
// priority, sequence, microseconds since boot, flags; then the message).
func ParseKmsg(records []string) []OOMKill {
	var out []OOMKill
	seen := map[int]bool{}
	for _, r := range records {
		head, msg, ok := strings.Cut(r, ";")
		if !ok {
			continue
		}
		f := strings.Split(head, ",")
		var at float64
		if len(f) >= 3 {
			us, _ := strconv.ParseFloat(f[2], 64)
			at = us / 1e6
		}
		if m := oomKilledRe.FindStringSubmatch(msg); m != nil {
			pid, _ := strconv.Atoi(m[2])
			if !seen[pid] {
				seen[pid] = true
				out = append(out, OOMKill{Comm: m[3], PID: pid, AtSecs: at, Cgroup: strings.HasPrefix(m[1], "Memory cgroup")})
			}
			continue
		}
		if m := oomTaskRe.FindStringSubmatch(msg); m != nil {
			pid, _ := strconv.Atoi(m[3])
			if !seen[pid] {
				seen[pid] = true
				out = append(out, OOMKill{Comm: m[2], PID: pid, AtSecs: at, Cgroup: m[1] != "" && m[1] != "/"})
			}
		}
	}
	return out
}

// MemoryEventsOOMKills is the oom_kill count of a cgroup v2 memory.events
// or a v1 memory.oom_control file.
func MemoryEventsOOMKills(text string) (int, bool) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.Atoi(f[1])
			return n, err == nil
		}
	}
	return 0, false
}

// CheckOOM reports OOM kills of the daemons within the last day (uptime
// and kill times in seconds since boot) and the kills counted by their
// memory cgroup.
func CheckOOM(kills []OOMKill, uptime float64, cgroupKills int, cgroup string, kmsgErr error) Check {
	const name = "oom-kills"
	var recent []string
	for _, k := range kills {
		if !contains(daemonComms, k.Comm) || (uptime > 0 && uptime-k.AtSecs > 86400) {
			continue
		}
		where := "the machine ran out of memory"
		if k.Cgroup {
			where = "its memory cgroup hit its limit"
		}
		ago := ""
		if uptime > 0 {
			ago = fmt.Sprintf(" %.0f min ago", (uptime-k.AtSecs)/60)
		}
		recent = append(recent, fmt.Sprintf("%s (pid %d) killed%s: %s", k.Comm, k.PID, ago, where))
	}
	fix := "raise the memory limit of ovnhost's unit or container (Kube-OVN's ovs-ovn: resources.limits.memory), or find what else uses the memory; ovnhost_child_resident_memory_bytes shows each daemon's memory"
	switch {
	case len(recent) > 0:
		return Check{Name: name, Status: Fail, Found: strings.Join(recent, "; "), Fix: fix}
	case cgroupKills > 0:
		return Check{Name: name, Status: Warn, Found: fmt.Sprintf("the memory cgroup %s counts %d OOM kills (not in the readable kernel log)", cgroup, cgroupKills), Fix: fix}
	case kmsgErr != nil:
		return Check{Name: name, Status: Warn, Found: "cannot read the kernel log: " + kmsgErr.Error() + "; no OOM kill counted by the daemons' memory cgroup", Fix: "run netctl doctor as root, or check dmesg for \"Killed process\""}
	}
	return Check{Name: name, Status: Pass, Found: "no OOM kill of the OVS/OVN daemons in the last day"}
}

// OVNVersion is "major.minor" of an OVN version or northd internal
// version ("23.03.1-20.27.0-70.6" -> 23, 3).
func OVNVersion(s string) (major, minor int, ok bool) { return ovnversion.Release(s) }

// ControllerVersion reads "ovn-controller 23.03.1" from the output of the
// control socket's version command (or ovn-controller --version).
func ControllerVersion(out string) string { return ovnversion.Controller(out) }

// CheckVersionSkew compares the central's ovn-northd (SB_Global
// options:northd_internal_version) with this node's ovn-controller
// (internal/ovnversion: OVN's upgrade order and rolling-upgrade span), and
// whether ovn-match-northd-version is set where ovnhost sets it (exactly
// where OVN supports no mixed operation).
func CheckVersionSkew(northdInternal, controller string, matchNorthd bool) Check {
	const name = "ovn-version-skew"
	skew := ovnversion.Compare(northdInternal, controller)
	_, _, nok := ovnversion.Release(northdInternal)
	switch {
	case !nok:
		return Check{Name: name, Status: Warn, Found: "the SB database has no options:northd_internal_version in SB_Global: ovn-northd has not run against it yet", Fix: "check ovn-northd on the OVN central"}
	case skew == ovnversion.Unknown:
		return Check{Name: name, Status: Warn, Found: "ovn-northd is " + northdInternal + "; this node's ovn-controller version is unknown (not running)", Fix: "start ovnhost, then run netctl doctor again"}
	}
	cy, cm, _ := ovnversion.Release(controller)
	nv, cv := ovnversion.ReleaseString(northdInternal), ovnversion.ReleaseString(controller)
	found := fmt.Sprintf("ovn-northd %s (internal %s), this node's ovn-controller %s", nv, northdInternal, controller)
	ly, lm := ovnversion.LTSBefore(cy, cm)
	rng := fmt.Sprintf("ovn-controller %s supports ovn-northd %d.%02d to %s", cv, ly, lm, cv)
	build := "rebuild the ovnhost bundle with OVN " + nv + "'s ovn-controller (docs/install.md) or run the ovs-ovn image of OVN " + nv
	hold := "; external_ids:ovn-match-northd-version=true: ovn-controller keeps its installed flows and handles no change until the versions match"
	nomatch := "; external_ids:ovn-match-northd-version is not true: ovn-controller applies what it may misread (ovnhost sets it when ovn-controller starts or northd's version changes)"
	switch skew {
	case ovnversion.Same:
		c := Check{Name: name, Status: Pass, Found: found + ": same release"}
		if matchNorthd {
			c.Found += "; external_ids:ovn-match-northd-version=true (no effect while the internal versions match)"
		}
		return c
	case ovnversion.ControllerOlder:
		c := Check{Name: name, Status: Fail,
			Found: found + ": ovn-controller is older than northd, against OVN's upgrade order (controllers first); it may reject or misapply logical flows northd writes; " + rng,
			Fix:   "upgrade this node's ovn-controller to " + nv + " or newer: " + build}
		if matchNorthd {
			c.Found += hold
		} else {
			c.Found += nomatch
		}
		return c
	case ovnversion.ControllerTooNew:
		c := Check{Name: name, Status: Fail,
			Found: found + ": northd is older than the LTS before the controller (" + fmt.Sprintf("%d.%02d", ly, lm) + "), beyond OVN's supported upgrade span; " + rng,
			Fix:   fmt.Sprintf("upgrade the OVN central to %d.%02d or newer, or run an ovn-controller no newer than the next LTS after %s", ly, lm, nv)}
		if matchNorthd {
			c.Found += hold
		} else {
			c.Found += nomatch
		}
		return c
	}
	c := Check{Name: name, Status: Pass, Found: found + ": controller newer than northd, within OVN's rolling-upgrade span; " + rng}
	if matchNorthd {
		c.Status = Fail
		c.Found += "; but external_ids:ovn-match-northd-version=true makes ovn-controller stop handling changes until the versions match"
		c.Fix = "upgrade the OVN central to " + cv + ", or remove ovn-match-northd-version"
	}
	return c
}

// hostChecks reads what the checks above judge, on the node as resolved.
func hostChecks(s nodeconfig.HostSettings, nc *nodeconfig.NodeConfig, f DoctorFacts) []Check {
	read := func(p string) string {
		b, err := f.ReadFile(p)
		if err != nil {
			return ""
		}
		return string(b)
	}
	exists := func(p string) bool { _, err := f.Stat(p); return err == nil }
	var out []Check

	out = append(out, CheckKernelGeneve(read("/proc/sys/kernel/osrelease"), strings.TrimSpace(read("/sys/module/openvswitch/version")),
		exists("/sys/module/openvswitch"), exists("/sys/module/geneve"), nc.Datapath.IsUserspace(), nc.TunnelType))

	// "ipv6" itself is preflight's (CheckIPv6Node).
	out = append(out, CheckIPv6Routing(ReadIPv6State(f.ReadFile, links(f), nc.TunnelIface, "ovn0"), ipv6Need(nc))...)

	lay := nc.Layout
	out = append(out, CheckUnderlayHost(f.UnderlayNICs(lay.UnderlayJournals))...)
	dirs := []string{lay.OVSDBDir, lay.OVSRunDir, lay.OVSLogDir}
	out = append(out, CheckSELinux(read("/sys/fs/selinux/enforce"), read("/var/log/audit/audit.log"), []string{lay.OVSDBDir, lay.OVNDBDir}))

	var owned []PathOwner
	for _, p := range append(dirs, lay.DBSock, lay.ConfDB) {
		if uid, gid, err := f.Owner(p); err == nil {
			owned = append(owned, PathOwner{Path: p, UID: uid, GID: gid})
		}
	}
	out = append(out, CheckSocketOwner(OVSUserID(read("/etc/sysconfig/openvswitch")), ParseAccounts(read("/etc/passwd"), read("/etc/group")), owned, s.RunOwner))

	var uses []DiskUse
	seen := map[string]bool{}
	for _, d := range []string{lay.OVSDBDir, lay.OVNDBDir} {
		if seen[d] {
			continue
		}
		seen[d] = true
		if avail, total, err := f.Statfs(d); err == nil {
			uses = append(uses, DiskUse{Dir: d, Avail: avail, Total: total})
		}
	}
	out = append(out, CheckDisk(uses))

	recs, kerr := f.KernelLog()
	uptime := 0.0
	if u := strings.Fields(read("/proc/uptime")); len(u) > 0 {
		uptime, _ = strconv.ParseFloat(u[0], 64)
	}
	cgKills, cg := 0, ""
	if pid, alive := f.Pidfile(lay.VSwitchdPid, "ovs-vswitchd"); alive {
		cgKills, cg = cgroupOOMKills(read(fmt.Sprintf("/proc/%d/cgroup", pid)), read)
	}
	out = append(out, CheckOOM(ParseKmsg(recs), uptime, cgKills, cg, kerr))
	return out
}

// cgroupOOMKills reads the oom_kill count of the memory cgroup named in a
// /proc/PID/cgroup file (v2 "0::/path", v1 "N:memory:/path").
func cgroupOOMKills(procCgroup string, read func(string) string) (int, string) {
	for _, line := range strings.Split(procCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var file string
		switch {
		case f[0] == "0" && f[1] == "":
			file = "/sys/fs/cgroup" + f[2] + "/memory.events"
		case contains(strings.Split(f[1], ","), "memory"):
			file = "/sys/fs/cgroup/memory" + f[2] + "/memory.oom_control"
		default:
			continue
		}
		if n, ok := MemoryEventsOOMKills(read(file)); ok {
			return n, f[2]
		}
	}
	return 0, ""
}

// ipv6Need is what nc asks of the host's IPv6.
func ipv6Need(nc *nodeconfig.NodeConfig) IPv6Need {
	n := servicesNeed(nc.ServiceCIDRs)
	n.Encap6 = nodeconfig.IsIPv6(nc.EncapIP)
	n.KernelTunnel = !nc.Datapath.IsUserspace() && nc.TunnelType != "stt"
	return n
}

// servicesNeed reads the cluster's families from its Service CIDRs.
func servicesNeed(cidrs []netip.Prefix) IPv6Need {
	var n IPv6Need
	for _, c := range cidrs {
		if c.Addr().Is4() {
			n.Services4 = true
		} else {
			n.Services6 = true
		}
	}
	return n
}

// links lists the host's interfaces (none when they cannot be read).
func links(f LinkFacts) []Link {
	l, _ := f.Links()
	return l
}
