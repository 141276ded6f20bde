package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

func (a *app) podCommand() *cobra.Command {
	c := &cobra.Command{
		Use:               "pod NAMESPACE/POD",
		Short:             "One pod's wiring: node, chassis, logical switch port, OVS port, QoS, addresses",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completePods,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			ns, name, err := k.podRef(args[0])
			if err != nil {
				return err
			}
			p, err := k.kc.CoreV1().Pods(ns).Get(cmd.Context(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return failure(fmt.Errorf("pod %s/%s not found", ns, name))
			}
			if err != nil {
				return failure(fmt.Errorf("pod %s/%s: %w", ns, name, err))
			}
			var node *corev1.Node
			if p.Spec.NodeName != "" {
				node, _ = k.kc.CoreV1().Nodes().Get(cmd.Context(), p.Spec.NodeName, metav1.GetOptions{})
			}
			info := cluster.Pod(p, node)
			if !p.Spec.HostNetwork {
				info.Attachments, _ = podAttachments(cmd.Context(), k, p)
			}
			if node != nil && !p.Spec.HostNetwork {
				a.podFromNode(cmd, k, node, info)
				if nc, err := nodeclient.For(k.rest, node, nodeTimeout, k.tokens); err == nil {
					_ = attachmentsFromNode(cmd.Context(), nc, info.Attachments)
				}
			}
			if a.output == OutJSON || a.output == OutYAML {
				return Print(a.streams.Out, a.output, info, nil)
			}
			writePod(a.streams.Out, info)
			return nil
		},
	}
	a.addOutputFlag(c)
	return c
}

func writePod(w interface{ Write([]byte) (int, error) }, i *cluster.PodInfo) {
	pr := func(k, v string) {
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(w, "%-18s %s\n", k+":", v)
	}
	pr("Pod", i.Namespace+"/"+i.Name)
	pr("Node", i.Node)
	if i.HostNetwork {
		pr("Network", "host network: no OVN port")
		return
	}
	pr("Chassis", i.Chassis)
	pr("Logical port", i.LSP)
	pr("Subnet", i.Subnet)
	pr("VPC (router)", i.Router)
	pr("IP", i.IP)
	pr("MAC", i.MAC)
	pr("CIDR / gateway", i.CIDR+" via "+i.Gateway)
	state := []string{}
	if i.Allocated {
		state = append(state, "allocated")
	} else {
		state = append(state, "NOT allocated")
	}
	if i.Routed {
		state = append(state, "routed")
	}
	pr("Controller", strings.Join(state, ", "))
	qos := ""
	if i.IngressRate != "" {
		qos += "ingress " + i.IngressRate + " Mbit/s "
	}
	if i.EgressRate != "" {
		qos += "egress " + i.EgressRate + " Mbit/s"
	}
	pr("QoS (annotations)", strings.TrimSpace(qos))
	if i.NodeError != "" {
		pr("Node side", "unknown: "+i.NodeError)
		return
	}
	if o := i.OVS; o != nil {
		if o.Error != "" {
			pr("OVS port", o.Error)
		} else {
			pr("OVS port", fmt.Sprintf("%s ofport %d, ovn-installed=%v", o.Interface, o.OFPort, o.OVNInstalled))
			if o.Ingress > 0 {
				pr("OVS policing", fmt.Sprintf("ingress_policing_rate %d kbit/s burst %d kbit", o.Ingress, o.IngressBurst))
			}
			if len(o.QoS) > 0 {
				pr("OVS QoS", fmt.Sprint(o.QoS))
			}
		}
	}
	if i.Bound != "" {
		pr("Bound to chassis", i.Bound)
	}
	for _, at := range i.Attachments {
		name := at.Interface
		if name == "" {
			name = "(not listed)"
		}
		fmt.Fprintf(w, "\nAttachment %s (NAD %s, provider %s)\n", name, at.NAD, at.Provider)
		pr("  Logical port", at.LSP)
		pr("  Subnet", at.Subnet)
		addr := at.IP + " " + at.MAC
		if !at.Allocated {
			addr = "NOT allocated"
		}
		pr("  Address", strings.TrimSpace(addr))
		switch o := at.OVS; {
		case o == nil:
		case o.Error != "":
			pr("  OVS port", o.Error)
		default:
			pr("  OVS port", fmt.Sprintf("%s ofport %d, ovn-installed=%v", o.Interface, o.OFPort, o.OVNInstalled))
		}
		if at.Bound != "" {
			pr("  Bound to chassis", at.Bound)
		}
	}
}
