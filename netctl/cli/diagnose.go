package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

type diagOpts struct {
	lease string        // NAMESPACE/NAME of the controller's leader Lease
	grace time.Duration // how long a new pod may wait for its address
}

// diagnosis is what diagnose prints: the findings, worst first, and the
// pinger's latest matrix per node.
type diagnosis struct {
	Findings []cluster.Finding     `json:"findings"`
	Pinger   map[string]PingerView `json:"pinger,omitempty"`
}

func (a *app) diagnoseCommand() *cobra.Command {
	var o diagOpts
	c := &cobra.Command{
		Use:   "diagnose all | node NODE | pod NAMESPACE/POD",
		Short: "Doctor on every node plus the cluster checks, one table worst first (exit 0 pass, 1 warnings, 2 failures)",
		Long: `Runs doctor on each node through its daemon's authenticated API and adds the
cluster checks: the controller's leader Lease, NB/SB reachable from each node
(doctor's nb-reachable/sb-reachable), one chassis per node and no duplicate
chassis or encap IP, Subnet usage and conditions, pods without an address and
the controller's reason, and the pinger's latest matrix. For one pod: its
address, OVS port and binding, its Subnet's switch on its VPC's router
(and a custom VPC's routes, policies and peerings as vpc show checks
them), and each attachment network's (net1 ...) address, OVS port and
binding. Prints one table,
worst first, with the fix. Exit status as doctor: 0 all pass, 1 warnings,
2 failures.`,
	}
	run := func(scope string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			arg := ""
			if len(args) > 0 {
				arg = args[0]
			}
			d, err := a.diagnose(cmd.Context(), k, o, scope, arg)
			if err != nil {
				return err
			}
			if a.output == OutJSON || a.output == OutYAML {
				if err := Print(a.streams.Out, a.output, d, nil); err != nil {
					return err
				}
			} else {
				writeDiagnosis(a, d)
			}
			return exitCode(cluster.ExitCode(d.Findings))
		}
	}
	all := &cobra.Command{Use: "all", Short: "Every node and the cluster checks", Args: cobra.NoArgs, RunE: run("all")}
	node := &cobra.Command{Use: "node NODE", Short: "One node: its doctor, chassis, pods", Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeNodes, RunE: run("node")}
	pod := &cobra.Command{Use: "pod NAMESPACE/POD", Short: "One pod: address, logical port, OVS port, binding, and its node's doctor", Args: cobra.ExactArgs(1), ValidArgsFunction: a.completePods, RunE: run("pod")}
	for _, s := range []*cobra.Command{all, node, pod} {
		a.addOutputFlag(s)
		c.AddCommand(s)
	}
	c.PersistentFlags().StringVar(&o.lease, "controller-lease", "", "NAMESPACE/NAME of the controller's leader Lease (default: ovnhost/ovnhost-controller, then kube-system/ovnhost-controller)")
	c.PersistentFlags().DurationVar(&o.grace, "pod-grace", 10*time.Second, "a pod younger than this without an address is not reported")
	return c
}

func writeDiagnosis(a *app, d *diagnosis) {
	t := &Table{Columns: []Column{{Name: "STATUS"}, {Name: "SCOPE"}, {Name: "CHECK"}, {Name: "FOUND"}, {Name: "FIX"}}}
	for _, f := range d.Findings {
		if f.Severity == cluster.Pass && a.output != OutWide {
			continue
		}
		t.Rows = append(t.Rows, []string{strings.ToUpper(string(f.Severity)), f.Scope, f.Check, f.Found, f.Fix})
	}
	var nf, nw, np int
	for _, f := range d.Findings {
		switch f.Severity {
		case cluster.Fail:
			nf++
		case cluster.Warn:
			nw++
		default:
			np++
		}
	}
	if len(t.Rows) > 0 {
		_ = Print(a.streams.Out, OutTable, nil, t)
	}
	fmt.Fprintf(a.streams.Out, "\n%s: %d failed, %d warnings, %d passed", strings.ToUpper(string(cluster.Worst(d.Findings))), nf, nw, np)
	if a.output != OutWide && np > 0 {
		fmt.Fprint(a.streams.Out, " (-o wide lists the passed checks)")
	}
	fmt.Fprintln(a.streams.Out)
	writePinger(a.streams.Out, d.Pinger)
}

// doctorReport is the part of doctor's JSON diagnose reads.
type doctorReport struct {
	Status string `json:"status"`
	Checks []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Found  string `json:"found"`
		Fix    string `json:"fix"`
	} `json:"checks"`
}

