// Package podwire wires a pod's interface on the node: the veth pair with
// its MAC, MTU, addresses and routes (cni/podnet), the OVS port on br-int
// with Kube-OVN's external_ids, QoS and mirroring (cni/ovsport), and the
// wait for ovn-controller's ovn-installed. It removes the ports of an
// earlier sandbox of the same pod, checks a wired pod (CHECK), lists and
// removes the ports it made (GC), and keeps the QoS of the pods it wired
// following their rate annotations.
//
// It knows nothing of where a pod's network comes from (cni/podsource) or
// of the CNI protocol (cni/server): the server hands it an Attachment and a
// Network, and maps its Errors to CNI error codes.
package podwire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/ovsport"
	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Route is a route of the pod's interface (GW invalid: on-link).
type Route = podnet.Route

// PortName is the host end's name for a container's interface, which is
// also its OVS port's and interface's name (at most 15 characters).
func PortName(containerID, ifName string) string { return podnet.HostIfName(containerID, ifName) }

// Options are what the wirer needs.
type Options struct {
	// OVS is a client of the local conf.db with the internal/ovsdb/vswitch
	// models; the wirer only transacts on it. Bridge is where pods go
	// (default ovsport.DefaultBridge).
	OVS    client.Client
	Bridge string
	// Datapath is the node's datapath ("": the bridge's datapath_type, read
	// at Start). The userspace datapath needs transmit checksum offload off
	// in the pod and the pod's egress limit set on the pod's side.
	Datapath nodeconfig.Datapath
	// MirrorOutput is the port mirrored pods' traffic is copied to.
	MirrorOutput string
	// InstallWait bounds the wait for ovn-controller's ovn-installed.
	InstallWait time.Duration
	Log         *slog.Logger
}

// Wirer wires pods.
type Wirer struct {
	ovs          *ovsport.Bridge
	dp           nodeconfig.Datapath
	mirrorOutput string
	installWait  time.Duration
	log          *slog.Logger

	mu    sync.Mutex
	wired map[string]wiredPod // pod key -> its port, for annotation changes

	mirrorMu    sync.Mutex
	mirrorReady bool

	bg     sync.WaitGroup // the mirror output port's bring-up
	bgCtx  context.Context
	bgStop context.CancelFunc
}

type wiredPod struct {
	port string
	ids  map[string]string
}

// New is the wirer of o.
func New(o Options) *Wirer {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Wirer{ovs: ovsport.New(o.OVS, o.Bridge), dp: o.Datapath, mirrorOutput: o.MirrorOutput,
		installWait: o.InstallWait, log: o.Log, wired: map[string]wiredPod{}}
}

// Start checks that the bridge exists, settles the datapath, and
// remembers the pods wired before this start (their QoS keeps following
// their rate annotations).
func (w *Wirer) Start(ctx context.Context) error {
	dp, ok, err := w.ovs.DatapathType(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("bridge %s does not exist in the local OVS database; the CNI server starts after it", w.ovs.Name())
	}
	if w.dp == "" {
		w.dp = nodeconfig.Datapath(dp)
		if w.dp == "" {
			w.dp = nodeconfig.Kernel
		}
	}
	if owned, err := w.ovs.OwnedInterfaces(ctx); err == nil {
		w.mu.Lock()
		for _, o := range owned {
			if o.ExternalIDs[ovsport.KeyProvider] != "" {
				continue // an attachment network's interface: no rates
			}
			key := o.ExternalIDs[ovsport.KeyPodNamespace] + "/" + o.ExternalIDs[ovsport.KeyPodName]
			w.wired[key] = wiredPod{port: o.Name, ids: o.ExternalIDs}
		}
		w.mu.Unlock()
	}
	w.bgCtx, w.bgStop = context.WithCancel(context.WithoutCancel(ctx))
	return nil
}

// Datapath is the node's datapath (known after Start).
func (w *Wirer) Datapath() nodeconfig.Datapath { return w.dp }

// Stop waits for the background work (the mirror output port's bring-up).
// Wired pods stay wired.
func (w *Wirer) Stop() {
	if w.bgStop != nil {
		w.bgStop()
		w.bg.Wait()
		w.bgStop = nil
	}
}

// Status says whether pods can be wired: the bridge exists.
func (w *Wirer) Status(ctx context.Context) error {
	if _, ok, err := w.ovs.DatapathType(ctx); err != nil || !ok {
		why := "is missing"
		if err != nil {
			why = err.Error()
		}
		return fmt.Errorf("bridge %s %s", w.ovs.Name(), why)
	}
	return nil
}

