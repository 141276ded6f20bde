package pods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// syncPod gives a scheduled pod its address, port and annotations, or
// releases them once the pod is gone or finished.
func (r *Reconciler) syncPod(ctx context.Context, key string) error {
	t0 := time.Now()
	defer func() { r.m.podSync.Observe(time.Since(t0).Seconds()) }()
	defer r.beginSync(key)()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := r.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.unwait(key)
		return r.release(ctx, key, nil)
	}
	if err != nil {
		return err
	}
	if pod.Spec.HostNetwork || pod.Spec.NodeName == "" {
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		r.unwait(key)
		return r.release(ctx, key, pod)
	}
	req, choice, ok := r.request(ctx, pod)
	if !ok {
		return nil
	}
	vm, reason, msg := vmOf(pod)
	if reason != "" {
		r.fail(pod, "", ipam.Kind(reason), msg)
		return nil
	}
	var plan vmPlan
	if vm != "" {
		pods, err := r.vmPods(ns, vm)
		if err != nil {
			return err
		}
		plan = planVM(vm, pods)
		if why, refused := plan.refused[name]; refused {
			r.fail(pod, "", "VirtualMachineBusy", why)
			return nil
		}
		if plan.source == nil || (plan.source.Name != name && (plan.target == nil || plan.target.Name != name)) {
			return nil // being deleted while another pod runs the VM
		}
		if plan.target != nil && plan.target.Name == name {
			if msg := r.targetOffNetwork(req.Subnet, plan.target.Spec.NodeName, vm); msg != "" {
				r.fail(pod, "", "MigrationTargetWithoutSubnet", msg)
				return nil
			}
		}
		req.VM = vm
		// The VM's traffic leaves through the node that runs it until the
		// source pod is gone.
		req.Node = plan.source.Spec.NodeName
	}
	notImpl := unimplemented(pod)
	if notImpl != pod.Annotations[annotations.NotImplemented] && notImpl != "" {
		// Once per pod and change of the set (the set is recorded on the pod).
		msg := fmt.Sprintf("ovnhost does not implement %s: ignored, the pod is wired without it", strings.ReplaceAll(notImpl, ",", ", "))
		if strings.Contains(notImpl, annotations.PortSecurity) {
			msg += `; port_security "false" is not applied: ovnhost's ports always have port security (Kube-OVN's "true"), the pod sends only from its own MAC and addresses`
		}
		r.cfg.Recorder.Event(pod, corev1.EventTypeWarning, "AnnotationNotImplemented", msg)
	}
	if ok, err := r.admitted(ctx, pod, req, choice); !ok || err != nil {
		return err
	}
	a, ok, err := r.allocate(ctx, pod, req)
	if !ok || err != nil {
		return err
	}
	extra, ok, err := r.attach(ctx, pod, choice.nsLabels)
	if !ok || err != nil {
		return err
	}
	if vm != "" {
		// Before the target's annotations: its node wires it once they
		// land, and OVN must bind the port there by then.
		if err := r.syncVMChassis(ctx, ns, vm, plan); err != nil {
			return err
		}
		r.rememberVM(key, vm)
		extra[annotations.VirtualMachine] = vm
	}
	r.unwait(key)
	if err := r.annotate(ctx, pod, a, notImpl, extra); err != nil || vm == "" {
		return err
	}
	r.cfg.IPs.Queue("vm/" + ns + "/" + vm)
	return nil
}

