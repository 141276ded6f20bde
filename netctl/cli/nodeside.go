package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

// nodeTimeout bounds connecting to one node's API.
var nodeTimeout = 5 * time.Second

func (a *app) nodeClient(ctx context.Context, k *kube, name string) (*nodeclient.Client, *corev1.Node, error) {
	n, err := k.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, failure(fmt.Errorf("node %q not found", name))
	}
	if err != nil {
		return nil, nil, failure(fmt.Errorf("node %q: %w", name, err))
	}
	c, err := nodeclient.For(k.rest, n, nodeTimeout, k.tokens)
	return c, n, failure(err)
}

// anyNode returns the client of the named node, or of the first node (by
// name) whose daemon answers.
func (a *app) anyNode(ctx context.Context, k *kube, name string) (*nodeclient.Client, error) {
	if name != "" {
		c, _, err := a.nodeClient(ctx, k, name)
		return c, err
	}
	nodes, err := k.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, failure(fmt.Errorf("listing nodes: %w", err))
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	var errs []string
	for i := range nodes.Items {
		c, err := nodeclient.For(k.rest, &nodes.Items[i], nodeTimeout, k.tokens)
		if err == nil {
			if _, err = c.Status(ctx); err == nil {
				return c, nil
			}
		}
		errs = append(errs, err.Error())
	}
	return nil, failure(fmt.Errorf("no node daemon answers: %s", strings.Join(errs, "; ")))
}

// podFromNode adds what the pod's node holds for it.
func (a *app) podFromNode(cmd *cobra.Command, k *kube, n *corev1.Node, info *cluster.PodInfo) {
	c, err := nodeclient.For(k.rest, n, nodeTimeout, k.tokens)
	if err != nil {
		info.NodeError = err.Error()
		return
	}
	p, err := c.Pod(cmd.Context(), info.Namespace, info.Name)
	if err != nil {
		var ne *nodeclient.Error
		if errors.As(err, &ne) && ne.Status == 400 {
			info.OVS = &cluster.OVSPort{Error: ne.Msg}
			return
		}
		info.NodeError = err.Error()
		return
	}
	info.OVS = &cluster.OVSPort{Interface: p.Interface, OFPort: p.OFPort, OVNInstalled: p.OVNInstalled, Ingress: p.Ingress,
		IngressBurst: p.IngressBurst, QoS: p.QoS, ExternalIDs: p.ExternalIDs}
	info.Bound = p.BoundChassis
}

const dbHelp = `Read operations only:
  show                                 the topology
  list TABLE [RECORD]                  rows (RECORD: a UUID or the row's name)
  get TABLE RECORD COLUMN[:KEY]        one value
  find TABLE COLUMN[:KEY]=VALUE...     rows matching every condition`

// dbCommand is nbctl or sbctl: a read-only query of the OVN database,
// asked through a node daemon (the node that knows the database).
func (a *app) dbCommand(use, db string) *cobra.Command {
	var node string
	c := &cobra.Command{
		Use:   use + " show | list TABLE [RECORD] | get TABLE RECORD COLUMN | find TABLE COL=VAL...",
		Short: "Read " + db + " (ovn-" + strings.TrimSuffix(use, "ctl") + "ctl-like, read-only) through a node daemon",
		Long:  "Queries " + db + " as the node daemon sees it, through its authenticated API.\n\n" + dbHelp,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			nc, err := a.anyNode(cmd.Context(), k, node)
			if err != nil {
				return err
			}
			out, err := nc.OVSDB(cmd.Context(), api.OVSDBRequest{DB: db, Args: args})
			if err != nil {
				return queryErr(err)
			}
			_, err = io.WriteString(a.streams.Out, out.Text)
			if out.Truncated != "" {
				fmt.Fprintf(a.streams.Err, "warning: the answer is truncated: %s\n", out.Truncated)
			}
			return err
		},
	}
	c.Flags().StringVar(&node, "node", "", "ask this node's daemon (default: the first that answers)")
	_ = c.RegisterFlagCompletionFunc("node", a.completeNodes)
	return c
}

func queryErr(err error) error {
	var ne *nodeclient.Error
	if errors.As(err, &ne) && ne.Status == 400 {
		return usageErrorf("%s", ne.Msg)
	}
	return failure(err)
}

func (a *app) vsctlCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "vsctl NODE show | list TABLE [RECORD] | get TABLE RECORD COLUMN | find TABLE COL=VAL...",
		Short:             "Read a node's conf.db (ovs-vsctl-like, read-only) through its daemon",
		Long:              "Queries the Open_vSwitch database of NODE through its daemon's authenticated API.\n\n" + dbHelp,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			nc, _, err := a.nodeClient(cmd.Context(), k, args[0])
			if err != nil {
				return err
			}
			out, err := nc.OVSDB(cmd.Context(), api.OVSDBRequest{DB: "Open_vSwitch", Args: args[1:]})
			if err != nil {
				return queryErr(err)
			}
			_, err = io.WriteString(a.streams.Out, out.Text)
			if out.Truncated != "" {
				fmt.Fprintf(a.streams.Err, "warning: the answer is truncated: %s\n", out.Truncated)
			}
			return err
		},
	}
}

