package cli

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/netctl/cluster"
)

var portGroupRef = regexp.MustCompile(`@(?:\d+_)?(np_[A-Za-z0-9_]+_[0-9a-f]{32})`)

// traceOutput is what trace prints as JSON/YAML.
type traceOutput struct {
	From      string           `json:"from"`
	Node      string           `json:"node"`
	Dest      string           `json:"dest"`
	Interface string           `json:"interface,omitempty"` // an attachment's (net1 ...); "" for eth0
	Port      string           `json:"logicalPort"`
	Vpc       string           `json:"vpc,omitempty"`
	Path      []string         `json:"path,omitempty"`    // the logical datapaths the packet passes
	Routers   []string         `json:"routers,omitempty"` // those of the path that are VPC routers
	Verdict   api.TraceVerdict `json:"verdict"`
	Policies  []string         `json:"networkPolicies,omitempty"`
	Microflow string           `json:"microflow"`
	Logical   string           `json:"logical,omitempty"`
	Physical  string           `json:"physical,omitempty"`
}

func (a *app) traceCommand() *cobra.Command {
	var verbose bool
	var srcMAC, dstMAC, iface string
	c := &cobra.Command{
		Use:   "trace NAMESPACE/POD DEST [tcp|udp|icmp] [PORT] [--interface net1]",
		Short: "Trace a packet from a pod: logical path (ovn-trace) and physical path (ofproto/trace) on its node",
		Long: `Traces a packet from the pod to DEST (an IPv4 address or NAMESPACE/POD) on the
pod's node, through its daemon's API: ovn-trace against the southbound
database for the logical path, ofproto/trace on br-int for the physical path.
Says where the packet is dropped and which ACL (and NetworkPolicy) or load
balancer touched it, and the logical path (switches and routers: a custom
VPC's pod passes its VPC's router). --interface traces from one of the
pod's attachment networks (net1, its provider or its NAD) instead of
eth0. Exit 0 when the packet is delivered, 1 when it is dropped (or the
trace failed).`,
		Args:              cobra.RangeArgs(2, 4),
		ValidArgsFunction: a.completePods,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			k, err := a.kube()
			if err != nil {
				return err
			}
			ns, name, err := k.podRef(args[0])
			if err != nil {
				return err
			}
			req := api.TraceRequest{Namespace: ns, Pod: name, Protocol: "icmp", SrcMAC: srcMAC, DstMAC: dstMAC}
			if len(args) > 2 {
				req.Protocol = strings.ToLower(args[2])
				if req.Protocol != "tcp" && req.Protocol != "udp" && req.Protocol != "icmp" {
					return usageErrorf("protocol %q: use tcp, udp or icmp", args[2])
				}
			}
			if len(args) > 3 {
				if req.Port, err = strconv.Atoi(args[3]); err != nil || req.Port < 1 || req.Port > 65535 {
					return usageErrorf("port %q: want 1-65535", args[3])
				}
			} else if req.Protocol != "icmp" {
				return usageErrorf("%s needs a PORT", req.Protocol)
			}
			src, err := k.kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return failure(fmt.Errorf("pod %s/%s: %w", ns, name, err))
			}
			if src.Spec.NodeName == "" || src.Spec.HostNetwork {
				return failure(fmt.Errorf("pod %s/%s is not scheduled or uses the host network", ns, name))
			}
			srcIf := podIface{name: "eth0", lsp: name + "." + ns, sw: src.Annotations[annotations.LogicalSwitch]}
			if iface != "" && iface != "eth0" {
				atts, err := podAttachments(ctx, k, src)
				if err != nil {
					return failure(err)
				}
				at, err := cluster.FindAttachment(atts, iface)
				if err != nil {
					return usageErrorf("%v", err)
				}
				if !at.Allocated {
					return failure(fmt.Errorf("pod %s/%s: attachment %s (provider %s) has no address yet; netctl diagnose pod %s/%s says why", ns, name, iface, at.Provider, ns, name))
				}
				srcIf = podIface{name: at.Interface, lsp: at.LSP, sw: at.Subnet}
				req.Provider = at.Provider
			}
			if req.Dst, err = a.traceDest(cmd, k, srcIf, args[1], &req); err != nil {
				return err
			}
			nc, _, err := a.nodeClient(ctx, k, src.Spec.NodeName)
			if err != nil {
				return err
			}
			res, err := nc.Trace(ctx, req)
			if err != nil {
				return queryErr(err)
			}
			if req.Provider != "" && !strings.Contains(res.Microflow, `"`+srcIf.lsp+`"`) {
				return failure(fmt.Errorf("node %s traced another port than %s (microflow %s): its daemon is older than --interface; upgrade ovnhost there", src.Spec.NodeName, srcIf.lsp, res.Microflow))
			}
			out := traceOutput{From: ns + "/" + name, Node: src.Spec.NodeName, Dest: args[1], Verdict: res.Verdict, Microflow: res.Microflow, Port: srcIf.lsp}
			if req.Provider != "" {
				out.Interface = srcIf.name
			}
			out.Vpc, out.Path, out.Routers = a.tracePath(cmd, k, srcIf.sw, res.Logical)
			out.Policies = a.policiesOf(cmd, k, res.Verdict)
			if verbose || a.output == OutJSON || a.output == OutYAML {
				out.Logical, out.Physical = res.Logical, res.Physical
			}
			if a.output == OutJSON || a.output == OutYAML {
				if err := Print(a.streams.Out, a.output, out, nil); err != nil {
					return err
				}
			} else {
				writeTrace(a, &out)
			}
			if !res.Verdict.Delivered {
				return exitCode(ExitFailure)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "print the full ovn-trace and ofproto/trace outputs")
	c.Flags().StringVar(&srcMAC, "src-mac", "", "send from this MAC instead of the pod's (shows what port security does)")
	c.Flags().StringVarP(&iface, "interface", "i", "", "trace from this attachment network of the pod: its interface (net1), provider or NAD (default eth0)")
	c.Flags().StringVar(&dstMAC, "dst-mac", "", "next hop's MAC (default: the peer pod's MAC on the same subnet, else the subnet's router port)")
	a.addOutputFlag(c)
	return c
}