// request is the pod's address request from its annotations, its
// namespace and the Subnets, and how its subnet was chosen; false when the
// pod was refused (an event says why).
func (r *Reconciler) request(ctx context.Context, pod *corev1.Pod) (ovnnet.PodRequest, subnetChoice, bool) {
	ann := pod.Annotations
	var ips []netip.Addr
	if s := ann[annotations.IPAddress]; s != "" {
		var err error
		if ips, err = ipam.ParseIPs(s); err != nil {
			r.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: %v", annotations.IPAddress, s, err))
			return ovnnet.PodRequest{}, subnetChoice{}, false
		}
	}
	choice := r.subnetForPod(pod)
	req := ovnnet.PodRequest{Namespace: pod.Namespace, Name: pod.Name, Subnet: choice.subnet, IPs: ips, MAC: ann[annotations.MACAddress],
		Node: pod.Spec.NodeName, PoolIndex: -1}
	if req.Subnet == ovnnet.JoinSubnet {
		// join holds the nodes' own ports (ovn0): a pod there would sit
		// among them and take their addresses.
		r.fail(pod, "", "SubnetNotAllowed", fmt.Sprintf("subnet %q is the nodes' join subnet; pods cannot use it: remove or change the %s annotation of the pod (or of its namespace)", ovnnet.JoinSubnet, annotations.LogicalSwitch))
		return req, choice, false
	}
	if v := ann[annotations.PortSecurity]; v != "" && v != "true" && v != "false" {
		r.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: not true or false", annotations.PortSecurity, v))
		return req, choice, false
	}
	if v := ann[annotations.IPPool]; v != "" && len(ips) == 0 {
		pool, err := ipam.ParsePool(v)
		if err != nil {
			r.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: %s", annotations.IPPool, v, ipamMessage(err)))
			return req, choice, false
		}
		req.Pool = pool
		req.PoolIndex = statefulSetOrdinal(pod)
	}
	return req, choice, true
}

// admitted refuses (with an event) a pod whose port name is a node's join
// port, whose namespace the chosen Subnet does not admit, or that asks a
// subnet being deleted or not valid for an address.
func (r *Reconciler) admitted(ctx context.Context, pod *corev1.Pod, req ovnnet.PodRequest, choice subnetChoice) (bool, error) {
	ns, name := pod.Namespace, pod.Name
	portOf, owner := name, ovnnb.PodPortOwner(ns, name)
	if req.VM != "" {
		portOf, owner = req.VM, ovnnb.VMPortOwner(ns, req.VM)
	}
	if node := r.nodeOfPortName(ctx, ovnnet.PortName(ns, portOf), owner); node != "" {
		r.fail(pod, "", "PortNameCollision", fmt.Sprintf("the pod's logical switch port name %s is node %s's join port; rename the pod or its virtual machine (no pod or VM may be named node-<x> in a namespace that makes <x>.<namespace> a node name)",
			ovnnet.PortName(ns, portOf), node))
		return false, nil
	}
	if ok, rule := r.cfg.Subnets.Admits(req.Subnet, ns, choice.nsLabels); !ok {
		return false, r.refuseSubnet(ctx, pod, req.Subnet, choice.by, rule)
	}
	if r.cfg.Subnets.Terminating(req.Subnet) {
		if held, ok := r.cfg.IPAM.Lookup(ovnnet.PodOwner(ns, name)); !ok || held.Subnet != req.Subnet {
			r.fail(pod, "", "SubnetTerminating", fmt.Sprintf("subnet %q is being deleted; it hands out no new addresses: choose another subnet", req.Subnet))
			return false, nil
		}
	}
	if msg := attachmentSubnetRefusal(req.Subnet, r.cfg.Subnets.ProviderOf(req.Subnet), choice.by); msg != "" {
		r.fail(pod, "", "SubnetNotAllowed", msg)
		return false, nil
	}
	if prob := r.cfg.Subnets.Problem(req.Subnet); prob != nil {
		r.fail(pod, req.Subnet, "SubnetNotValid", fmt.Sprintf("subnet %q is not valid (%s: %s); fix the Subnet and the pod gets its address", req.Subnet, prob.Reason, prob.Message))
		return false, nil
	}
	return true, nil
}