type nodeResult struct {
	findings []cluster.Finding
	client   *nodeclient.Client
	pinger   *PingerView
}

// nodeFindings asks one node's daemon for its status and doctor.
func nodeFindings(ctx context.Context, k *kube, n *corev1.Node) nodeResult {
	scope := "node/" + n.Name
	var r nodeResult
	c, err := nodeclient.For(k.rest, n, nodeTimeout, k.tokens)
	if err != nil {
		sev := cluster.Fail
		if errors.Is(err, nodeclient.ErrNotPublished) {
			sev = cluster.Warn
		}
		r.findings = append(r.findings, cluster.Finding{Severity: sev, Scope: scope, Check: "node-daemon", Found: err.Error(),
			Fix: "start ovnhost on " + n.Name + " (systemctl status ovnhost, or its DaemonSet pod); it needs a Kubernetes client for the node API"})
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		var ne *nodeclient.Error
		fix := "check ovnhost on " + n.Name + ": systemctl status ovnhost / journalctl -u ovnhost, or kubectl -n kube-system logs of its ovnhost pod"
		if errors.As(err, &ne) && (ne.Status == 401 || ne.Status == 403) {
			fix = "grant the ClusterRole ovnhost-netctl (packaging/kubernetes/base/rbac-netctl.yaml) to your user"
		}
		r.findings = append(r.findings, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "node-daemon", Found: err.Error(), Fix: fix})
		return r
	}
	r.client = c
	if st.Ready {
		r.findings = append(r.findings, cluster.Finding{Severity: cluster.Pass, Scope: scope, Check: "node-ready", Found: "ovnhost " + st.Version + " ready, up " + st.Uptime})
	} else {
		r.findings = append(r.findings, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "node-ready", Found: "ovnhost not ready: " + st.Status,
			Fix: "netctl status on the node; the doctor findings below name the cause"})
	}
	var rep doctorReport
	if _, err := c.Doctor(ctx, &rep); err != nil {
		r.findings = append(r.findings, cluster.Finding{Severity: cluster.Warn, Scope: scope, Check: "doctor", Found: "doctor did not run: " + err.Error()})
	} else {
		passed := 0
		for _, ch := range rep.Checks {
			if ch.Status == "pass" {
				passed++
				continue
			}
			sev := cluster.Warn
			if ch.Status == "fail" {
				sev = cluster.Fail
			}
			r.findings = append(r.findings, cluster.Finding{Severity: sev, Scope: scope, Check: ch.Name, Found: ch.Found, Fix: ch.Fix})
		}
		r.findings = append(r.findings, cluster.Finding{Severity: cluster.Pass, Scope: scope, Check: "doctor", Found: fmt.Sprintf("%d of %d doctor checks passed", passed, len(rep.Checks))})
	}
	var pv PingerView
	if err := c.Pinger(ctx, &pv); err == nil {
		r.pinger = &pv
	}
	return r
}

