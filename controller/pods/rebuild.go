package pods

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Rebuild re-claims every recorded address: nodes, then pods oldest first;
// it returns how many pods' addresses were restored. Pods whose record
// conflicts are queued and get a new address.
func (r *Reconciler) Rebuild(ctx context.Context) (int, error) {
	t0 := time.Now()
	defer func() { r.m.rebuild.Set(time.Since(t0).Seconds()) }()
	// Nodes first: their join ports' MACs are theirs (a pod's annotation,
	// which its author may have written, cannot take a node's MAC away).
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	for _, nd := range nodes {
		a := nd.Annotations
		if ips, err := ipam.ParseIPs(a[annotations.IPAddress]); err == nil {
			if _, err := r.cfg.Net.Restore(ovnnet.NodeOwner(nd.Name), ovnnet.JoinSubnet, ips, a[annotations.MACAddress]); err != nil {
				r.log.Warn("recorded node address not restored; the node gets a new one", "node", nd.Name, "error", err)
			}
		}
	}
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	sort.Slice(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	// Ports written before a crash whose annotation never landed: their
	// addresses are claimed too, so nobody else gets them meanwhile.
	ports, err := r.cfg.NB.Ports(ctx, nil)
	if err != nil {
		return 0, err
	}
	portOf := make(map[string]ovnnb.Port, len(ports))
	attachedPorts := map[string][]ovnnb.Port{} // pod owner -> its attachment ports
	for _, p := range ports {
		if vm := p.ExternalIDs[ovnnb.KeyVM]; vm != "" && p.Switch != "" {
			// A VM's port: its address whichever pod runs it now.
			if _, err := r.cfg.Net.Restore(ovnnet.PortOwnerKey(p.ExternalIDs), p.Switch, p.IPs, p.MAC); err != nil {
				r.log.Warn("virtual machine's port address not restored", "port", p.Name, "error", err)
			}
			continue
		}
		if o := p.ExternalIDs[ovnnb.KeyPod]; o != "" {
			if p.ExternalIDs[ovnnb.KeyProvider] != "" {
				attachedPorts[o] = append(attachedPorts[o], p)
			} else {
				portOf[o] = p
			}
		}
	}
	n := 0
	for _, p := range pods {
		if !reconcile.WantsAddress(p) {
			continue
		}
		owner := ovnnet.PodOwner(p.Namespace, p.Name)
		a := p.Annotations
		r.restoreAttachments(p.Namespace, p.Name, a, attachedPorts[owner])
		if vm, _, _ := vmOf(p); vm != "" && a[annotations.VirtualMachine] == vm {
			// The VM's address (restored from its port above when the
			// port exists; each of its pods records the same).
			r.rememberVM(p.Namespace+"/"+p.Name, vm)
			owner = ovnnet.VMOwner(p.Namespace, vm)
		}
		if a[annotations.Allocated] == "true" && a[annotations.IPAddress] != "" {
			ips, err := ipam.ParseIPs(a[annotations.IPAddress])
			if err == nil {
				_, err = r.cfg.Net.Restore(owner, a[annotations.LogicalSwitch], ips, a[annotations.MACAddress])
			}
			if err != nil {
				r.log.Warn("recorded pod address not restored; the pod gets a new one", "pod", owner, "error", err)
			} else {
				n++
			}
			continue
		}
		if port, ok := portOf[ovnnet.PodOwner(p.Namespace, p.Name)]; ok && owner == ovnnet.PodOwner(p.Namespace, p.Name) && port.Switch != "" && port.Switch != ovnnet.JoinSubnet {
			_, _ = r.cfg.Net.Restore(owner, port.Switch, port.IPs, port.MAC)
		}
	}
	return n, nil
}

// restoreAttachments re-claims a pod's attachment addresses: those its
// annotations record, and those of attachment ports whose annotation
// never landed.
func (r *Reconciler) restoreAttachments(ns, name string, a map[string]string, ports []ovnnb.Port) {
	key := ns + "/" + name
	for _, pr := range annotations.AttachmentProviders(a) {
		owner := ovnnet.AttachmentOwner(ns, name, pr)
		ips, err := ipam.ParseIPs(a[annotations.ProviderKey(pr, annotations.KeyIPAddress)])
		if err == nil {
			_, err = r.cfg.Net.Restore(owner, a[annotations.ProviderKey(pr, annotations.KeyLogicalSwitch)], ips, a[annotations.ProviderKey(pr, annotations.KeyMACAddress)])
		}
		if err != nil {
			r.log.Warn("recorded attachment address not restored; the pod gets a new one", "pod", key, "provider", pr, "error", err)
		}
		r.remember(key, pr)
	}
	for _, port := range ports {
		pr := port.ExternalIDs[ovnnb.KeyProvider]
		owner := ovnnet.AttachmentOwner(ns, name, pr)
		if _, held := r.cfg.IPAM.Lookup(owner); !held && port.Switch != "" {
			_, _ = r.cfg.Net.Restore(owner, port.Switch, port.IPs, port.MAC)
		}
		r.remember(key, pr)
	}
}