// refuseSubnet refuses a pod the Subnet chosen for it (by) does not admit
// (rule says why): a Warning event SubnetNotAllowed on the pod naming the
// Subnet, the rule and the fix. What the pod holds in that Subnet (an
// address restored from annotations at start-up, or a port and address it
// got while its namespace was admitted) is removed: a bound Subnet holds
// only its namespaces' pods. The pod is looked at again when its namespace
// or the Subnet changes.
func (r *Reconciler) refuseSubnet(ctx context.Context, pod *corev1.Pod, subnet, by, rule string) error {
	ns, name := pod.Namespace, pod.Name
	removed := ""
	held, holds := r.cfg.IPAM.Lookup(ovnnet.PodOwner(ns, name))
	port, hasPort, err := r.cfg.NB.GetPort(ctx, ovnnet.PortName(ns, name))
	if err != nil {
		return err
	}
	if (holds && held.Subnet == subnet) || (hasPort && port.Switch == subnet && ovnnb.OwnerOf(port.ExternalIDs) == ovnnb.PodPortOwner(ns, name)) {
		if err := r.releasePod(ctx, ns, name); err != nil {
			return err
		}
		removed = "; the port and address the pod had there were removed"
	}
	r.fail(pod, "", "SubnetNotAllowed", fmt.Sprintf(
		"subnet %q does not admit namespace %q (the subnet was chosen by %s): %s; the pod gets no address in it%s. "+
			"Fix: remove that %s annotation (or re-create the pod without it), or an admin adds %q to the Subnet's spec.namespaces",
		subnet, ns, by, rule, removed, annotations.LogicalSwitch, ns))
	return nil
}

// allocate takes the pod's address and writes its port; false (and no
// error) when it was refused (an event says why, the pod may wait).
func (r *Reconciler) allocate(ctx context.Context, pod *corev1.Pod, req ovnnet.PodRequest) (ipam.Allocation, bool, error) {
	ann := pod.Annotations
	recorded := ann[annotations.Allocated] == "true" && ann[annotations.IPAddress] != ""
	a, err := r.cfg.Net.AddPod(ctx, req)
	if err != nil && recorded && ipam.KindOf(err) != "" {
		// The recorded address is not this pod's to keep (another pod holds
		// it, or the subnet changed): give it a new one, say so.
		if held, ok := r.cfg.IPAM.Lookup(ovnnet.PodOwner(pod.Namespace, pod.Name)); !ok || held.IPString() != ann[annotations.IPAddress] {
			r.cfg.Recorder.Eventf(pod, corev1.EventTypeWarning, "AddressReassigned",
				"recorded address %s cannot be kept (%v); allocating a new one", ann[annotations.IPAddress], err)
			req.IPs, req.MAC = nil, ""
			a, err = r.cfg.Net.AddPod(ctx, req)
		}
	}
	switch {
	case err == nil:
		return a, true, nil
	case ipam.KindOf(err) != "":
		r.fail(pod, req.Subnet, ipam.KindOf(err), ipamMessage(err))
	case errors.Is(err, ovnnb.ErrNoSwitch):
		r.fail(pod, req.Subnet, ipam.KindUnknownSubnet, err.Error())
	case errors.Is(err, ovnnb.ErrNotOwner):
		r.fail(pod, "", "PortNameCollision", err.Error()+"; rename the pod")
	default:
		return a, false, err
	}
	return a, false, nil
}