func (a *app) diagnose(ctx context.Context, k *kube, o diagOpts, scope, arg string) (*diagnosis, error) {
	d := &diagnosis{Pinger: map[string]PingerView{}}
	now := time.Now()
	nodes, err := k.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, failure(fmt.Errorf("listing nodes: %w", err))
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	var podNS, podName, onlyNode string
	switch scope {
	case "node":
		onlyNode = arg
		found := false
		for _, n := range nodes.Items {
			found = found || n.Name == arg
		}
		if !found {
			return nil, failure(fmt.Errorf("node %q not found", arg))
		}
	case "pod":
		if podNS, podName, err = k.podRef(arg); err != nil {
			return nil, err
		}
		p, err := k.kc.CoreV1().Pods(podNS).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return nil, failure(fmt.Errorf("pod %s/%s: %w", podNS, podName, err))
		}
		onlyNode = p.Spec.NodeName
		d.Findings = append(d.Findings, a.podChecks(ctx, k, p, nodes.Items, now, o)...)
	}

	sbFrom := d.askNodes(ctx, k, nodes.Items, onlyNode)
	if sbFrom == nil && onlyNode != "" {
		// The node itself is down; another may still read SB for the chassis check.
		if c, err := a.anyNode(ctx, k, ""); err == nil {
			sbFrom = c
		}
	}
	d.Findings = append(d.Findings, pingerFindings(d.Pinger)...)
	if scope == "pod" {
		cluster.Sort(d.Findings)
		return d, nil
	}

	// Chassis: node annotations against SB.
	sb, sbKnown := sbChassis(ctx, sbFrom)
	ch := cluster.ChassisChecks(nodes.Items, sb, sbKnown)
	if !sbKnown {
		d.Findings = append(d.Findings, cluster.Finding{Severity: cluster.Warn, Scope: "cluster", Check: "chassis", Found: "no node daemon answered, so the southbound chassis were not compared with the nodes"})
	}
	for _, f := range ch {
		if onlyNode == "" || f.Scope == "node/"+onlyNode || strings.Contains(f.Found, onlyNode) {
			d.Findings = append(d.Findings, f)
		}
	}
	if scope == "all" {
		d.Findings = append(d.Findings, clusterFindings(ctx, k, o, now)...)
	}
	// Pods without addresses (on the node, or everywhere).
	opts := metav1.ListOptions{}
	if onlyNode != "" {
		opts.FieldSelector = "spec.nodeName=" + onlyNode
	}
	pods, err := k.kc.CoreV1().Pods("").List(ctx, opts)
	if err != nil {
		return nil, failure(fmt.Errorf("listing pods: %w", err))
	}
	evs, _ := k.kc.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning,involvedObject.kind=Pod"})
	var events map[string]corev1.Event
	if evs != nil {
		events = cluster.LatestWarnings(evs.Items)
	}
	d.Findings = append(d.Findings, cluster.UnaddressedPods(pods.Items, events, now, o.grace)...)
	d.Findings = append(d.Findings, cluster.UnderlayPlacement(pods.Items, nodes.Items)...)
	cluster.Sort(d.Findings)
	if len(d.Pinger) == 0 {
		d.Pinger = nil
	}
	return d, nil
}

// askNodes runs doctor on each node (only onlyNode when set) in parallel
// and adds its findings and pinger view to d. It returns the client of the
// first node by name that answered, to read SB through.
func (d *diagnosis) askNodes(ctx context.Context, k *kube, nodes []corev1.Node, onlyNode string) *nodeclient.Client {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var sbFrom *nodeclient.Client
	for i := range nodes {
		n := &nodes[i]
		if onlyNode != "" && n.Name != onlyNode {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := nodeFindings(ctx, k, n)
			mu.Lock()
			defer mu.Unlock()
			d.Findings = append(d.Findings, r.findings...)
			if r.client != nil && (sbFrom == nil || r.client.Node < sbFrom.Node) {
				sbFrom = r.client
			}
			if r.pinger != nil {
				d.Pinger[n.Name] = *r.pinger
			}
		}()
	}
	wg.Wait()
	return sbFrom
}

// clusterFindings are the checks of the whole cluster: the controller's
// leader Lease and the Subnets' usage.
func clusterFindings(ctx context.Context, k *kube, o diagOpts, now time.Time) []cluster.Finding {
	var out []cluster.Finding
	refs := []string{"ovnhost/ovnhost-controller", "kube-system/ovnhost-controller"}
	if o.lease != "" {
		refs = []string{o.lease}
	}
	var lease *coordinationv1.Lease
	var lerr error
	ref := strings.Join(refs, " or ")
	for _, r := range refs {
		ns, name, _ := strings.Cut(r, "/")
		l, err := k.kc.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			lease, ref = l, r
			break
		}
		if !apierrors.IsNotFound(err) {
			lerr = err
		}
	}
	if lease == nil && lerr != nil {
		out = append(out, cluster.Finding{Severity: cluster.Warn, Scope: "cluster", Check: "controller-leader", Found: "cannot read the leader Lease: " + lerr.Error()})
	} else {
		out = append(out, cluster.LeaderCheck(lease, ref, now))
	}
	l2, err := k.dc.Resource(kubeovnv1.SubnetGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		out = append(out, cluster.Finding{Severity: cluster.Warn, Scope: "cluster", Check: "subnet-usage", Found: "cannot list subnets.kubeovn.io: " + err.Error(), Fix: "install the Subnet CRD (packaging/kubernetes/base/crd-subnets.yaml)"})
	} else if subs, err := cluster.Subnets(l2.Items); err == nil {
		out = append(out, cluster.SubnetChecks(subs)...)
	}
	return out
}

