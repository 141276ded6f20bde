package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/netctl/cluster"
)

func (a *app) subnetCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "subnet",
		Short: "Subnets (subnets.kubeovn.io): usage, gateway, conditions",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List Subnets with their usage, gateway and readiness",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			l, err := k.dc.Resource(kubeovnv1.SubnetGVR).List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return failure(fmt.Errorf("listing subnets.kubeovn.io: %w", err))
			}
			subs, err := cluster.Subnets(l.Items)
			if err != nil {
				return failure(err)
			}
			t := &Table{Columns: []Column{{Name: "NAME"}, {Name: "PROTOCOL"}, {Name: "CIDR"}, {Name: "GATEWAY"}, {Name: "USED"},
				{Name: "READY"}, {Name: "GATEWAY-TYPE", Wide: true}, {Name: "NAT", Wide: true}, {Name: "DEFAULT", Wide: true},
				{Name: "NAMESPACES", Wide: true}, {Name: "PROBLEM", Wide: true}}}
			for _, s := range subs {
				gwType := s.GatewayType
				if s.ActiveGW != "" {
					gwType += " (" + s.ActiveGW + ")"
				}
				t.Rows = append(t.Rows, []string{s.Name, s.Protocol, s.CIDR, s.Gateway, s.UsageString(), s.Ready,
					gwType, fmt.Sprint(s.NatOutgoing), fmt.Sprint(s.Default), strings.Join(s.Namespaces, ","), s.Problem()})
			}
			if subs == nil {
				subs = []*cluster.SubnetInfo{}
			}
			return Print(a.streams.Out, a.output, subs, t)
		},
	}
	show := &cobra.Command{
		Use:               "show NAME",
		Short:             "One Subnet: spec, usage, active gateway and every condition",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeSubnets,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			u, err := k.dc.Resource(kubeovnv1.SubnetGVR).Get(cmd.Context(), args[0], metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return failure(fmt.Errorf("subnet %q not found; `netctl subnet list` shows the Subnets", args[0]))
			}
			if err != nil {
				return failure(fmt.Errorf("subnet %q: %w", args[0], err))
			}
			s, err := cluster.Subnet(u)
			if err != nil {
				return failure(err)
			}
			if a.output == OutJSON || a.output == OutYAML {
				return Print(a.streams.Out, a.output, s, nil)
			}
			w := a.streams.Out
			fmt.Fprintf(w, "Name:          %s\nDefault:       %v\nProtocol:      %s\nCIDR:          %s\nGateway:       %s\n", s.Name, s.Default, s.Protocol, s.CIDR, s.Gateway)
			gw := s.GatewayType
			if s.GatewayNode != "" {
				gw += ", nodes " + s.GatewayNode
			}
			if s.ActiveGW != "" {
				gw += ", active " + s.ActiveGW
			}
			fmt.Fprintf(w, "Gateway type:  %s\nNAT outgoing:  %v\n", gw, s.NatOutgoing)
			if s.Vlan != "" {
				// Underlay: where the gateway is, and the router's address.
				ul := "physical gateway " + s.Gateway
				switch {
				case s.LogicalGateway:
					ul = "logical gateway (the cluster router holds " + s.Gateway + ")"
				case s.U2OIP != "":
					ul += ", interconnected through the cluster router at " + s.U2OIP
				}
				fmt.Fprintf(w, "Vlan:          %s (%s)\n", s.Vlan, ul)
			}
			if len(s.Namespaces) > 0 {
				fmt.Fprintf(w, "Namespaces:    %s\n", strings.Join(s.Namespaces, ", "))
			}
			if len(s.ExcludeIPs) > 0 {
				fmt.Fprintf(w, "Exclude IPs:   %s\n", strings.Join(s.ExcludeIPs, ", "))
			}
			if s.MTU > 0 {
				fmt.Fprintf(w, "MTU:           %d\n", s.MTU)
			}
			fmt.Fprintf(w, "Usage:         %s used, %s available\n", s.UsageString(), fmt.Sprint(s.Available))
			if s.UsedRange != "" {
				fmt.Fprintf(w, "Used range:    %s\n", s.UsedRange)
			}
			fmt.Fprintln(w, "Conditions:")
			t := &Table{Columns: []Column{{Name: "  TYPE"}, {Name: "STATUS"}, {Name: "REASON"}, {Name: "MESSAGE"}}}
			for _, c := range s.Conditions {
				t.Rows = append(t.Rows, []string{"  " + c.Type, c.Status, c.Reason, c.Message})
			}
			return Print(w, OutTable, nil, t)
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(show)
	c.AddCommand(list, show)
	return c
}

func (a *app) ipCommand() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "ip",
		Short: "Pod addresses allocated by the controller",
	}
	list := &cobra.Command{
		Use:   "list [-n NAMESPACE | -A]",
		Short: "List pod addresses (from the controller's ovn.kubernetes.io annotations): IP, MAC, subnet, node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			ns := metav1.NamespaceAll
			if k.explicitNS && !all {
				ns = k.namespace
			}
			pods, err := k.kc.CoreV1().Pods(ns).List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return failure(fmt.Errorf("listing pods: %w", err))
			}
			ips := cluster.IPs(pods.Items)
			t := &Table{Columns: []Column{{Name: "NAMESPACE"}, {Name: "POD"}, {Name: "IP"}, {Name: "MAC"}, {Name: "SUBNET"}, {Name: "NODE"},
				{Name: "CIDR", Wide: true}, {Name: "GATEWAY", Wide: true}, {Name: "ROUTED", Wide: true}}}
			for _, i := range ips {
				t.Rows = append(t.Rows, []string{i.Namespace, i.Pod, i.IP, i.MAC, i.Subnet, i.Node, i.CIDR, i.Gateway, fmt.Sprint(i.Routed)})
			}
			if ips == nil {
				ips = []cluster.PodIP{}
			}
			return Print(a.streams.Out, a.output, ips, t)
		},
	}
	list.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace (the default unless -n is given)")
	a.addOutputFlag(list)
	c.AddCommand(list)
	return c
}

func (a *app) completeSubnets(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	k, err := a.kube()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	l, err := k.dc.Resource(kubeovnv1.SubnetGVR).List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, u := range l.Items {
		names = append(names, u.GetName())
	}
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) completeNodes(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	k, err := a.kube()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	l, err := k.kc.CoreV1().Nodes().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completePods offers NAMESPACE/POD.
func (a *app) completePods(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	k, err := a.kube()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ns := metav1.NamespaceAll
	if k.explicitNS {
		ns = k.namespace
	}
	l, err := k.kc.CoreV1().Pods(ns).List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
