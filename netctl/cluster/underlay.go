package cluster

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// UnderlayPlacement finds pods of underlay Subnets (the controller's
// ovn.kubernetes.io/provider_network annotation) on nodes where that
// provider network is not ready (the node's label
// <network>.provider-network.kubernetes.io/ready): their CNI ADD fails
// there, or a pod wired before the network went is cut off from its VLAN.
// One finding per pod that is misplaced, and one pass per provider
// network whose pods all run where it is ready.
func UnderlayPlacement(pods []corev1.Pod, nodes []corev1.Node) []Finding {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var out []Finding
	placed := map[string]int{}
	bad := map[string]bool{}
	for _, p := range pods {
		pn := p.Annotations[annotations.ProviderNetwork]
		if pn == "" || p.Spec.NodeName == "" || p.Spec.HostNetwork || p.DeletionTimestamp != nil {
			continue
		}
		n := byName[p.Spec.NodeName]
		if n == nil {
			continue // the pod check says the node is missing
		}
		if n.Labels[pn+providernet.ReadyLabel] == "true" {
			placed[pn]++
			continue
		}
		bad[pn] = true
		why := "the node does not carry the network (no " + pn + providernet.ReadyLabel + " label: not selected, excluded, or no ovnhost there)"
		if n.Labels[pn+providernet.ReadyLabel] == "false" {
			why = "the network is not ready there"
			if e := n.Annotations[pn+providernet.ErrorAnnotation]; e != "" {
				why += ": " + e
			}
		}
		out = append(out, Finding{Severity: Fail, Scope: "pod/" + p.Namespace + "/" + p.Name, Check: "underlay-placement",
			Found: fmt.Sprintf("on node %s, but its Subnet %s is on provider network %s and %s; the pod has no way onto its VLAN", p.Spec.NodeName, p.Annotations[annotations.LogicalSwitch], pn, why),
			Fix:   fmt.Sprintf("run the pod where the network is ready (nodeSelector %s%s: \"true\"), or fix the network on %s (netctl doctor there)", pn, providernet.ReadyLabel, p.Spec.NodeName)})
	}
	var names []string
	for pn := range placed {
		if !bad[pn] {
			names = append(names, pn)
		}
	}
	sort.Strings(names)
	for _, pn := range names {
		out = append(out, Finding{Severity: Pass, Scope: "cluster", Check: "underlay-placement",
			Found: fmt.Sprintf("the %d pod(s) of provider network %s run on nodes where it is ready", placed[pn], pn)})
	}
	return out
}
