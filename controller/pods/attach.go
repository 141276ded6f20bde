package pods

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/controller/attachments"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Attachment networks (Kube-OVN's provider Subnets through Multus): a pod's
// k8s.v1.cni.cncf.io/networks names NADs; those of the OVN plugin name a
// provider, whose Subnet gives the pod one more address and port
// ("<pod>.<ns>.<provider>"). Their annotations go in the same apply as the
// default network's.

// NADs reads NetworkAttachmentDefinitions (the controller's informer).
type NADs interface {
	// Config is a NAD's spec.config; found false when it does not exist.
	Config(namespace, name string) (config string, found bool, err error)
}

// providerWait is the waiting key of pods whose NAD names a provider no
// Subnet has yet: woken when a Subnet of that provider is programmed.
func providerWait(provider string) string { return "provider:" + provider }

// attach allocates the pod's attachment networks and returns their
// annotations; false (no error) when one was refused (an event says why,
// the pod gets no annotations until it is fixed). Attachments the pod held
// and no longer asks for are released.
func (r *Reconciler) attach(ctx context.Context, pod *corev1.Pod, nsLabels map[string]string) (map[string]string, bool, error) {
	key := pod.Namespace + "/" + pod.Name
	var atts []attachments.Attachment
	if r.cfg.NADs != nil && pod.Annotations[annotations.NetworksAnnotation] != "" {
		var err error
		atts, err = attachments.Resolve(pod.Namespace, pod.Annotations, attachments.Lookups{
			NAD: r.cfg.NADs.Config, SubnetsOf: r.cfg.Subnets.SubnetsOf, ProviderOf: r.cfg.Subnets.ProviderOf})
		var ref *attachments.Refusal
		if errors.As(err, &ref) {
			r.failAttachment(pod, ref)
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	want := map[string]string{}
	var keep []string
	for _, a := range atts {
		if ok, rule := r.cfg.Subnets.Admits(a.Subnet, pod.Namespace, nsLabels); !ok {
			r.fail(pod, "", "SubnetNotAllowed", fmt.Sprintf("attachment network %s (NetworkAttachmentDefinition %s): subnet %q does not admit namespace %q: %s; "+
				"remove the network from the pod's %s annotation, or an admin adds %q to the Subnet's spec.namespaces",
				a.Provider, a.NAD.Ref(), a.Subnet, pod.Namespace, rule, annotations.NetworksAnnotation, pod.Namespace))
			return nil, false, nil
		}
		owner := ovnnet.AttachmentOwner(pod.Namespace, pod.Name, a.Provider)
		if r.cfg.Subnets.Terminating(a.Subnet) {
			if held, ok := r.cfg.IPAM.Lookup(owner); !ok || held.Subnet != a.Subnet {
				r.fail(pod, "", "SubnetTerminating", fmt.Sprintf("attachment network %s: subnet %q is being deleted; it hands out no new addresses: name another Subnet of that provider with %s",
					a.Provider, a.Subnet, annotations.ProviderKey(a.Provider, annotations.KeyLogicalSwitch)))
				return nil, false, nil
			}
		}
		if prob := r.cfg.Subnets.Problem(a.Subnet); prob != nil {
			r.fail(pod, a.Subnet, "SubnetNotValid", fmt.Sprintf("attachment network %s: subnet %q is not valid (%s: %s); fix the Subnet and the pod gets its address", a.Provider, a.Subnet, prob.Reason, prob.Message))
			return nil, false, nil
		}
		alloc, ok, err := r.allocateAttachment(ctx, pod, a)
		if !ok || err != nil {
			return nil, false, err
		}
		r.remember(key, a.Provider)
		keep = append(keep, a.Provider)
		for k, v := range map[string]string{annotations.KeyAllocated: "true", annotations.KeyIPAddress: alloc.IPString(), annotations.KeyMACAddress: alloc.MAC,
			annotations.KeyCIDR: alloc.CIDR, annotations.KeyGateway: alloc.Gateway, annotations.KeyLogicalSwitch: alloc.Subnet} {
			want[annotations.ProviderKey(a.Provider, k)] = v
		}
	}
	if err := r.releaseAttachments(ctx, pod.Namespace, pod.Name, keep, annotations.AttachmentProviders(pod.Annotations)); err != nil {
		return nil, false, err
	}
	return want, true, nil
}

// allocateAttachment takes the attachment's address (static from
// "<provider>.kubernetes.io/ip_address"/"mac_address") and writes its port.
func (r *Reconciler) allocateAttachment(ctx context.Context, pod *corev1.Pod, a attachments.Attachment) (ipam.Allocation, bool, error) {
	ann := pod.Annotations
	ipKey, macKey := annotations.ProviderKey(a.Provider, annotations.KeyIPAddress), annotations.ProviderKey(a.Provider, annotations.KeyMACAddress)
	var ips []netip.Addr
	if s := ann[ipKey]; s != "" {
		var err error
		if ips, err = ipam.ParseIPs(s); err != nil {
			r.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: %v", ipKey, s, err))
			return ipam.Allocation{}, false, nil
		}
	}
	req := ovnnet.PodRequest{Namespace: pod.Namespace, Name: pod.Name, Subnet: a.Subnet, IPs: ips, MAC: ann[macKey],
		Node: pod.Spec.NodeName, PoolIndex: -1, Provider: a.Provider}
	recorded := ann[annotations.ProviderKey(a.Provider, annotations.KeyAllocated)] == "true" && ann[ipKey] != ""
	alloc, err := r.cfg.Net.AddPod(ctx, req)
	if err != nil && recorded && ipam.KindOf(err) != "" {
		owner := ovnnet.AttachmentOwner(pod.Namespace, pod.Name, a.Provider)
		if held, ok := r.cfg.IPAM.Lookup(owner); !ok || held.IPString() != ann[ipKey] {
			r.cfg.Recorder.Eventf(pod, corev1.EventTypeWarning, "AddressReassigned",
				"attachment network %s: recorded address %s cannot be kept (%v); allocating a new one", a.Provider, ann[ipKey], err)
			req.IPs, req.MAC = nil, ""
			alloc, err = r.cfg.Net.AddPod(ctx, req)
		}
	}
	prefix := fmt.Sprintf("attachment network %s (NetworkAttachmentDefinition %s, subnet %q): ", a.Provider, a.NAD.Ref(), a.Subnet)
	switch {
	case err == nil:
		return alloc, true, nil
	case ipam.KindOf(err) != "":
		r.fail(pod, a.Subnet, ipam.KindOf(err), prefix+ipamMessage(err))
	case errors.Is(err, ovnnb.ErrNoSwitch):
		r.fail(pod, a.Subnet, ipam.KindUnknownSubnet, prefix+err.Error())
	case errors.Is(err, ovnnb.ErrNotOwner):
		r.fail(pod, "", "PortNameCollision", prefix+err.Error()+"; rename the pod")
	default:
		return alloc, false, err
	}
	return alloc, false, nil
}

// failAttachment records a refusal of the pod's attachments; a pod whose
// NAD names a provider without Subnet waits for one.
func (r *Reconciler) failAttachment(pod *corev1.Pod, ref *attachments.Refusal) {
	r.fail(pod, "", ipam.Kind(ref.Reason), ref.Message)
	if ref.Provider != "" {
		r.wait(providerWait(ref.Provider), pod.Namespace+"/"+pod.Name, ipam.Kind(ref.Reason))
	}
}

// remember records that the pod holds an attachment (its release needs it
// once the pod object is gone).
func (r *Reconciler) remember(key, provider string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.attached[key], provider) {
		r.attached[key] = append(r.attached[key], provider)
	}
}

// releaseAttachments deletes the pod's attachment ports and addresses
// except those of keep: the ones remembered, annotated (extra) or in the NB.
func (r *Reconciler) releaseAttachments(ctx context.Context, ns, name string, keep, extra []string) error {
	key := ns + "/" + name
	inNB, err := r.cfg.Net.Attachments(ctx, ns, name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	held := append(slices.Clone(r.attached[key]), extra...)
	r.mu.Unlock()
	held = append(held, inNB...)
	slices.Sort(held)
	for _, p := range slices.Compact(held) {
		if slices.Contains(keep, p) {
			continue
		}
		a, had := r.cfg.IPAM.Lookup(ovnnet.AttachmentOwner(ns, name, p))
		if err := r.cfg.Net.DeleteAttachment(ctx, ns, name, p); err != nil {
			return err
		}
		if had {
			r.addressReleased(a.Subnet)
		}
	}
	r.mu.Lock()
	if len(keep) == 0 {
		delete(r.attached, key)
	} else {
		r.attached[key] = slices.Clone(keep)
	}
	r.mu.Unlock()
	return nil
}

// attachmentSubnetRefusal: the pod's default network was given an
// attachment network's Subnet ("" when it was not).
func attachmentSubnetRefusal(subnet, provider, by string) string {
	if !annotations.IsAttachmentProvider(provider) {
		return ""
	}
	return fmt.Sprintf("subnet %q (chosen by %s) is the attachment network of provider %q; a pod's default network (eth0) cannot use it: "+
		"name a Subnet with provider ovn in the %s annotation, and reach %q through a NetworkAttachmentDefinition with that provider in %s",
		subnet, by, provider, annotations.LogicalSwitch, subnet, annotations.NetworksAnnotation)
}
