package cli

import (
	"context"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

// nadGVR is Multus's NetworkAttachmentDefinition.
var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// podAttachments lists the pod's attachment networks with the providers
// their NADs name (a NAD that cannot be read is taken as Kube-OVN's
// "<name>.<namespace>.ovn").
func podAttachments(ctx context.Context, k *kube, p *corev1.Pod) ([]*cluster.Attachment, error) {
	sels, _ := cluster.ParseNetworks(p.Annotations[annotations.NetworksAnnotation], p.Namespace)
	providers := map[string]string{}
	for _, s := range sels {
		u, err := k.dc.Resource(nadGVR).Namespace(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		cfg, _, _ := unstructuredString(u.Object, "spec", "config")
		providers[s.Namespace+"/"+s.Name] = cluster.NADProvider(cfg)
	}
	return cluster.Attachments(p, providers)
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// attachmentsFromNode fills each allocated attachment's OVS interface and
// SB binding through the pod's node daemon ("" or why it did not answer).
func attachmentsFromNode(ctx context.Context, nc *nodeclient.Client, atts []*cluster.Attachment) string {
	for _, at := range atts {
		if !at.Allocated {
			continue
		}
		res, err := nc.OVSDB(ctx, api.OVSDBRequest{DB: "Open_vSwitch", Args: []string{"find", "Interface", "external_ids:iface-id=" + at.LSP}})
		if err != nil {
			return err.Error()
		}
		if len(res.Rows) == 0 {
			at.OVS = &cluster.OVSPort{Error: "no OVS interface with external_ids:iface-id=" + at.LSP + " on node " + nc.Node}
			continue
		}
		r := res.Rows[0]
		ids := cluster.Map(r["external_ids"])
		ofport, _ := strconv.Atoi(cluster.Opt(r["ofport"]))
		at.OVS = &cluster.OVSPort{Interface: cluster.Text(r["name"]), OFPort: ofport, OVNInstalled: ids["ovn-installed"] == "true", ExternalIDs: ids}
		pbs, err := nc.OVSDB(ctx, api.OVSDBRequest{DB: "OVN_Southbound", Args: []string{"find", "Port_Binding", "logical_port=" + at.LSP}})
		if err != nil || len(pbs.Rows) == 0 {
			continue
		}
		ch := cluster.Opt(pbs.Rows[0]["chassis"])
		if ch == "" {
			continue
		}
		chs, err := nc.OVSDB(ctx, api.OVSDBRequest{DB: "OVN_Southbound", Args: []string{"find", "Chassis", "_uuid=" + ch}})
		if err == nil && len(chs.Rows) > 0 {
			at.Bound = cluster.Text(chs.Rows[0]["name"])
		}
	}
	return ""
}

// podNetworkChecks: the VPC of the pod's Subnet and of each attachment's,
// their switches attached to the VPC's router, a custom VPC's routes,
// policies and peerings (vpc show's findings), and each attachment's
// address, OVS port and binding.
func (a *app) podNetworkChecks(ctx context.Context, k *kube, p *corev1.Pod, node *corev1.Node, info *cluster.PodInfo) []cluster.Finding {
	scope := "pod/" + p.Namespace + "/" + p.Name
	var out []cluster.Finding
	atts, err := podAttachments(ctx, k, p)
	if err != nil {
		out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "attachment-networks", Found: err.Error(),
			Fix: "fix the pod's " + annotations.NetworksAnnotation + " annotation"})
	}
	nc, ncErr := nodeclient.For(k.rest, node, nodeTimeout, k.tokens)
	nodeErr := ""
	if ncErr != nil {
		nodeErr = ncErr.Error()
	} else {
		nodeErr = attachmentsFromNode(ctx, nc, atts)
	}
	chassis := ""
	if node != nil {
		chassis = node.Annotations[annotations.Chassis]
	}
	out = append(out, cluster.AttachmentChecks(scope, node.Name, chassis, atts, nodeErr)...)

	// The VPCs of the pod's networks.
	sl, err := k.dc.Resource(kubeovnv1.SubnetGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(out, cluster.Finding{Severity: cluster.Warn, Scope: scope, Check: "pod-vpc", Found: "cannot list subnets.kubeovn.io: " + err.Error()})
	}
	subnetVpc := map[string]string{}
	routed := map[string]bool{}
	for i := range sl.Items {
		if s, err := kubeovnv1.FromUnstructured(&sl.Items[i]); err == nil {
			subnetVpc[s.Name] = cluster.SubnetVpc(s)
			routed[s.Name] = cluster.RoutedSubnet(s)
		}
	}
	switches := []string{}
	if info.Subnet != "" {
		if vpc, ok := subnetVpc[info.Subnet]; ok {
			info.Vpc = vpc
			out = append(out, cluster.PodVpcCheck(scope, p, vpc))
			switches = append(switches, info.Subnet)
		} else {
			out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-vpc", Found: "the pod's Subnet " + info.Subnet + " does not exist",
				Fix: "recreate the pod so it gets an address in an existing Subnet"})
		}
	}
	for _, at := range atts {
		if at.Subnet != "" && subnetVpc[at.Subnet] != "" {
			switches = append(switches, at.Subnet)
		}
	}
	if len(switches) == 0 {
		return out
	}
	var topo *cluster.Topology
	if nc != nil {
		topo, err = nbTopology(ctx, nc)
	}
	if topo == nil {
		why := nodeErr
		if err != nil {
			why = err.Error()
		}
		return append(out, cluster.Finding{Severity: cluster.Warn, Scope: scope, Check: "pod-vpc", Found: "the NB was not read, the VPC's router not checked: " + why})
	}
	vpcsSeen := map[string]bool{}
	for _, sw := range switches {
		vpc := subnetVpc[sw]
		if routed[sw] {
			out = append(out, cluster.SwitchAttachment(sw, vpc, topo))
		}
		if kubeovnv1.IsCustomVpc(vpc) && !vpcsSeen[vpc] {
			vpcsSeen[vpc] = true
			out = append(out, a.vpcFindings(ctx, k, vpc, sl.Items, topo)...)
		}
	}
	return out
}

// vpcFindings are vpc show's findings of one custom VPC (its Subnets'
// attachments left out: the pod's are checked on their own).
func (a *app) vpcFindings(ctx context.Context, k *kube, vpc string, subnets []unstructured.Unstructured, topo *cluster.Topology) []cluster.Finding {
	u, err := k.dc.Resource(kubeovnv1.VpcGVR).Get(ctx, vpc, metav1.GetOptions{})
	if err != nil {
		return []cluster.Finding{{Severity: cluster.Fail, Scope: "vpc/" + vpc, Check: "vpc", Found: "Vpc " + vpc + ": " + err.Error(),
			Fix: "create the Vpc, or move the Subnet to an existing one"}}
	}
	infos, _ := cluster.Vpcs([]unstructured.Unstructured{*u}, nil, topo)
	var out []cluster.Finding
	for _, v := range infos {
		for _, f := range v.Findings {
			if !strings.HasPrefix(f.Scope, "subnet/") {
				out = append(out, f)
			}
		}
	}
	return out
}
