package hostcheck

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/capability"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// RequiredCaps are the capabilities the node daemon and its children need.
func RequiredCaps(s nodeconfig.HostSettings) uint64 {
	m := CapMask(capability.CAP_NET_ADMIN, capability.CAP_NET_RAW,
		capability.CAP_SYS_ADMIN, capability.CAP_SYS_NICE)
	if s.MLockAll {
		m |= CapMask(capability.CAP_IPC_LOCK)
	}
	// Every socket is a unix socket or above 1024, unless the health
	// address is set below it.
	if _, port, err := net.SplitHostPort(s.HealthAddr); err == nil {
		if p, err := strconv.Atoi(port); err == nil && p > 0 && p < 1024 {
			m |= CapMask(capability.CAP_NET_BIND_SERVICE)
		}
	}
	return m
}

// CheckProcessCaps compares this process's effective and bounding sets with
// what the node needs. Children exec'd as root get at most the bounding set,
// so a capability must be in both.
func CheckProcessCaps(s nodeconfig.HostSettings, pc ProcCaps, err error) Check {
	const name = "capabilities"
	if err != nil {
		return Check{Name: name, Status: Fail, Found: "cannot read this process's capabilities: " + err.Error(),
			Fix: "run ovnhost on Linux with /proc mounted"}
	}
	need := RequiredCaps(s)
	noEff := need &^ pc.Effective
	noBnd := need &^ pc.Bounding
	if noEff == 0 && noBnd == 0 {
		return Check{Name: name, Status: Pass, Found: "effective and bounding sets hold " + strings.Join(CapNames(need), ", ")}
	}
	var parts []string
	if noEff != 0 {
		parts = append(parts, "missing from the effective set: "+strings.Join(CapNames(noEff), ", "))
	}
	if noBnd != 0 {
		parts = append(parts, "missing from the bounding set (children cannot get them): "+strings.Join(CapNames(noBnd), ", "))
	}
	missing := noEff | noBnd
	return Check{Name: name, Status: Fail, Found: strings.Join(parts, "; "),
		Fix: "run ovnhost as root with " + strings.Join(CapNames(missing), ",") +
			" (DaemonSet: securityContext.capabilities.add; systemd: CapabilityBoundingSet=/AmbientCapabilities=)"}
}

// Binary is a program the node daemon may exec.
type Binary struct {
	Name     string
	Required bool // absent optional binaries are skipped
}

// Binaries lists what ovnhost execs with this configuration.
func Binaries(s nodeconfig.HostSettings) []Binary {
	bs := []Binary{{"ovsdb-tool", true}, {"ovsdb-server", true}, {"ovs-vswitchd", true}, {"ovn-controller", true}}
	if s.AllInOne {
		bs = append(bs, Binary{"ovn-northd", true})
	}
	// Packet filter tools: not run by ovnhost itself today, but a file
	// capability set on them (the Talos iptables case) breaks every caller.
	bs = append(bs, Binary{"iptables", false}, Binary{"ipset", false})
	return bs
}

// CheckBinaries finds each binary in s.BinDirs and checks that its file
// capabilities can be granted under this process's bounding set: one that
// cannot fails exec with EPERM (the Talos `ovs-vswitchd: Operation not
// permitted`).
func CheckBinaries(s nodeconfig.HostSettings, bins []Binary, pc ProcCaps, pcErr error, f BinaryFacts) []Check {
	var out []Check
	for _, b := range bins {
		name := "exec:" + b.Name
		path, err := f.LookPath(b.Name, s.BinDirs)
		if err != nil || path == "" {
			if b.Required {
				out = append(out, Check{Name: name, Status: Fail,
					Found: fmt.Sprintf("%s not found in bin-dirs (%s)", b.Name, strings.Join(s.BinDirs, ",")),
					Fix:   "install the OVS/OVN packages (openvswitch-switch, ovn-host, ovn-central) or add their directory to --bin-dirs"})
			}
			continue
		}
		fc, err := f.FileCaps(path)
		if err != nil {
			out = append(out, Check{Name: name, Status: Warn, Found: fmt.Sprintf("%s: cannot read %s: %v", path, XattrCaps, err),
				Fix: "check the file is readable by root"})
			continue
		}
		if fc == nil {
			out = append(out, Check{Name: name, Status: Pass, Found: path + ": no file capabilities"})
			continue
		}
		if pcErr != nil {
			out = append(out, Check{Name: name, Status: Warn, Found: fmt.Sprintf("%s has file capabilities %s; own capabilities unknown: %v", path, fc, pcErr)})
			continue
		}
		if blocked := ExecBlocked(fc, pc); blocked != 0 {
			out = append(out, Check{Name: name, Status: Fail,
				Found: fmt.Sprintf("%s has file capabilities %s but %s not in this process's bounding set: exec fails with EPERM (Operation not permitted)",
					path, fc, strings.Join(CapNames(blocked), ", ")),
				Fix: capsFix(path, fc, blocked)})
			continue
		}
		out = append(out, Check{Name: name, Status: Pass, Found: fmt.Sprintf("%s: file capabilities %s are within the bounding set", path, fc)})
	}
	return out
}

func capsFix(path string, fc *FileCaps, blocked uint64) string {
	keep := fc.Permitted &^ blocked
	fix := "setcap -r " + path + " (ovnhost runs it as root, it needs no file capabilities)"
	if keep != 0 {
		flags := "+p"
		if fc.Effective {
			flags = "+ep"
		}
		fix = fmt.Sprintf("setcap '%s%s' %s (drops %s), or setcap -r %s", setcapList(keep), flags, path, strings.Join(CapNames(blocked), ","), path)
	}
	return fix + ", or grant " + strings.Join(CapNames(blocked), ",") + " to ovnhost (securityContext.capabilities.add)"
}

// ExecError explains an exec that failed with EPERM because the binary's
// file capabilities exceed the bounding set.
type ExecError struct {
	Binary   string
	FileCaps *FileCaps
	Missing  []string // CAP_* names not in the bounding set
	Fix      string
	Err      error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("exec %s: %v: its file capabilities (%s) include %s, which this process's bounding set lacks, so the kernel refuses the exec; fix: %s",
		e.Binary, e.Err, e.FileCaps, strings.Join(e.Missing, ", "), e.Fix)
}

func (e *ExecError) Unwrap() error { return e.Err }

// ExplainExec turns an EPERM from starting binary into the file-capability
// explanation (the binary, the capabilities missing from the bounding set,
// the setcap line that fixes it). Any other error, or an EPERM the file
// capabilities do not explain, is returned unchanged.
func ExplainExec(binary string, err error) error {
	return explainExec(binary, err, NewHost())
}

func explainExec(binary string, err error, f interface {
	CapFacts
	BinaryFacts
}) error {
	if err == nil || !errors.Is(err, syscall.EPERM) {
		return err
	}
	path := binary
	if !filepath.IsAbs(path) {
		p, lerr := f.LookPath(binary, nil)
		if lerr != nil {
			return err
		}
		path = p
	}
	fc, ferr := f.FileCaps(path)
	if ferr != nil || fc == nil {
		return err
	}
	pc, perr := f.ProcessCaps()
	if perr != nil {
		return err
	}
	blocked := ExecBlocked(fc, pc)
	if blocked == 0 {
		return err
	}
	target := path
	if real, rerr := filepath.EvalSymlinks(path); rerr == nil {
		target = real // setcap needs the file, not a symlink to it
	}
	return &ExecError{Binary: path, FileCaps: fc, Missing: CapNames(blocked), Fix: capsFix(target, fc, blocked), Err: err}
}
