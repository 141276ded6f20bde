package packaging

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// systemd219 lists, per section, the directives that systemd 219 (CentOS and
// RHEL 7.9) parses, from its load-fragment table. Anything else is ignored
// there with a warning, so a unit that relies on a newer directive silently
// loses it on EL7. AmbientCapabilities and TasksMax are newer upstream but
// were backported into RHEL 7's systemd 219.
var systemd219 = map[string][]string{
	"Unit": {
		"Description", "Documentation", "SourcePath", "Requires", "RequiresOverridable", "Requisite",
		"RequisiteOverridable", "Wants", "BindsTo", "BindTo", "PartOf", "Conflicts", "Before", "After",
		"OnFailure", "PropagatesReloadTo", "PropagateReloadTo", "ReloadPropagatedFrom", "PropagateReloadFrom",
		"JoinsNamespaceOf", "RequiresMountsFor", "StopWhenUnneeded", "RefuseManualStart", "RefuseManualStop",
		"AllowIsolate", "DefaultDependencies", "OnFailureJobMode", "OnFailureIsolate", "IgnoreOnIsolate",
		"IgnoreOnSnapshot", "JobTimeoutSec", "JobTimeoutAction", "JobTimeoutRebootArgument",
		"ConditionPathExists", "ConditionPathExistsGlob", "ConditionPathIsDirectory", "ConditionPathIsSymbolicLink",
		"ConditionPathIsMountPoint", "ConditionPathIsReadWrite", "ConditionDirectoryNotEmpty", "ConditionFileNotEmpty",
		"ConditionFileIsExecutable", "ConditionNeedsUpdate", "ConditionFirstBoot", "ConditionKernelCommandLine",
		"ConditionArchitecture", "ConditionVirtualization", "ConditionSecurity", "ConditionCapability",
		"ConditionHost", "ConditionACPower", "ConditionNull",
		"AssertPathExists", "AssertPathExistsGlob", "AssertPathIsDirectory", "AssertPathIsSymbolicLink",
		"AssertPathIsMountPoint", "AssertPathIsReadWrite", "AssertDirectoryNotEmpty", "AssertFileNotEmpty",
		"AssertFileIsExecutable", "AssertNeedsUpdate", "AssertFirstBoot", "AssertKernelCommandLine",
		"AssertArchitecture", "AssertVirtualization", "AssertSecurity", "AssertCapability", "AssertHost",
		"AssertACPower", "AssertNull",
	},
	"Service": {
		// service
		"PIDFile", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost",
		"RestartSec", "TimeoutSec", "TimeoutStartSec", "TimeoutStopSec", "WatchdogSec", "StartLimitInterval",
		"StartLimitBurst", "StartLimitAction", "FailureAction", "RebootArgument", "Type", "Restart",
		"PermissionsStartOnly", "RootDirectoryStartOnly", "RemainAfterExit", "GuessMainPID",
		"RestartPreventExitStatus", "RestartForceExitStatus", "SuccessExitStatus", "SysVStartPriority",
		"NonBlocking", "BusName", "BusPolicy", "NotifyAccess", "Sockets",
		// execution context
		"WorkingDirectory", "RootDirectory", "User", "Group", "SupplementaryGroups", "Nice", "OOMScoreAdjust",
		"IOSchedulingClass", "IOSchedulingPriority", "CPUSchedulingPolicy", "CPUSchedulingPriority",
		"CPUSchedulingResetOnFork", "CPUAffinity", "UMask", "Environment", "EnvironmentFile", "StandardInput",
		"StandardOutput", "StandardError", "TTYPath", "TTYReset", "TTYVHangup", "TTYVTDisallocate",
		"SyslogIdentifier", "SyslogFacility", "SyslogLevel", "SyslogLevelPrefix", "Capabilities", "SecureBits",
		"CapabilityBoundingSet", "TimerSlackNSec", "NoNewPrivileges", "SystemCallFilter",
		"SystemCallArchitectures", "SystemCallErrorNumber", "RestrictAddressFamilies", "Personality",
		"LimitCPU", "LimitFSIZE", "LimitDATA", "LimitSTACK", "LimitCORE", "LimitRSS", "LimitNOFILE", "LimitAS",
		"LimitNPROC", "LimitMEMLOCK", "LimitLOCKS", "LimitSIGPENDING", "LimitMSGQUEUE", "LimitNICE",
		"LimitRTPRIO", "LimitRTTIME", "ReadWriteDirectories", "ReadOnlyDirectories", "InaccessibleDirectories",
		"PrivateTmp", "PrivateDevices", "PrivateNetwork", "ProtectSystem", "ProtectHome", "MountFlags",
		"TCPWrapName", "PAMName", "IgnoreSIGPIPE", "UtmpIdentifier", "SELinuxContext", "AppArmorProfile",
		"SmackProcessLabel", "RuntimeDirectory", "RuntimeDirectoryMode",
		// kill context
		"KillMode", "KillSignal", "SendSIGKILL", "SendSIGHUP",
		// cgroup context
		"Slice", "CPUAccounting", "CPUShares", "StartupCPUShares", "CPUQuota", "MemoryAccounting", "MemoryLimit",
		"DeviceAllow", "DevicePolicy", "BlockIOAccounting", "BlockIOWeight", "StartupBlockIOWeight",
		"BlockIODeviceWeight", "BlockIOReadBandwidth", "BlockIOWriteBandwidth", "Delegate",
		// backported into RHEL/CentOS 7's systemd 219
		"AmbientCapabilities", "TasksMax",
	},
	"Install": {"Alias", "WantedBy", "RequiredBy", "Also", "DefaultInstance"},
}

