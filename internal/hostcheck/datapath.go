package hostcheck

import (
	"fmt"

	"github.com/moby/sys/capability"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// OVSDatapathFamily is the generic netlink family the openvswitch kernel
// module registers. Its presence is the one reliable sign of the kernel
// datapath: it also covers a module built into the kernel (Talos), where
// modinfo, /proc/modules and /sys/module say nothing useful.
const OVSDatapathFamily = "ovs_datapath"

// CheckDatapath reports whether the kernel datapath is there. When it is
// missing it loads the openvswitch module if module management is enabled,
// then judges s.Datapath: kernel fails, netdev uses userspace, auto falls
// back to userspace with a warning.
func CheckDatapath(s nodeconfig.HostSettings, f DatapathFacts, opts Options) (kernel bool, checks []Check) {
	const name = "datapath"
	if s.Datapath == nodeconfig.ChooseUserspace {
		return false, []Check{{Name: name, Status: Pass,
			Found: "userspace (netdev) datapath chosen by datapath=netdev; the kernel datapath is not used"}}
	}
	present, err := f.GenlFamily(OVSDatapathFamily)
	var note string
	if err != nil {
		note = fmt.Sprintf("; querying generic netlink failed: %v", err)
	}
	if !present {
		switch {
		case s.DisableModules:
			note += "; module loading is disabled (DISABLE_MODULES_MANAGEMENT=true)"
		case opts.NoModuleLoad:
			note += "; not loading modules (diagnostics only look)"
		case lacksSysModule(f):
			note += "; cannot load the openvswitch module: this process lacks CAP_SYS_MODULE (Talos drops it; set DISABLE_MODULES_MANAGEMENT=true there)"
		default:
			if lerr := f.LoadModule("openvswitch"); lerr != nil {
				note += fmt.Sprintf("; loading module openvswitch failed: %v", lerr)
			} else if present, err = f.GenlFamily(OVSDatapathFamily); present {
				return true, []Check{{Name: name, Status: Pass,
					Found: "kernel datapath: loaded module openvswitch, generic netlink family ovs_datapath present"}}
			} else {
				note += "; module openvswitch loaded but family ovs_datapath still missing"
				if err != nil {
					note += fmt.Sprintf(" (%v)", err)
				}
			}
		}
	}
	if present {
		return true, []Check{{Name: name, Status: Pass,
			Found: "kernel datapath: generic netlink family ovs_datapath present"}}
	}
	found := "no kernel datapath: generic netlink family ovs_datapath is not registered" + note
	switch s.Datapath {
	case nodeconfig.ChooseKernel:
		return false, []Check{{Name: name, Status: Fail, Found: found + "; datapath=kernel requires it",
			Fix: loadFix(s) + ", or set datapath=netdev for the userspace datapath"}}
	default: // auto
		return false, []Check{{Name: name, Status: Warn, Found: found + "; falling back to the userspace (netdev) datapath",
			Fix: loadFix(s) + " for the kernel datapath, or set datapath=netdev to accept userspace"}}
	}
}

func loadFix(s nodeconfig.HostSettings) string {
	if s.DisableModules {
		return "load the openvswitch module on the host (Talos: machine.kernel.modules: [{name: openvswitch}])"
	}
	return "install and load the openvswitch module (modprobe openvswitch; Talos: machine.kernel.modules: [{name: openvswitch}])"
}

// CheckTunnelSupport reports whether the chosen datapath can carry
// s.TunnelType. Run it only when the chosen datapath is available.
func CheckTunnelSupport(s nodeconfig.HostSettings, datapath nodeconfig.Datapath, f DatapathFacts) Check {
	name := "tunnel-support"
	tt := s.TunnelType
	if tt == "" {
		tt = "geneve"
	}
	if datapath.IsUserspace() {
		if tt == "stt" {
			return Check{Name: name, Status: Fail, Found: "TUNNEL_TYPE=stt but the userspace (netdev) datapath has no STT",
				Fix: "use TUNNEL_TYPE=geneve or vxlan, or load the kernel datapath with STT support"}
		}
		return Check{Name: name, Status: Pass, Found: tt + " is encapsulated by ovs-vswitchd itself (userspace datapath)"}
	}
	if tt == "stt" {
		return Check{Name: name, Status: Warn, Found: "TUNNEL_TYPE=stt needs an out-of-tree openvswitch module; it cannot be verified before ovs-vswitchd starts",
			Fix: "prefer TUNNEL_TYPE=geneve (upstream kernels have no STT)"}
	}
	ok, err := f.LinkKind(tt)
	switch {
	case err != nil:
		return Check{Name: name, Status: Warn, Found: fmt.Sprintf("could not probe kernel %s support: %v", tt, err),
			Fix: "make sure the " + tt + " kernel module is available (modprobe " + tt + ")"}
	case !ok:
		fix := "load the " + tt + " module (modprobe " + tt + "; Talos: machine.kernel.modules)"
		if tt == "geneve" {
			fix += ", or set TUNNEL_TYPE=vxlan"
		}
		return Check{Name: name, Status: Fail, Found: "the kernel cannot create " + tt + " tunnel devices (probed in a throwaway network namespace), which the kernel datapath needs for TUNNEL_TYPE=" + tt, Fix: fix}
	}
	return Check{Name: name, Status: Pass, Found: "kernel supports " + tt + " tunnel devices"}
}

// lacksSysModule reports whether f can tell that this process may not load
// modules (no CAP_SYS_MODULE in its effective set), so modprobe is not
// even tried.
func lacksSysModule(f DatapathFacts) bool {
	cf, ok := f.(CapFacts)
	if !ok {
		return false
	}
	pc, err := cf.ProcessCaps()
	return err == nil && pc.Effective&CapMask(capability.CAP_SYS_MODULE) == 0
}
