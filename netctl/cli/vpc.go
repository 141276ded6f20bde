package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

// nbTopology reads the routers, their ports, routes, policies and NAT rows
// and the switches' router ports from the NB through a node daemon.
func nbTopology(ctx context.Context, nc *nodeclient.Client) (*cluster.Topology, error) {
	var rows cluster.NBRows
	for _, q := range []struct {
		dst  *[]map[string]string
		args []string
	}{
		{&rows.Routers, []string{"list", "Logical_Router"}},
		{&rows.RouterPorts, []string{"list", "Logical_Router_Port"}},
		{&rows.Routes, []string{"list", "Logical_Router_Static_Route"}},
		{&rows.Policies, []string{"list", "Logical_Router_Policy"}},
		{&rows.NATs, []string{"list", "NAT"}},
		{&rows.Switches, []string{"list", "Logical_Switch"}},
		{&rows.SwitchPorts, []string{"find", "Logical_Switch_Port", "type=router"}},
	} {
		res, err := nc.OVSDB(ctx, api.OVSDBRequest{DB: "OVN_Northbound", Args: q.args})
		if err != nil {
			return nil, fmt.Errorf("reading NB %s through node %s: %w", q.args[1], nc.Node, err)
		}
		if res.Truncated != "" {
			return nil, fmt.Errorf("NB %s through node %s is truncated (%s): the comparison would be wrong", q.args[1], nc.Node, res.Truncated)
		}
		*q.dst = res.Rows
	}
	return cluster.ParseTopology(rows), nil
}

// vpcs reads the Vpcs and Subnets and, through a node, the NB.
func (a *app) vpcs(ctx context.Context, k *kube, node string) ([]*cluster.VpcInfo, string, error) {
	vl, err := k.dc.Resource(kubeovnv1.VpcGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", failure(fmt.Errorf("listing vpcs.kubeovn.io: %w (is the Vpc CRD installed? packaging/kubernetes/base/crd-vpcs.yaml)", err))
	}
	sl, err := k.dc.Resource(kubeovnv1.SubnetGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", failure(fmt.Errorf("listing subnets.kubeovn.io: %w", err))
	}
	var topo *cluster.Topology
	nbErr := ""
	if nc, err := a.anyNode(ctx, k, node); err != nil {
		nbErr = err.Error()
	} else if topo, err = nbTopology(ctx, nc); err != nil {
		nbErr = err.Error()
	}
	infos, probs := cluster.Vpcs(vl.Items, sl.Items, topo)
	for _, p := range probs {
		fmt.Fprintf(a.streams.Err, "warning: %s\n", p)
	}
	return infos, nbErr, nil
}