// annotate writes the pod's address annotations (server-side apply) unless
// they say so already.
// extra are the attachment networks' annotations ("<provider>.kubernetes.io/<key>").
func (r *Reconciler) annotate(ctx context.Context, pod *corev1.Pod, a ipam.Allocation, notImpl string, extra map[string]string) error {
	ns, name := pod.Namespace, pod.Name
	key := ns + "/" + name
	ann := pod.Annotations
	want := map[string]string{
		annotations.Allocated: "true", annotations.IPAddress: a.IPString(), annotations.MACAddress: a.MAC,
		annotations.CIDR: a.CIDR, annotations.Gateway: a.Gateway, annotations.LogicalSwitch: a.Subnet, annotations.Routed: "true",
	}
	if vpc, ok := r.cfg.Subnets.SubnetVpc(a.Subnet); ok {
		// As Kube-OVN writes it: the router of the pod's VPC.
		want[annotations.LogicalRouter] = vpc
	}
	if mtu := r.cfg.Subnets.MTU(a.Subnet); mtu > 0 {
		want[annotations.MTU] = strconv.Itoa(mtu)
	}
	if ul, ok := r.cfg.Subnets.Underlay(a.Subnet); ok {
		// As Kube-OVN writes them: the node sizes an underlay pod's MTU
		// by its provider network.
		want[annotations.VlanID] = strconv.Itoa(ul.VlanID)
		want[annotations.ProviderNetwork] = ul.Provider
	}
	if notImpl != "" {
		want[annotations.NotImplemented] = notImpl
	}
	for k, v := range extra {
		want[k] = v
	}
	same := true
	for k, v := range want {
		if ann[k] != v {
			same = false
			break
		}
	}
	if notImpl == "" && ann[annotations.NotImplemented] != "" {
		same = false
	}
	for _, p := range annotations.AttachmentProviders(ann) {
		if _, still := extra[annotations.ProviderKey(p, annotations.KeyAllocated)]; !still {
			same = false // an attachment let go: the apply removes its keys
		}
	}
	if same {
		r.cfg.IPs.Queue("pod/" + key)
		return nil
	}
	// Server-side apply: the controller's field manager then owns every
	// key it confirms, also the values a user set before (static address,
	// chosen subnet), which a merge patch that changes nothing would leave
	// with the user. The node honours only keys the controller owns
	// (cni/README.md, Trust). A key the controller applied before and now
	// leaves out (NotImplemented once nothing is) is removed by the apply.
	// The uid makes a replaced pod's apply invalid.
	patch, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": pod.UID, "annotations": want}})
	force := true
	_, err := r.cfg.Kube.CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, patch, metav1.PatchOptions{FieldManager: annotations.ControllerFieldManager, Force: &force})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
		// Gone or replaced: the next event for the key decides.
		return nil
	}
	if err != nil {
		return fmt.Errorf("annotating pod %s: %w", key, err)
	}
	r.m.allocated.Inc()
	r.cfg.Subnets.AddressesChanged(a.Subnet)
	r.cfg.IPs.Queue("pod/" + key)
	return nil
}

// ipamMessage is an IPAM error without its kind prefix (the event reason carries it).
func ipamMessage(err error) string {
	var ie *ipam.Error
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return err.Error()
}

// fail records why a pod got no address: an event on the pod, a metric,
// and (for exhaustion and conflicts) a wait on the subnet until an address is freed.
func (r *Reconciler) fail(pod *corev1.Pod, subnet string, k ipam.Kind, msg string) {
	r.m.failures.WithLabelValues(string(k)).Inc()
	r.cfg.Recorder.Event(pod, corev1.EventTypeWarning, string(k), msg)
	key := pod.Namespace + "/" + pod.Name
	if subnet != "" {
		r.wait(subnet, key, k)
		if k == ipam.KindExhausted {
			r.cfg.Subnets.AddressesChanged(subnet)
		}
	}
}

// release lets go of what a pod gone (pod nil) or finished held: its own
// address and port, and, when it ran a virtual machine, the VM's once no
// other pod runs it.
func (r *Reconciler) release(ctx context.Context, key string, pod *corev1.Pod) error {
	ns, name, _ := strings.Cut(key, "/")
	vm := r.vmOfGone(key, pod)
	if err := r.releasePod(ctx, ns, name); err != nil || vm == "" {
		return err
	}
	return r.releaseVMPod(ctx, ns, name, vm)
}

