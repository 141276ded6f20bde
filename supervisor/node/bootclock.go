package node

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/ovsquirks"
)

// sinceBoot is CLOCK_MONOTONIC, the clock ovs-vswitchd's time_msec reads.
func sinceBoot() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("reading CLOCK_MONOTONIC: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// waitForCPUCount holds ovs-vswitchd on the kernel datapath back until it
// can count the CPUs (ovsquirks.CPUCountAfterBoot); it returns at once
// anywhere else. The check costs one `ovs-vswitchd --version`, and only in
// the first 10 s after boot.
func (n *Node) waitForCPUCount(ctx context.Context) error {
	if n.nc.Datapath.IsUserspace() {
		return nil
	}
	up, err := sinceBoot()
	if err != nil || up >= ovsquirks.CPUCountAfterBoot {
		return err
	}
	bin := n.bins["ovs-vswitchd"]
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %v: %s", bin, err, out)
	}
	if up, err = sinceBoot(); err != nil {
		return err
	}
	wait := ovsquirks.BootWait(ovsquirks.Version(string(out)), up)
	if wait == 0 {
		return nil
	}
	n.log.Warn("holding ovs-vswitchd back until 10 s after boot: Open vSwitch 3.1.0 started earlier sets up no upcall handlers on the kernel datapath and drops every packet that misses its flow cache (fixed in 3.1.1)",
		"since_boot", up.Round(time.Millisecond), "wait", wait.Round(time.Millisecond))
	n.health.Waiting("ovs-vswitchd", "10 s of uptime before starting Open vSwitch 3.1.0 on the kernel datapath")
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for 10 s of uptime before starting ovs-vswitchd 3.1.0: %w", ctx.Err())
	}
}