// Attachment is one interface of one pod: the pod, the runtime's
// container, netns and interface names, and the host end.
type Attachment struct {
	Namespace, Name string
	ContainerID     string
	Netns           string
	IfName          string
	// Port is the host end of the veth, the OVS port's and interface's
	// name (PortName).
	Port string
	// Provider is the attachment network ("<nad>.<namespace>.ovn") of a
	// pod's extra interface (Multus's net1 ...); "" for its default network.
	Provider string
	// LSP, when set, is the logical switch port to bind instead of the
	// pod's own (a KubeVirt VM's "<vm>.<namespace>").
	LSP string
}

// Key is "namespace/name".
func (a Attachment) Key() string { return a.Namespace + "/" + a.Name }

// IfaceID is the logical switch port the OVS interface binds to,
// "<pod>.<namespace>", or "<pod>.<namespace>.<provider>" for an
// attachment network (Kube-OVN's names).
func (a Attachment) IfaceID() string {
	if a.LSP != "" {
		return a.LSP
	}
	if a.Provider != "" {
		return a.Name + "." + a.Namespace + "." + a.Provider
	}
	return a.Name + "." + a.Namespace
}

// Network is what the pod's interface gets.
type Network struct {
	Addrs  []netip.Prefix // address with the subnet's prefix length
	MAC    net.HardwareAddr
	MTU    int
	Routes []Route // the full list, default routes included
	// IngressMbps limits traffic to the pod, EgressMbps traffic from it (0: none).
	IngressMbps, EgressMbps int
	Mirror                  bool
}

// Step is the wiring step that failed.
type Step int

const (
	StepStale          Step = iota + 1 // removing ports of an earlier sandbox (OVS)
	StepConfig                         // the pod interface's configuration is invalid
	StepPlumbing                       // veth, addresses, routes, pod-side limits (netlink)
	StepMirror                         // the node's mirror (OVS)
	StepPort                           // the OVS port (OVS)
	StepInstall                        // waiting for ovn-installed failed
	StepInstallTimeout                 // ovn-controller did not set ovn-installed in time
	StepCheck                          // CHECK: the pod is not wired as it should be
)