// values219 restricts the values of directives whose accepted values grew
// after 219 (Type=exec, NotifyAccess=exec, ProtectSystem=strict, ...).
var values219 = map[string][]string{
	"Type":          {"simple", "forking", "oneshot", "dbus", "notify", "idle"},
	"NotifyAccess":  {"none", "main", "all"},
	"Restart":       {"no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always"},
	"KillMode":      {"control-group", "process", "mixed", "none"},
	"ProtectSystem": {"yes", "no", "true", "false", "full"},
	"ProtectHome":   {"yes", "no", "true", "false", "read-only"},
}

type unitLine struct {
	section, key, value string
	line                int
}

func parseUnit(content string) ([]unitLine, error) {
	var out []unitLine
	section := ""
	sc := bufio.NewScanner(strings.NewReader(content))
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			section = l[1 : len(l)-1]
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: not key=value: %q", n, l)
		}
		out = append(out, unitLine{section, strings.TrimSpace(k), strings.TrimSpace(v), n})
	}
	return out, nil
}

// check219 returns every directive or value of the unit that systemd 219
// does not know.
func check219(content string) []string {
	lines, err := parseUnit(content)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for _, l := range lines {
		known, ok := systemd219[l.section]
		if !ok {
			bad = append(bad, fmt.Sprintf("line %d: section [%s] is not a service unit section of systemd 219", l.line, l.section))
			continue
		}
		found := false
		for _, k := range known {
			if k == l.key {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, fmt.Sprintf("line %d: [%s] %s= is unknown to systemd 219", l.line, l.section, l.key))
			continue
		}
		if vals, ok := values219[l.key]; ok {
			good := false
			for _, v := range vals {
				if v == l.value {
					good = true
				}
			}
			if !good {
				bad = append(bad, fmt.Sprintf("line %d: %s=%s: systemd 219 accepts only %s", l.line, l.key, l.value, strings.Join(vals, ", ")))
			}
		}
	}
	return bad
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnitUsesOnlySystemd219Directives(t *testing.T) {
	unit := readRepo(t, "systemd/ovnhost.service")
	if bad := check219(unit); len(bad) > 0 {
		t.Fatalf("systemd/ovnhost.service would lose settings on CentOS 7.9:\n%s", strings.Join(bad, "\n"))
	}
	// The check must catch what people write for newer systemd.
	for _, c := range []struct{ after, add string }{
		{"[Service]", "StateDirectory=ovnhost"},
		{"[Service]", "LogsDirectory=ovnhost"},
		{"[Service]", "ReadWritePaths=/var/lib/ovn"},
		{"[Service]", "MemoryMax=1G"},
		{"[Unit]", "StartLimitIntervalSec=300"},
		{"[Service]", "NotifyAccess=exec"},
		{"[Service]", "Type=exec"},
		{"[Service]", "ProtectSystem=strict"},
	} {
		mutated := strings.Replace(unit, c.after+"\n", c.after+"\n"+c.add+"\n", 1)
		if bad := check219(mutated); len(bad) == 0 {
			t.Errorf("allow-list accepted %s in %s", c.add, c.after)
		}
	}
}

func unitValues(t *testing.T, content string) map[string][]string {
	t.Helper()
	lines, err := parseUnit(content)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]string{}
	for _, l := range lines {
		m[l.section+"."+l.key] = append(m[l.section+"."+l.key], l.value)
	}
	return m
}