// podIface is the interface a trace starts from: eth0 or an attachment.
type podIface struct {
	name string // eth0, net1 ...
	lsp  string // its logical port
	sw   string // its logical switch (the Subnet)
}

// ifaceAddr is one address of a pod's network: its switch, IP and MAC.
type ifaceAddr struct{ sw, ip, mac string }

// podAddrs are the pod's addresses: eth0's and each attachment's.
func podAddrs(p *corev1.Pod) []ifaceAddr {
	a := p.Annotations
	out := []ifaceAddr{{sw: a[annotations.LogicalSwitch], ip: a[annotations.IPAddress], mac: a[annotations.MACAddress]}}
	for _, prov := range annotations.AttachmentProviders(a) {
		k := func(key string) string { return a[annotations.ProviderKey(prov, key)] }
		out = append(out, ifaceAddr{sw: k(annotations.KeyLogicalSwitch), ip: k(annotations.KeyIPAddress), mac: k(annotations.KeyMACAddress)})
	}
	return out
}

// traceDest resolves DEST: an IPv4 address, or NAMESPACE/POD (its
// address on the source's switch when it has one there, else its eth0
// address). A peer on the source's switch is reached directly at its MAC.
func (a *app) traceDest(cmd *cobra.Command, k *kube, src podIface, dest string, req *api.TraceRequest) (string, error) {
	if ip, err := netip.ParseAddr(dest); err == nil {
		if !ip.Is4() {
			return "", usageErrorf("destination %q: IPv4 only", dest)
		}
		// A pod address on the same switch is reached at that pod's MAC.
		if req.DstMAC == "" {
			pods, err := k.kc.CoreV1().Pods("").List(cmd.Context(), metav1.ListOptions{})
			if err == nil {
				for i := range pods.Items {
					for _, ad := range podAddrs(&pods.Items[i]) {
						if src.sw != "" && ad.sw == src.sw && slices.Contains(strings.Split(ad.ip, ","), dest) {
							req.DstMAC = ad.mac
						}
					}
				}
			}
		}
		return dest, nil
	}
	if !strings.Contains(dest, "/") {
		return "", usageErrorf("destination %q: give an IPv4 address or NAMESPACE/POD", dest)
	}
	dns, dname, _ := strings.Cut(dest, "/")
	p, err := k.kc.CoreV1().Pods(dns).Get(cmd.Context(), dname, metav1.GetOptions{})
	if err != nil {
		return "", failure(fmt.Errorf("destination pod %s: %w", dest, err))
	}
	addrs := podAddrs(p)
	for _, ad := range addrs {
		if src.sw != "" && ad.sw == src.sw && ad.ip != "" {
			if req.DstMAC == "" {
				req.DstMAC = ad.mac
			}
			return strings.Split(ad.ip, ",")[0], nil
		}
	}
	ip := strings.Split(addrs[0].ip, ",")[0]
	if ip == "" {
		return "", failure(fmt.Errorf("destination pod %s has no address yet", dest))
	}
	return ip, nil
}