// Error is a failed step; its text is Err's.
type Error struct {
	Step Step
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Result is what Add made, and when each step ended (the server logs
// the breakdown).
type Result struct {
	HostIfName string
	HostMAC    net.HardwareAddr
	// StaleDone, VethDone, PortDone: stale ports removed, veth set up
	// (and the mirror), OVS port added (and the pod-side limit).
	StaleDone, VethDone, PortDone time.Time
}

// Add wires the pod and waits until ovn-controller has installed its
// port. done runs last: when it fails (the answer to the runtime cannot be
// built), the wiring is undone and its error returned as it is. Any other
// failure undoes what was made and is an *Error.
func (w *Wirer) Add(ctx context.Context, a Attachment, n Network, done func(*Result) error) error {
	ok := false
	// Ports of an earlier sandbox of the same pod (same iface-id) and a
	// leftover of an earlier attempt for this container go first.
	if err := w.removeStale(ctx, a); err != nil {
		return &Error{StepStale, err}
	}
	pc := podnet.Config{NetNS: a.Netns, IfName: a.IfName, HostIfName: a.Port, MAC: n.MAC, MTU: n.MTU,
		Addrs: n.Addrs, Routes: n.Routes, TxChecksumOff: w.dp.IsUserspace()}
	if err := pc.Validate(); err != nil {
		return &Error{StepConfig, err}
	}
	r := &Result{StaleDone: time.Now()}
	res, err := podnet.Setup(pc)
	if err != nil {
		return &Error{StepPlumbing, err}
	}
	r.HostIfName, r.HostMAC = res.HostIfName, res.HostMAC
	defer func() {
		if !ok {
			if err := podnet.Teardown(a.Port, a.Netns, a.IfName); err != nil {
				w.log.Warn("rollback of the veth after a failed ADD", "pod", a.Key(), "err", err)
			}
		}
	}()
	if n.Mirror {
		if err := w.ensureMirror(ctx); err != nil {
			return &Error{StepMirror, err}
		}
	}
	ids := map[string]string{
		ovsport.KeyIfaceID: a.IfaceID(), ovsport.KeyPodName: a.Name, ovsport.KeyPodNamespace: a.Namespace, ovsport.KeyPodNetns: a.Netns,
		ovsport.KeyIP: JoinAddrs(n.Addrs), ovsport.KeyAttachedMAC: n.MAC.String(), ovsport.KeyVendor: ovsport.Vendor,
		ovsport.KeyContainerID: a.ContainerID, ovsport.KeyIfName: a.IfName,
	}
	if a.Provider != "" {
		ids[ovsport.KeyProvider] = a.Provider
	}
	r.VethDone = time.Now()
	if err := w.ovs.AddPort(ctx, ovsport.PortSpec{Name: a.Port, ExternalIDs: ids, IngressMbps: n.IngressMbps, EgressMbps: n.EgressMbps, Mirror: n.Mirror}); err != nil {
		return &Error{StepPort, err}
	}
	defer func() {
		if !ok {
			if err := w.ovs.DeletePort(context.WithoutCancel(ctx), a.Port); err != nil {
				w.log.Warn("rollback of the OVS port after a failed ADD", "pod", a.Key(), "err", err)
			}
		}
	}()
	if w.dp.IsUserspace() && n.EgressMbps > 0 {
		if err := podnet.SetEgressLimit(a.Netns, a.IfName, n.EgressMbps); err != nil {
			return &Error{StepPlumbing, err}
		}
	}
	r.PortDone = time.Now()
	if err := w.ovs.WaitInstalled(ctx, a.Port, w.installWait); err != nil {
		if errors.Is(err, ovsport.ErrInstallTimeout) {
			return &Error{StepInstallTimeout, err}
		}
		return &Error{StepInstall, err}
	}
	if err := done(r); err != nil {
		return err
	}
	ok = true
	if a.Provider == "" {
		// Rates follow the default network's interface only.
		w.mu.Lock()
		w.wired[a.Key()] = wiredPod{port: a.Port, ids: ids}
		w.mu.Unlock()
	}
	return nil
}

// JoinAddrs is the addresses without prefix length, comma-separated (the
// OVS interface's external_ids:ip).
func JoinAddrs(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Addr().String()
	}
	return strings.Join(out, ",")
}

func (w *Wirer) removeStale(ctx context.Context, a Attachment) error {
	names, err := w.ovs.PortsByIfaceID(ctx, a.IfaceID())
	if err != nil {
		return err
	}
	if !contains(names, a.Port) {
		names = append(names, a.Port)
	}
	for _, n := range names {
		if err := w.ovs.DeletePort(ctx, n); err != nil {
			return err
		}
		if n != a.Port {
			_ = podnet.Teardown(n, "", "")
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ensureMirror creates the node's mirror and its output port the first time
// a pod asks for mirroring (no unused port on nodes that never mirror).
func (w *Wirer) ensureMirror(ctx context.Context) error {
	w.mirrorMu.Lock()
	defer w.mirrorMu.Unlock()
	if w.mirrorReady {
		return nil
	}
	out := w.mirrorOutput
	if out == "" {
		return fmt.Errorf("pod asks for traffic mirroring (%s=true) but no mirror output port is configured (--mirror-output)", annotations.Mirror)
	}
	if err := w.ovs.EnsureMirror(ctx, out); err != nil {
		return fmt.Errorf("mirror output port %s: %w", out, err)
	}
	w.mirrorReady = true
	// The output port is an internal port: bring it up so that
	// tcpdump -i <port> shows the mirrored traffic, and keep it up for a
	// minute: on the userspace datapath ovs-vswitchd may set its new tap
	// down again after the first up (seen in CI: mirror0 stayed down).
	bctx := w.bgCtx
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		wctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		if err := podnet.KeepUp(wctx, out); err != nil && bctx.Err() == nil {
			w.log.Warn("cannot bring the mirror output port up", "port", out, "err", err)
		}
	}()
	return nil
}

// Del removes the pod's OVS port (StepPort) and veth (StepPlumbing).
func (w *Wirer) Del(ctx context.Context, a Attachment) error {
	if err := w.ovs.DeletePort(ctx, a.Port); err != nil {
		return &Error{StepPort, err}
	}
	if err := podnet.Teardown(a.Port, a.Netns, a.IfName); err != nil {
		return &Error{StepPlumbing, err}
	}
	return nil
}

// Forget stops following the rates of the pod when a.Port is its port
// (after a DEL; a newer sandbox's port stays followed).
func (w *Wirer) Forget(a Attachment) {
	w.mu.Lock()
	if p, ok := w.wired[a.Key()]; ok && p.port == a.Port {
		delete(w.wired, a.Key())
	}
	w.mu.Unlock()
}

// Expected is what CHECK expects of a wired pod (Network's Addrs, MAC,
// MTU and Routes; MTUFromHost: the runtime's result carried no MTU, the
// host end's is expected when it exists, the pod end was created with it).
type Expected struct {
	Network
	MTUFromHost bool
}

// Check compares the pod's interface and OVS port with what ADD made:
// StepCheck when they differ, StepPort when OVS cannot be read.
func (w *Wirer) Check(ctx context.Context, a Attachment, want Expected) error {
	pc := podnet.Config{NetNS: a.Netns, IfName: a.IfName, HostIfName: a.Port, MTU: want.MTU, MAC: want.MAC,
		Addrs: want.Addrs, Routes: want.Routes}
	if want.MTUFromHost {
		if l, err := netlink.LinkByName(a.Port); err == nil {
			pc.MTU = l.Attrs().MTU
		}
	}
	if err := podnet.Check(pc); err != nil {
		return &Error{StepCheck, err}
	}
	ids, ok, err := w.ovs.Interface(ctx, a.Port)
	if err != nil {
		return &Error{StepPort, err}
	}
	if !ok {
		return &Error{StepCheck, fmt.Errorf("OVS interface %s is missing from %s", a.Port, w.ovs.Name())}
	}
	if ids[ovsport.KeyIfaceID] != a.IfaceID() {
		return &Error{StepCheck, fmt.Errorf("OVS interface %s has iface-id %q, want %q", a.Port, ids[ovsport.KeyIfaceID], a.IfaceID())}
	}
	if ids[ovsport.KeyOVNInstalled] != "true" {
		return &Error{StepCheck, fmt.Errorf("OVS interface %s is not ovn-installed", a.Port)}
	}
	return nil
}

// Owned lists the attachments the CNI server wired on this node, read
// from their OVS rows (they outlive the daemon).
func (w *Wirer) Owned(ctx context.Context) ([]Attachment, error) {
	owned, err := w.ovs.OwnedInterfaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Attachment, 0, len(owned))
	for _, o := range owned {
		ids := o.ExternalIDs
		out = append(out, Attachment{Namespace: ids[ovsport.KeyPodNamespace], Name: ids[ovsport.KeyPodName],
			ContainerID: ids[ovsport.KeyContainerID], Netns: ids[ovsport.KeyPodNetns], IfName: ids[ovsport.KeyIfName], Port: o.Name,
			Provider: ids[ovsport.KeyProvider]})
	}
	return out, nil
}

// Remove deletes a port Owned listed, and its host end.
func (w *Wirer) Remove(ctx context.Context, port string) error {
	return errors.Join(w.ovs.DeletePort(ctx, port), podnet.Teardown(port, "", ""))
}

// Wired lists the pods ("namespace/name") wired on this node, those
// wired before this start included.
func (w *Wirer) Wired() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.wired))
	for k := range w.wired {
		keys = append(keys, k)
	}
	return keys
}

