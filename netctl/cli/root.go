// Package cli is netctl's command tree (spf13/cobra): the node commands
// (doctor, status), the cluster commands (diagnose, trace, subnet, ip, pod,
// nbctl, sbctl, vsctl, appctl, tcpdump), version and shell completion. The
// same program installed as kubectl-netctl is a kubectl plugin: it names
// itself "kubectl netctl" in help and completion, and as
// kubectl_complete-netctl it answers kubectl's completion requests.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/version"
)

// Exit status of every command but doctor, status and diagnose (which keep
// 0 pass, 1 warnings or not ready, 2 failures or no answer).
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed (API error, node unreachable)
	ExitUsage   = 2 // bad arguments or flags: nothing was asked
)

// exitError carries a command's exit status; a nil err means the command
// already said what it had to.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitCode(code int) error { return &exitError{code: code} }

func usageErrorf(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// Streams are the command's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// app is the state every command shares: the kubeconfig flags and output.
type app struct {
	streams   Streams
	environ   []string
	name      string // "netctl" or "kubectl netctl"
	output    string
	kubeFlags *clientcmd.ConfigOverrides
	loading   *clientcmd.ClientConfigLoadingRules
	// nodeAccount is NAMESPACE/NAME of the ServiceAccount whose node-bound
	// tokens netctl sends to node APIs when the kubeconfig has no client
	// certificate.
	nodeAccount string
}

// Main runs netctl with argv (argv[0] decides the name) and returns the exit
// status.
func Main(ctx context.Context, argv, environ []string, s Streams) int {
	base := "netctl"
	if len(argv) > 0 {
		base = filepath.Base(argv[0])
	}
	args := argv[1:]
	name := "netctl"
	switch {
	case strings.HasPrefix(base, "kubectl_complete-"):
		// kubectl (1.26+) runs kubectl_complete-<plugin> for completion.
		name, args = "kubectl netctl", append([]string{cobra.ShellCompRequestCmd}, args...)
	case strings.HasPrefix(base, "kubectl-"):
		name = "kubectl netctl"
	}
	a := &app{streams: s, environ: environ, name: name, output: OutTable}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(s.Err, "%s: %v\n", cmdPath(a, cmd), ee.err)
			if ee.code == ExitUsage {
				fmt.Fprintf(s.Err, "see '%s --help'\n", cmdPath(a, cmd))
			}
		}
		return ee.code
	}
	// cobra's own errors (unknown command or flag, wrong argument count)
	// are usage errors.
	fmt.Fprintf(s.Err, "%s: %v\nsee '%s --help'\n", cmdPath(a, cmd), err, cmdPath(a, cmd))
	if isCobraUsage(err) {
		return ExitUsage
	}
	return ExitFailure
}

func cmdPath(a *app, cmd *cobra.Command) string {
	if cmd == nil {
		return a.name
	}
	p := cmd.CommandPath()
	if cmd.Root() != nil {
		p = a.name + strings.TrimPrefix(p, cmd.Root().Name())
	}
	return p
}

func isCobraUsage(err error) bool {
	m := err.Error()
	for _, s := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires ", "invalid argument", "flag needs an argument", "bad flag syntax"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "netctl",
		Short: "Diagnose and inspect ovnhost (OVS/OVN) networking on a node and across the cluster",
		Long: `netctl is the operator's tool for ovnhost networking.

On a node:       doctor, status
In the cluster:  diagnose, trace, subnet, ip, pod, nbctl, sbctl, vsctl, appctl, tcpdump
                 (Kubernetes access from --kubeconfig/--context as kubectl does;
                 node operations go to each node daemon's authenticated API)

Installed as kubectl-netctl it is a kubectl plugin: kubectl netctl diagnose all.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Version:           version.Version,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: a.name},
	}
	root.SetVersionTemplate("netctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	a.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	a.kubeFlags = &clientcmd.ConfigOverrides{}
	pf := root.PersistentFlags()
	pf.StringVar(&a.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	clientcmd.BindOverrideFlags(a.kubeFlags, pf, kubeOverrideFlags())
	pf.StringVar(&a.nodeAccount, "node-api-account", api.DefaultNetctlAccount, "NAMESPACE/NAME of the ServiceAccount whose tokens, bound to one node each, netctl sends to node APIs when the kubeconfig has no client certificate (your own token never goes to a node)")
	root.AddCommand(
		a.versionCommand(),
		a.doctorCommand(),
		a.statusCommand(),
		a.subnetCommand(),
		a.vpcCommand(),
		a.ipCommand(),
		a.podCommand(),
		a.diagnoseCommand(),
		a.traceCommand(),
		a.dbCommand("nbctl", "OVN_Northbound"),
		a.dbCommand("sbctl", "OVN_Southbound"),
		a.vsctlCommand(),
		a.appctlCommand(),
		a.tcpdumpCommand(),
		a.pingerCommand(),
	)
	return root
}

// kubeOverrideFlags are kubectl's flag names for the settings netctl
// honours: --context, --cluster, --user, -n/--namespace, --server,
// --token, --request-timeout and the TLS ones.
func kubeOverrideFlags() clientcmd.ConfigOverrideFlags {
	f := clientcmd.RecommendedConfigOverrideFlags("")
	// Basic auth is gone from Kubernetes; do not offer it.
	f.AuthOverrideFlags.Username = clientcmd.FlagInfo{}
	f.AuthOverrideFlags.Password = clientcmd.FlagInfo{}
	return f
}

// addOutputFlag adds -o/--output to a listing command.
func (a *app) addOutputFlag(c *cobra.Command) {
	c.Flags().StringVarP(&a.output, "output", "o", OutTable, "output format: table, wide, json or yaml")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{OutTable, OutWide, OutJSON, OutYAML}, cobra.ShellCompDirectiveNoFileComp))
	prev := c.PreRunE
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(a.output); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

func (a *app) versionCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "version",
		Short: "Print netctl's build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := map[string]string{"program": "netctl", "version": version.Version}
			switch a.output {
			case OutJSON, OutYAML:
				return Print(a.streams.Out, a.output, v, nil)
			}
			fmt.Fprintln(a.streams.Out, "netctl", version.Version)
			return nil
		},
	}
	a.addOutputFlag(c)
	return c
}