// sbChassis reads SB Chassis and Encap rows through a node daemon.
func sbChassis(ctx context.Context, c *nodeclient.Client) ([]cluster.SBChassis, bool) {
	if c == nil {
		return nil, false
	}
	chs, err := c.OVSDB(ctx, api.OVSDBRequest{DB: "OVN_Southbound", Args: []string{"list", "Chassis"}})
	if err != nil {
		return nil, false
	}
	encs, err := c.OVSDB(ctx, api.OVSDBRequest{DB: "OVN_Southbound", Args: []string{"list", "Encap"}})
	if err != nil {
		return nil, false
	}
	encIP := map[string]string{}
	for _, e := range encs.Rows {
		encIP[e["_uuid"]] = cluster.Text(e["ip"])
	}
	var out []cluster.SBChassis
	for _, r := range chs.Rows {
		c := cluster.SBChassis{Name: cluster.Text(r["name"]), Hostname: cluster.Text(r["hostname"])}
		for _, id := range cluster.Set(r["encaps"]) {
			if ip := encIP[id]; ip != "" {
				c.EncapIPs = append(c.EncapIPs, ip)
			}
		}
		out = append(out, c)
	}
	return out, true
}

// podChecks: the pod's address, its OVS port on its node, its binding.
func (a *app) podChecks(ctx context.Context, k *kube, p *corev1.Pod, nodes []corev1.Node, now time.Time, o diagOpts) []cluster.Finding {
	scope := "pod/" + p.Namespace + "/" + p.Name
	if p.Spec.HostNetwork {
		return []cluster.Finding{{Severity: cluster.Pass, Scope: scope, Check: "pod-network", Found: "host network: not wired by ovnhost"}}
	}
	if p.Spec.NodeName == "" {
		return []cluster.Finding{{Severity: cluster.Warn, Scope: scope, Check: "pod-scheduled", Found: "not scheduled to a node yet", Fix: "kubectl describe pod (scheduler)"}}
	}
	var node *corev1.Node
	for i := range nodes {
		if nodes[i].Name == p.Spec.NodeName {
			node = &nodes[i]
		}
	}
	info := cluster.Pod(p, node)
	var out []cluster.Finding
	if !info.Allocated {
		evs, _ := k.kc.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name + ",type=Warning"})
		var events map[string]corev1.Event
		if evs != nil {
			events = cluster.LatestWarnings(evs.Items)
		}
		f := cluster.UnaddressedPods([]corev1.Pod{*p}, events, now, 0)
		return append(out, f...)
	}
	out = append(out, cluster.Finding{Severity: cluster.Pass, Scope: scope, Check: "pod-address", Found: fmt.Sprintf("%s %s in %s (gateway %s)", info.IP, info.MAC, info.Subnet, info.Gateway)})
	if node == nil {
		return append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-node", Found: "node " + p.Spec.NodeName + " does not exist"})
	}
	cmd := &cobra.Command{}
	cmd.SetContext(ctx)
	a.podFromNode(cmd, k, node, info)
	switch {
	case info.NodeError != "":
		out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-ovs-port", Found: "cannot ask node " + node.Name + ": " + info.NodeError})
	case info.OVS != nil && info.OVS.Error != "":
		out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-ovs-port", Found: info.OVS.Error, Fix: "look for the pod's CNI ADD in the node daemon's log on " + node.Name})
	case info.OVS != nil && !info.OVS.OVNInstalled:
		out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-ovs-port", Found: "OVS interface " + info.OVS.Interface + " has no ovn-installed: ovn-controller has not bound the port",
			Fix: "netctl appctl " + node.Name + " ovn-controller connection-status; netctl sbctl find Port_Binding logical_port=" + info.LSP})
	case info.OVS != nil:
		out = append(out, cluster.Finding{Severity: cluster.Pass, Scope: scope, Check: "pod-ovs-port", Found: fmt.Sprintf("%s ofport %d, ovn-installed", info.OVS.Interface, info.OVS.OFPort)})
	}
	if info.OVS != nil && info.OVS.Error == "" && info.NodeError == "" {
		switch {
		case info.Bound == "":
			out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-binding", Found: "logical port " + info.LSP + " is bound to no chassis in SB"})
		case info.Chassis != "" && info.Bound != info.Chassis:
			out = append(out, cluster.Finding{Severity: cluster.Fail, Scope: scope, Check: "pod-binding", Found: fmt.Sprintf("logical port %s is bound to chassis %s, but node %s is chassis %s", info.LSP, info.Bound, node.Name, info.Chassis),
				Fix: "duplicate or stale chassis: netctl diagnose all"})
		default:
			out = append(out, cluster.Finding{Severity: cluster.Pass, Scope: scope, Check: "pod-binding", Found: "bound to chassis " + info.Bound})
		}
	}
	return append(out, a.podNetworkChecks(ctx, k, p, node, info)...)
}