// ReapplyRates applies a wired pod's rates when its port has others (a
// rate changed while the daemon was down has no update event).
func (w *Wirer) ReapplyRates(ctx context.Context, key string, ingressMbps, egressMbps int) {
	w.mu.Lock()
	p := w.wired[key]
	w.mu.Unlock()
	if in, eg, err := w.ovs.Rates(ctx, p.port); err == nil && in == ingressMbps && eg == egressMbps {
		return
	}
	w.log.Info("pod rates changed while the node daemon was down; applying them", "pod", key)
	w.SetRates(key, ingressMbps, egressMbps)
}

// SetRates applies changed rate annotations to a running pod.
func (w *Wirer) SetRates(key string, ingressMbps, egressMbps int) {
	w.mu.Lock()
	p, ok := w.wired[key]
	w.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The pod-side limit first: once the OVS rows show the new rates,
	// everything is in place.
	if w.dp.IsUserspace() && p.ids[ovsport.KeyPodNetns] != "" {
		if err := podnet.SetEgressLimit(p.ids[ovsport.KeyPodNetns], p.ids[ovsport.KeyIfName], egressMbps); err != nil {
			w.log.Warn("cannot update the pod's egress limit", "pod", key, "err", err)
			return
		}
	}
	if err := w.ovs.SetQoS(ctx, p.port, p.ids, ingressMbps, egressMbps); err != nil {
		w.log.Warn("cannot update the pod's QoS", "pod", key, "port", p.port, "err", err)
		return
	}
	w.log.Info("pod QoS updated", "pod", key, "port", p.port, "ingress_mbps", ingressMbps, "egress_mbps", egressMbps)
}