// tracePath is the VPC of the source's switch and the logical path of the
// trace, with the VPC routers on it.
func (a *app) tracePath(cmd *cobra.Command, k *kube, sw, logical string) (string, []string, []string) {
	path := cluster.TracePath(logical)
	routers := map[string]bool{kubeovnv1.DefaultVpc: true}
	vpc := ""
	if l, err := k.dc.Resource(kubeovnv1.VpcGVR).List(cmd.Context(), metav1.ListOptions{}); err == nil {
		for _, u := range l.Items {
			routers[u.GetName()] = true
		}
	}
	if u, err := k.dc.Resource(kubeovnv1.SubnetGVR).Get(cmd.Context(), sw, metav1.GetOptions{}); err == nil {
		if s, err := kubeovnv1.FromUnstructured(u); err == nil {
			vpc = cluster.SubnetVpc(s)
		}
	}
	return vpc, path, cluster.RoutersOn(path, routers)
}

// policiesOf names the NetworkPolicies whose port groups the touched ACLs
// (or the dropping flow) reference.
func (a *app) policiesOf(cmd *cobra.Command, k *kube, v api.TraceVerdict) []string {
	text := v.DropFlow + "\n" + strings.Join(v.ACLs, "\n")
	refs := portGroupRef.FindAllStringSubmatch(text, -1)
	if len(refs) == 0 {
		return nil
	}
	nps, err := k.kc.NetworkingV1().NetworkPolicies("").List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	byPG := map[string]string{}
	for _, np := range nps.Items {
		byPG[ovnnb.PolicyPortGroup(np.Namespace, np.Name)] = np.Namespace + "/" + np.Name
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range refs {
		if n, ok := byPG[r[1]]; ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func writeTrace(a *app, t *traceOutput) {
	w := a.streams.Out
	from := t.From
	if t.Interface != "" {
		from += " " + t.Interface
	}
	fmt.Fprintf(w, "Trace %s (node %s, port %s) -> %s\n  microflow: %s\n", from, t.Node, t.Port, t.Dest, t.Microflow)
	if t.Vpc != "" {
		fmt.Fprintf(w, "  vpc: %s (router %s)\n", t.Vpc, t.Vpc)
	}
	fmt.Fprintln(w)
	if len(t.Path) > 0 {
		isRouter := map[string]bool{}
		for _, r := range t.Routers {
			isRouter[r] = true
		}
		fmt.Fprintf(w, "PATH:     %s\n", cluster.PathString(t.Path, isRouter))
	}
	v := t.Verdict
	if v.Delivered {
		fmt.Fprintf(w, "LOGICAL:  delivered to %s\n", v.Output)
	} else {
		fmt.Fprintf(w, "LOGICAL:  DROPPED at %s\n          by flow: %s\n", v.DropStage, v.DropFlow)
	}
	for _, acl := range v.ACLs {
		fmt.Fprintf(w, "  ACL:    %s\n", acl)
	}
	for _, np := range t.Policies {
		fmt.Fprintf(w, "  NetworkPolicy: %s\n", np)
	}
	for _, lb := range v.LBs {
		fmt.Fprintf(w, "  LB:     %s\n", lb)
	}
	switch {
	case v.Physical == "":
		fmt.Fprintln(w, "PHYSICAL: no ofproto/trace verdict (see -v)")
	case v.Physical == "drop":
		fmt.Fprintln(w, "PHYSICAL: dropped in the datapath (ofproto/trace on br-int: Datapath actions: drop)")
	default:
		fmt.Fprintf(w, "PHYSICAL: datapath actions %s\n", v.Physical)
	}
	if t.Logical != "" {
		fmt.Fprintf(w, "\n--- ovn-trace ---\n%s\n--- ofproto/trace br-int ---\n%s\n", t.Logical, t.Physical)
	}
}