func (r *Reconciler) releasePod(ctx context.Context, ns, name string) error {
	owner := ovnnet.PodOwner(ns, name)
	a, had := r.cfg.IPAM.Lookup(owner)
	if err := r.releaseAttachments(ctx, ns, name, nil, nil); err != nil {
		return err
	}
	if err := r.cfg.Net.DeletePod(ctx, ns, name); err != nil {
		return err
	}
	r.cfg.IPs.Queue("pod/" + ns + "/" + name)
	if had {
		r.addressReleased(a.Subnet)
	}
	return nil
}

// addressReleased tells what waits on a subnet's addresses that one was
// given back: its status counts, the pods waiting for a free address, and
// a Subnet waiting to be deleted.
func (r *Reconciler) addressReleased(subnet string) {
	r.cfg.Subnets.AddressesChanged(subnet)
	r.Wake(subnet)
	r.cfg.Subnets.Released(subnet)
}

// subnetChoice is the subnet chosen for a pod, by what, and its
// namespace's labels (nil: the namespace is not known).
type subnetChoice struct {
	subnet, by string
	nsLabels   labels.Set
}

// subnetForPod: pod annotation, namespace annotation, then what the
// Subnets say of the namespace (a Subnet listing or selecting it, the
// default). Whichever chose it, the Subnet must admit the namespace
// (admitted).
func (r *Reconciler) subnetForPod(p *corev1.Pod) subnetChoice {
	var nsLabels labels.Set
	ns, err := r.nss.Get(p.Namespace)
	if err == nil {
		nsLabels = ns.Labels
		if nsLabels == nil {
			nsLabels = labels.Set{}
		}
	}
	if s := p.Annotations[annotations.LogicalSwitch]; s != "" {
		return subnetChoice{subnet: s, by: "the pod's " + annotations.LogicalSwitch + " annotation", nsLabels: nsLabels}
	}
	if err == nil {
		if s := ns.Annotations[annotations.LogicalSwitch]; s != "" {
			return subnetChoice{subnet: s, by: fmt.Sprintf("namespace %q's %s annotation", p.Namespace, annotations.LogicalSwitch), nsLabels: nsLabels}
		}
	}
	return subnetChoice{subnet: r.cfg.Subnets.SubnetFor(p.Namespace, nsLabels), by: "the Subnets' namespace bindings", nsLabels: nsLabels}
}

// unimplemented lists (sorted, comma-separated) the pod's annotations that
// ovnhost does not implement.
func unimplemented(p *corev1.Pod) string {
	var out []string
	for _, k := range annotations.Unimplemented {
		if _, ok := p.Annotations[k]; ok {
			out = append(out, k)
		}
	}
	// port_security "true" is what every ovnhost port has; "false" would
	// let the pod send from any address, and its author is not trusted.
	if p.Annotations[annotations.PortSecurity] == "false" {
		out = append(out, annotations.PortSecurity)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// statefulSetOrdinal is a StatefulSet pod's ordinal (the number after the
// last "-" of its name), else -1: Kube-OVN gives such a pod the ip_pool
// entry of that index, other pods the first free one.
func statefulSetOrdinal(p *corev1.Pod) int {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "StatefulSet" {
		return -1
	}
	i := strings.LastIndex(p.Name, "-")
	n, err := strconv.Atoi(p.Name[i+1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// nodeOfPortName is the node whose join port is (or would be) named port,
// if that node exists: a pod port "node-<x>" equals node <x>'s. A pod that
// holds the port already (it came first; the node took AltNodePortName)
// keeps it: then "".
func (r *Reconciler) nodeOfPortName(ctx context.Context, port, owner string) string {
	rest, ok := strings.CutPrefix(port, "node-")
	if !ok {
		return ""
	}
	if _, err := r.nodes.Get(rest); err != nil {
		return ""
	}
	if p, ok, err := r.cfg.NB.GetPort(ctx, port); err == nil && ok && ovnnb.OwnerOf(p.ExternalIDs) == owner {
		return ""
	}
	return rest
}
