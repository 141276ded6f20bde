package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// syncNode gives a node its join address and port (and annotations), or
// releases them once the node is gone.
func (r *Reconciler) syncNode(ctx context.Context, name string) error {
	node, err := r.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		a, had := r.cfg.IPAM.Lookup(ovnnet.NodeOwner(name))
		if err := r.cfg.Net.DeleteNode(ctx, name); err != nil {
			return err
		}
		r.cfg.IPs.Queue("node/" + name)
		if had {
			r.cfg.Subnets.AddressesChanged(a.Subnet)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var internal []netip.Addr
	for _, ad := range node.Status.Addresses {
		if ad.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(ad.Address); err == nil {
				internal = append(internal, ip)
			}
		}
	}
	req := ovnnet.NodeRequest{Name: name, InternalIPs: internal, MAC: node.Annotations[annotations.MACAddress]}
	if ips, err := ipam.ParseIPs(node.Annotations[annotations.IPAddress]); err == nil {
		req.IPs = ips
	}
	a, err := r.cfg.Net.AddNode(ctx, req)
	if err != nil {
		if k := ipam.KindOf(err); k != "" {
			r.cfg.Recorder.Event(node, corev1.EventTypeWarning, string(k), err.Error())
			return nil
		}
		return err
	}
	port, err := r.cfg.Net.NodePort(ctx, name)
	if err != nil {
		return err
	}
	if port != ovnnet.NodePortName(name) && node.Annotations[annotations.PortName] != port {
		// Once, when the annotation moves to the other name.
		r.cfg.Recorder.Eventf(node, corev1.EventTypeWarning, "PortNameCollision",
			"logical switch port %s belongs to a pod; this node's join port is %s (annotation %s)", ovnnet.NodePortName(name), port, annotations.PortName)
	}
	want := map[string]string{
		annotations.Allocated: "true", annotations.IPAddress: a.IPString(), annotations.MACAddress: a.MAC,
		annotations.CIDR: a.CIDR, annotations.Gateway: a.Gateway, annotations.LogicalSwitch: a.Subnet,
		annotations.PortName: port,
	}
	// A node renamed node_<name> gets no IP object: "_" is not allowed in an
	// object name, and node-<name> is the pod's that holds that port name.
	r.cfg.IPs.Queue("node/" + name)
	same := true
	for k, v := range want {
		if node.Annotations[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
	if _, err := r.cfg.Kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: annotations.ControllerFieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating node %s: %w", name, err)
	}
	r.cfg.Subnets.AddressesChanged(a.Subnet)
	return nil
}
