// Package preflight_test runs the preflight checks and netctl doctor
// against real host conditions (as root): file capabilities outside a
// reduced bounding set, a read-only bind mount as the state directory,
// IFACE naming a missing interface inside a network namespace, duplicate
// chassis in a real SB database, a conflist that outranks ours, and module
// management disabled on a kernel without the OVS datapath. Each test cleans
// up what it creates.
package preflight_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// childEnv makes the test binary act as the reduced-bounding-set child.
const childEnv = "OVNHOST_TEST_PREFLIGHT_CHILD"

func init() {
	if os.Getenv(childEnv) != "" {
		// The bounding set is per thread: keep main() on the main thread
		// (the one /proc/self/status describes) so the drop below applies
		// to the thread that reads the sets and forks the exec.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(capChild(dir))
	}
	os.Exit(m.Run())
}

// childReport is what the child prints as JSON.
type childReport struct {
	DropErr     string
	BoundingHas bool
	Checks      []hostcheck.Check
	ExecErr     string
	ExecEPERM   bool
	Explained   string
	IsExecError bool
	Missing     []string
}

// capChild drops CAP_SYS_MODULE from the bounding set, checks the binaries
// in dir, and tries to exec dir/ovs-vswitchd.
func capChild(dir string) int {
	var rep childReport
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(&rep) }()
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(capability.CAP_SYS_MODULE), 0, 0, 0); err != nil {
		rep.DropErr = err.Error()
		return 0
	}
	h := hostcheck.NewHost()
	pc, err := h.ProcessCaps()
	rep.BoundingHas = pc.Bounding&hostcheck.CapMask(capability.CAP_SYS_MODULE) != 0
	s := nodeconfig.HostSettings{BinDirs: []string{dir}}
	rep.Checks = hostcheck.CheckBinaries(s, []hostcheck.Binary{{Name: "ovsdb-server", Required: true}, {Name: "ovs-vswitchd", Required: true}}, pc, err, h)

	bin := dir + "/ovs-vswitchd"
	cmd := exec.Command(bin)
	err = cmd.Run()
	if err == nil {
		return 0
	}
	rep.ExecErr = err.Error()
	rep.ExecEPERM = errors.Is(err, syscall.EPERM)
	xerr := hostcheck.ExplainExec(bin, err)
	rep.Explained = xerr.Error()
	var ee *hostcheck.ExecError
	if errors.As(xerr, &ee) {
		rep.IsExecError = true
		rep.Missing = ee.Missing
	}
	return 0
}

func runChild(dir string) (*childReport, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("child: %v: %s", err, out)
	}
	var rep childReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("child output %q: %v", out, err)
	}
	return &rep, nil
}
