package cli

import (
	"github.com/spf13/cobra"

	"github.com/ovnhost/ovnhost/netctl/doctor"
	"github.com/ovnhost/ovnhost/netctl/status"
)

// doctor and status take every `ovnhost run` setting as a flag (--iface,
// --ovs-run-dir, ...), so their arguments go to them unparsed; they keep
// their exit codes (doctor: 0 pass, 1 warnings, 2 failures; status: 0
// ready, 1 not ready, 2 no answer).

func (a *app) doctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "doctor [-o table|wide|json|yaml] [--timeout 3s] [ovnhost run settings...]",
		Short:              "Check this node for what breaks OVS/OVN networking (exit 0 pass, 1 warnings, 2 failures)",
		Long:               doctor.Usage,
		DisableFlagParsing: true,
		ValidArgsFunction:  cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitCode(doctor.Main(cmd.Context(), args, a.environ, a.streams.Out, a.streams.Err))
		},
	}
}

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "status [-o table|json|yaml] [--timeout 3s] [ovnhost run settings...]",
		Short:              "The node daemon's children: pid, readiness, restarts, memory (exit 0 ready, 1 not, 2 no answer)",
		Long:               status.Usage,
		DisableFlagParsing: true,
		ValidArgsFunction:  cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitCode(status.Main(cmd.Context(), args, a.environ, a.streams.Out, a.streams.Err))
		},
	}
}