func (a *app) vpcCommand() *cobra.Command {
	var node string
	c := &cobra.Command{
		Use:   "vpc",
		Short: "Vpcs (vpcs.kubeovn.io) beside their routers in the NB: routes, policies, peerings, NAT",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List Vpcs: router, Subnets, routes and policies (spec/NB), peerings, problems",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			infos, nbErr, err := a.vpcs(cmd.Context(), k, node)
			if err != nil {
				return err
			}
			if nbErr != "" {
				fmt.Fprintf(a.streams.Err, "warning: the NB was not read, routers not compared: %s\n", nbErr)
			}
			t := &Table{Columns: []Column{{Name: "NAME"}, {Name: "ROUTER"}, {Name: "SUBNETS"}, {Name: "ROUTES"}, {Name: "POLICIES"},
				{Name: "PEERINGS"}, {Name: "EXTERNAL"}, {Name: "STANDBY"}, {Name: "PROBLEMS"}, {Name: "NAMESPACES", Wide: true}}}
			for _, v := range infos {
				router, nbRoutes, nbPols := "missing", "-", "-"
				if v.NB != nil {
					router = v.NB.Name
					nbRoutes, nbPols = fmt.Sprint(ownRoutes(v)), fmt.Sprint(len(v.NB.Policies))
				} else if nbErr != "" {
					router = "?"
				}
				t.Rows = append(t.Rows, []string{v.Name, router, strings.Join(v.Subnets, ","),
					fmt.Sprintf("%d/%s", len(v.StaticRoutes), nbRoutes), fmt.Sprintf("%d/%s", len(v.PolicyRoutes), nbPols),
					fmt.Sprint(len(v.Peerings)), fmt.Sprint(v.EnableExternal), fmt.Sprint(v.Standby), problems(v.Findings),
					strings.Join(v.Namespaces, ",")})
			}
			if infos == nil {
				infos = []*cluster.VpcInfo{}
			}
			return Print(a.streams.Out, a.output, infos, t)
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "One Vpc: spec and status beside its router in the NB, differences as findings (exit 0 same, 1 warnings, 2 failures)",
		Long: `Shows the Vpc's spec (namespaces, Subnets, static routes, policy routes,
peerings, enableExternal) and status beside what the northbound database
holds for its router (ports, static routes, policies, NAT rows), read
through a node daemon, and names each difference as a finding: a static
route of the spec missing from the router, a Subnet's switch attached to
another router, a peering port missing or one-sided. Exit 0 when the NB
matches, 1 with warnings, 2 with failures.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeVpcs,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			infos, nbErr, err := a.vpcs(cmd.Context(), k, node)
			if err != nil {
				return err
			}
			var v *cluster.VpcInfo
			for _, x := range infos {
				if x.Name == args[0] {
					v = x
				}
			}
			if v == nil {
				return failure(fmt.Errorf("vpc %q not found; `netctl vpc list` shows the Vpcs", args[0]))
			}
			if nbErr != "" {
				v.Findings = append(v.Findings, cluster.Finding{Severity: cluster.Warn, Scope: "vpc/" + v.Name, Check: "vpc-router",
					Found: "the NB was not read, the router not compared: " + nbErr, Fix: "netctl diagnose all (node daemons)"})
			}
			cluster.Sort(v.Findings)
			if a.output == OutJSON || a.output == OutYAML {
				if err := Print(a.streams.Out, a.output, v, nil); err != nil {
					return err
				}
			} else {
				writeVpc(a, v)
			}
			return exitCode(cluster.ExitCode(v.Findings))
		},
	}
	for _, s := range []*cobra.Command{list, show} {
		a.addOutputFlag(s)
		s.Flags().StringVar(&node, "node", "", "read the NB through this node's daemon (default: the first that answers)")
		_ = s.RegisterFlagCompletionFunc("node", a.completeNodes)
		c.AddCommand(s)
	}
	return c
}

// ownRoutes counts the router's routes the Vpc reconciler owns (the
// external gateway's default route is vpcnat's).
func ownRoutes(v *cluster.VpcInfo) int {
	if !kubeovnv1.IsCustomVpc(v.Name) {
		return len(v.NB.Routes)
	}
	n := 0
	for _, r := range v.NB.Routes {
		if r.Owner == "vpc="+v.Name {
			n++
		}
	}
	return n
}

func problems(fs []cluster.Finding) string {
	var nf, nw int
	for _, f := range fs {
		switch f.Severity {
		case cluster.Fail:
			nf++
		case cluster.Warn:
			nw++
		}
	}
	if nf+nw == 0 {
		return "none"
	}
	return fmt.Sprintf("%d failed, %d warnings", nf, nw)
}

func writeVpc(a *app, v *cluster.VpcInfo) {
	w := a.streams.Out
	pr := func(k, val string) {
		if val == "" {
			val = "-"
		}
		fmt.Fprintf(w, "%-16s %s\n", k+":", val)
	}
	pr("Name", v.Name)
	pr("Router", v.Router)
	pr("Namespaces", strings.Join(v.Namespaces, ", "))
	pr("Default subnet", v.DefaultSubnet)
	pr("Subnets", strings.Join(v.Subnets, ", "))
	pr("Enable external", fmt.Sprint(v.EnableExternal))
	pr("Standby", fmt.Sprint(v.Standby))
	fmt.Fprintln(w, "\nSPEC")
	for i, r := range v.StaticRoutes {
		if r == nil {
			continue
		}
		pol := r.Policy
		if pol == "" {
			pol = kubeovnv1.PolicyDst
		}
		fmt.Fprintf(w, "  staticRoutes[%d]  %s via %s (%s)\n", i, r.CIDR, r.NextHopIP, pol)
	}
	for i, r := range v.PolicyRoutes {
		if r == nil {
			continue
		}
		fmt.Fprintf(w, "  policyRoutes[%d]  %d %q %s %s\n", i, r.Priority, r.Match, r.Action, r.NextHopIP)
	}
	for i, p := range v.Peerings {
		if p == nil {
			continue
		}
		fmt.Fprintf(w, "  vpcPeerings[%d]   %s over %s\n", i, p.RemoteVpc, p.LocalConnectIP)
	}
	fmt.Fprintln(w, "\nNB ROUTER")
	if r := v.NB; r == nil {
		fmt.Fprintf(w, "  (no router %s)\n", v.Router)
	} else {
		for _, p := range r.Ports {
			to := ""
			switch {
			case p.Peer != "":
				to = "peer " + p.Peer
			case p.Switch != "":
				to = "switch " + p.Switch
			}
			fmt.Fprintf(w, "  port    %s %s %s\n", p.Name, strings.Join(p.Networks, ","), to)
		}
		for _, rt := range r.Routes {
			owner := ""
			if rt.Owner != "" {
				owner = " [" + rt.Owner + "]"
			}
			fmt.Fprintf(w, "  route   %s%s\n", rt, owner)
		}
		for _, p := range r.Policies {
			fmt.Fprintf(w, "  policy  %s\n", p)
		}
		for _, n := range r.NATs {
			fmt.Fprintf(w, "  nat     %s %s -> %s\n", n.Type, n.LogicalIP, n.ExternalIP)
		}
	}
	if len(v.Conditions) > 0 {
		fmt.Fprintln(w, "\nCONDITIONS")
		t := &Table{Columns: []Column{{Name: "  TYPE"}, {Name: "STATUS"}, {Name: "REASON"}, {Name: "MESSAGE"}}}
		for _, c := range v.Conditions {
			t.Rows = append(t.Rows, []string{"  " + c.Type, c.Status, c.Reason, c.Message})
		}
		_ = Print(w, OutTable, nil, t)
	}
	fmt.Fprintln(w, "\nFINDINGS")
	writeFindings(w, v.Findings, a.output == OutWide)
}

// writeFindings prints findings as diagnose does (passes only when wide)
// and the summary line.
func writeFindings(w io.Writer, fs []cluster.Finding, wide bool) {
	t := &Table{Columns: []Column{{Name: "STATUS"}, {Name: "SCOPE"}, {Name: "CHECK"}, {Name: "FOUND"}, {Name: "FIX"}}}
	var nf, nw, np int
	for _, f := range fs {
		switch f.Severity {
		case cluster.Fail:
			nf++
		case cluster.Warn:
			nw++
		default:
			np++
			if !wide {
				continue
			}
		}
		t.Rows = append(t.Rows, []string{strings.ToUpper(string(f.Severity)), f.Scope, f.Check, f.Found, f.Fix})
	}
	if len(t.Rows) > 0 {
		_ = Print(w, OutTable, nil, t)
	}
	fmt.Fprintf(w, "%s: %d failed, %d warnings, %d passed", strings.ToUpper(string(cluster.Worst(fs))), nf, nw, np)
	if !wide && np > 0 {
		fmt.Fprint(w, " (-o wide lists the passed checks)")
	}
	fmt.Fprintln(w)
}

func (a *app) completeVpcs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	k, err := a.kube()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	l, err := k.dc.Resource(kubeovnv1.VpcGVR).List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, u := range l.Items {
		names = append(names, u.GetName())
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