func (a *app) appctlCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "appctl NODE TARGET COMMAND [ARGS...]",
		Short: "Run a read-only ovs-appctl command on a node's ovs-vswitchd, ovn-controller or ovsdb-server",
		Long: `Passes one read-only control-socket command to a daemon on NODE through
its node daemon's API, e.g.:

  netctl appctl node-a ovs-vswitchd dpif/show
  netctl appctl node-a ovn-controller connection-status
  netctl appctl node-a ovs-vswitchd ofproto/trace br-int in_port=3,icmp

Commands that change state are refused.`,
		Args:              cobra.MinimumNArgs(3),
		ValidArgsFunction: a.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			nc, _, err := a.nodeClient(cmd.Context(), k, args[0])
			if err != nil {
				return err
			}
			out, err := nc.Appctl(cmd.Context(), api.AppctlRequest{Target: args[1], Command: args[2], Args: args[3:]})
			if err != nil {
				return queryErr(err)
			}
			_, err = io.WriteString(a.streams.Out, out)
			return err
		},
	}
}

func (a *app) tcpdumpCommand() *cobra.Command {
	var file string
	var count int
	var dur time.Duration
	c := &cobra.Command{
		Use:   "tcpdump NAMESPACE/POD [FILTER...]",
		Short: "Capture a pod's traffic on its host veth, on its node",
		Long: `Captures the packets on the pod's host-side veth on the pod's node (through
the node daemon's API) and prints them with the local tcpdump, which also
applies FILTER (pcap-filter syntax). With -w FILE the capture is saved as
pcap instead (FILTER then needs tcpdump too); -w - writes pcap to stdout.
Stops after -c packets or --duration.`,
		Args:              cobra.MinimumNArgs(1),
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
			filter := args[1:]
			p, err := k.kc.CoreV1().Pods(ns).Get(cmd.Context(), name, metav1.GetOptions{})
			if err != nil {
				return failure(fmt.Errorf("pod %s/%s: %w", ns, name, err))
			}
			if p.Spec.NodeName == "" || p.Spec.HostNetwork {
				return failure(fmt.Errorf("pod %s/%s is not scheduled or uses the host network: it has no veth of ours", ns, name))
			}
			nc, _, err := a.nodeClient(cmd.Context(), k, p.Spec.NodeName)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), dur+nodeTimeout)
			defer cancel()
			if file == "-" && len(filter) == 0 {
				return failure(nc.Capture(ctx, ns, name, count, dur, a.streams.Out))
			}
			tcpdump, lerr := exec.LookPath("tcpdump")
			if lerr != nil {
				if file != "" && len(filter) == 0 {
					f, err := os.Create(file)
					if err != nil {
						return failure(err)
					}
					defer f.Close()
					return failure(nc.Capture(ctx, ns, name, count, dur, f))
				}
				return failure(errors.New("tcpdump is not installed here: install it (Debian/RHEL package tcpdump) to print or filter, or use -w FILE without a filter"))
			}
			targs := []string{"-r", "-", "-n"}
			if file != "" {
				targs = append(targs, "-w", file)
			} else {
				targs = append(targs, "-l")
			}
			targs = append(targs, filter...)
			td := exec.CommandContext(ctx, tcpdump, targs...)
			pr, pw := io.Pipe()
			var tderr bytes.Buffer
			td.Stdin, td.Stdout, td.Stderr = pr, a.streams.Out, &tderr
			if err := td.Start(); err != nil {
				return failure(err)
			}
			cerr := nc.Capture(ctx, ns, name, count, dur, pw)
			pw.Close()
			werr := td.Wait()
			if cerr != nil {
				return failure(cerr)
			}
			if werr != nil {
				return failure(fmt.Errorf("tcpdump: %v: %s", werr, strings.TrimSpace(tderr.String())))
			}
			// tcpdump's "reading from file -" summary goes to stderr.
			_, _ = io.Copy(a.streams.Err, &tderr)
			return nil
		},
	}
	c.Flags().StringVarP(&file, "write", "w", "", "save the capture as pcap to FILE (- for stdout)")
	c.Flags().IntVarP(&count, "count", "c", 0, "stop after this many packets (0: until --duration)")
	c.Flags().DurationVar(&dur, "duration", 10*time.Second, "stop after this long (at most 1h)")
	return c
}