// TestUnitSettings asserts what an operator relies on: notify with a
// watchdog, restart on failure, configuration from /etc/sysconfig, the
// runtime directories, ordering, and a capability bounding set that is
// exactly what the node needs.
func TestUnitSettings(t *testing.T) {
	v := unitValues(t, readRepo(t, "systemd/ovnhost.service"))
	want := map[string]string{
		"Service.Type":            "notify",
		"Service.NotifyAccess":    "main",
		"Service.Restart":         "on-failure",
		"Service.EnvironmentFile": "-/etc/sysconfig/ovnhost",
		"Service.KillMode":        "process",
		"Service.Environment":     "OVNHOST_ADOPT_CHILDREN=true",
		"Install.WantedBy":        "multi-user.target",
	}
	for k, w := range want {
		if got := v[k]; len(got) != 1 || got[0] != w {
			t.Errorf("%s = %v, want %s", k, got, w)
		}
	}
	if got := v["Service.ExecStart"]; len(got) != 1 || !strings.HasPrefix(got[0], "/usr/bin/ovnhost run") {
		t.Errorf("ExecStart = %v, want /usr/bin/ovnhost run ...", got)
	}
	if len(v["Service.WatchdogSec"]) != 1 {
		t.Error("no WatchdogSec: a hung daemon would never be restarted")
	}
	for _, k := range []string{"Unit.After", "Unit.Wants"} {
		if !strings.Contains(strings.Join(v[k], " "), "network-online.target") {
			t.Errorf("%s lacks network-online.target", k)
		}
	}
	rd := strings.Fields(strings.Join(v["Service.RuntimeDirectory"], " "))
	sort.Strings(rd)
	// Not openvswitch or ovn: systemd 219 removes a RuntimeDirectory at
	// every stop, a crash included, which would take the sockets of the
	// daemons that outlive the crash (adopt-children).
	if strings.Join(rd, " ") != "ovnhost" {
		t.Errorf("RuntimeDirectory = %v, want ovnhost only", rd)
	}
	if !strings.Contains(strings.Join(v["Unit.RequiresMountsFor"], " "), "/var/lib/openvswitch") {
		t.Error("not ordered after the mount of the state directory")
	}
	caps := strings.Fields(strings.Join(v["Service.CapabilityBoundingSet"], " "))
	sort.Strings(caps)
	need := []string{"CAP_IPC_LOCK", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN", "CAP_SYS_NICE"}
	if strings.Join(caps, " ") != strings.Join(need, " ") {
		t.Errorf("CapabilityBoundingSet = %v, want exactly %v (modules load at boot, so no CAP_SYS_MODULE; no port below 1024, so no CAP_NET_BIND_SERVICE)", caps, need)
	}
	// Hardening that systemd 219 already has (issue 14).
	for k, want := range map[string]string{
		"Service.ProtectSystem": "full", "Service.SystemCallArchitectures": "native", "Service.UMask": "0027",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET", "Service.ReadWriteDirectories": "-/etc/cni/net.d",
	} {
		if got := strings.Join(v[k], " "); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// TestUnitSystemdAnalyzeVerify runs Debian's systemd-analyze verify on the
// unit in a scratch root holding the host's units and the real binary: it
// must load with no warning about ovnhost.service.
func TestUnitSystemdAnalyzeVerify(t *testing.T) {
	testenv.RequireCommands(t, "systemd-analyze")
	bin := testenv.Binary(t, "ovnhost")
	unit := readRepo(t, "systemd/ovnhost.service")
	if out, err := verifyUnit(t, unit, bin); err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// A misspelled directive is only a warning to systemd; verifyUnit must
	// still refuse it.
	bad := strings.Replace(unit, "WatchdogSec=", "WatchdogSecs=", 1)
	if out, err := verifyUnit(t, bad, bin); err == nil {
		t.Fatalf("verify accepted a misspelled directive:\n%s", out)
	}
}

func verifyUnit(t *testing.T, unit, bin string) (string, error) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/lib/systemd", "usr/bin", "etc/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostUnits := "/usr/lib/systemd/system"
	if _, err := os.Stat(hostUnits); err != nil {
		hostUnits = "/lib/systemd/system"
	}
	if out, err := exec.Command("cp", "-a", hostUnits, filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copying the host's units: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/ovnhost"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system/ovnhost.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("systemd-analyze", "verify", "--root="+root, "--man=no", "ovnhost.service")
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "ovnhost.service") {
			return string(out), fmt.Errorf("warning about the unit: %s", l)
		}
	}
	return string(out), nil
}
