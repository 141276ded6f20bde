// Package ovsquirks names defects of Open vSwitch releases that ovnhost
// works around (the supervisor) or reports (doctor), so both agree on
// which releases are affected.
package ovsquirks

import (
	"fmt"
	"regexp"
	"time"
)

// CPUCountAfterBoot: Open vSwitch 3.1.0 reads the number of usable CPUs
// only once its monotonic clock (the time since the kernel booted) passes
// 10 s (lib/ovs-thread.c count_cpu_cores; fixed in 3.1.1 by commit
// fff04b838 "ovs-thread: Fix cpus not read for the first 10s"). An
// ovs-vswitchd started earlier on the kernel datapath, which dispatches
// upcalls per CPU, sets up no handler socket: every packet that misses the
// datapath's flow cache (a pod's first ARP, a new connection) is dropped,
// and the datapath stays without a handler after the count is read. Debian
// 12 ships 3.1.0, and a node whose service starts with the boot (Talos, a
// fast VM) gets there in well under 10 s.
const CPUCountAfterBoot = 10 * time.Second

var banner = regexp.MustCompile(`\(Open vSwitch\) (\S+)`)

// Version is the release in `ovs-vswitchd --version` output, "" if none.
func Version(versionOutput string) string {
	if m := banner.FindStringSubmatch(versionOutput); m != nil {
		return m[1]
	}
	return ""
}

// CountsNoCPUsAtBoot reports whether release (as in Open_vSwitch
// ovs_version or Version) has the CPUCountAfterBoot defect.
func CountsNoCPUsAtBoot(release string) bool { return release == "3.1.0" }

// BootWait is how long to hold back an ovs-vswitchd of release on the
// kernel datapath when the clock since boot reads sinceBoot.
func BootWait(release string, sinceBoot time.Duration) time.Duration {
	if sinceBoot >= CPUCountAfterBoot || !CountsNoCPUsAtBoot(release) {
		return 0
	}
	return CPUCountAfterBoot - sinceBoot
}

// RecreatesTunnelBackers reports whether release (as Version returns it)
// deletes and re-creates the kernel datapath's tunnel backing devices
// (genev_sys_6081, vxlan_sys_4789) each time ovs-vswitchd starts on a
// datapath that already has them: at start it took every datapath port
// whose name is not an OpenFlow interface for a stale one, and a backing
// device serves all tunnels of its type under a name of its own. Fixed by
// commit 8661abd4c "ofproto: Fix re-creation of tunnel backing interfaces
// on restart" in 2.17.6, 3.0.4, 3.1.1 and 3.2.0; Debian 12 ships 3.1.0.
// The device's datapath port number survives, so kept flows still point
// at it, but cross-node traffic stops while it is gone (Kube-OVN issue
// 2291). Unknown releases are reported unaffected.
func RecreatesTunnelBackers(release string) bool {
	var major, minor, patch int
	if n, _ := fmt.Sscanf(release, "%d.%d.%d", &major, &minor, &patch); n != 3 {
		return false
	}
	switch {
	case major < 2, major == 2 && minor < 17:
		return true
	case major == 2 && minor == 17:
		return patch < 6
	case major == 3 && minor == 0:
		return patch < 4
	case major == 3 && minor == 1:
		return patch < 1
	}
	return false
}
