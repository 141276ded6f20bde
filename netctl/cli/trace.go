package cli

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

var portGroupRef = regexp.MustCompile(`@(?:\d+_)?(np_[A-Za-z0-9_]+_[0-9a-f]{32})`)

// traceOutput is what trace prints as JSON/YAML.
type traceOutput struct {
	From      string           `json:"from"`
	Node      string           `json:"node"`
	Dest      string           `json:"dest"`
	Verdict   api.TraceVerdict `json:"verdict"`
	Policies  []string         `json:"networkPolicies,omitempty"`
	Microflow string           `json:"microflow"`
	Logical   string           `json:"logical,omitempty"`
	Physical  string           `json:"physical,omitempty"`
}

func (a *app) traceCommand() *cobra.Command {
	var verbose bool
	var srcMAC, dstMAC string
	c := &cobra.Command{
		Use:   "trace NAMESPACE/POD DEST [tcp|udp|icmp] [PORT]",
		Short: "Trace a packet from a pod: logical path (ovn-trace) and physical path (ofproto/trace) on its node",
		Long: `Traces a packet from the pod to DEST (an IPv4 address or NAMESPACE/POD) on the
pod's node, through its daemon's API: ovn-trace against the southbound
database for the logical path, ofproto/trace on br-int for the physical path.
Says where the packet is dropped and which ACL (and NetworkPolicy) or load
balancer touched it. Exit 0 when the packet is delivered, 1 when it is
dropped (or the trace failed).`,
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
			if req.Dst, err = a.traceDest(cmd, k, src, args[1], &req); err != nil {
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
			out := traceOutput{From: ns + "/" + name, Node: src.Spec.NodeName, Dest: args[1], Verdict: res.Verdict, Microflow: res.Microflow}
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
	c.Flags().StringVar(&dstMAC, "dst-mac", "", "next hop's MAC (default: the peer pod's MAC on the same subnet, else the subnet's router port)")
	a.addOutputFlag(c)
	return c
}

// traceDest resolves DEST: an IPv4 address, or NAMESPACE/POD (then a peer
// on the same subnet is reached directly at its MAC).
func (a *app) traceDest(cmd *cobra.Command, k *kube, src *corev1.Pod, dest string, req *api.TraceRequest) (string, error) {
	if ip, err := netip.ParseAddr(dest); err == nil {
		if !ip.Is4() {
			return "", usageErrorf("destination %q: IPv4 only", dest)
		}
		// A pod address on the same subnet is reached at that pod's MAC.
		if req.DstMAC == "" {
			pods, err := k.kc.CoreV1().Pods("").List(cmd.Context(), metav1.ListOptions{})
			if err == nil {
				for _, p := range pods.Items {
					if p.Annotations[annotations.IPAddress] == dest && p.Annotations[annotations.LogicalSwitch] == src.Annotations[annotations.LogicalSwitch] {
						req.DstMAC = p.Annotations[annotations.MACAddress]
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
	ip := strings.Split(p.Annotations[annotations.IPAddress], ",")[0]
	if ip == "" {
		return "", failure(fmt.Errorf("destination pod %s has no address yet", dest))
	}
	if req.DstMAC == "" && p.Annotations[annotations.LogicalSwitch] == src.Annotations[annotations.LogicalSwitch] {
		req.DstMAC = p.Annotations[annotations.MACAddress]
	}
	return ip, nil
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
	fmt.Fprintf(w, "Trace %s (node %s) -> %s\n  microflow: %s\n\n", t.From, t.Node, t.Dest, t.Microflow)
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
