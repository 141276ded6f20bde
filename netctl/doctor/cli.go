package doctor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/config"
)

// Usage is the help of `netctl doctor`.
const Usage = `usage: netctl doctor [-o|--output table|wide|json|yaml] [--timeout 3s] [ovnhost run settings...]

Checks this node for the problems that break OVS/OVN networking, without
changing anything: kernel datapath, capabilities and file capabilities,
directories, tunnel interface and MTU, CNI plugin and configuration, host
firewall, OVSDB sockets, ovn-controller's SB connection, NB/SB reachability,
duplicate chassis, clock and certificates.

Settings are those of ` + "`ovnhost run`" + ` (flags such as --iface=eth1, the
environment names IFACE, OVN_DB_IPS, ..., or --config FILE), so doctor sees
the node the way the daemon does. Works as a kubectl plugin (kubectl-netctl).

Exit status: 0 every check passed, 1 warnings, 2 failures.
`

// Main runs `netctl doctor` with args (after "doctor") and the environment;
// it returns the exit status.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	output, timeout := "table", 3*time.Second
	var rest []string
	fs := flag.NewFlagSet("netctl doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&output, "output", output, "")
	fs.StringVar(&output, "o", output, "")
	fs.DurationVar(&timeout, "timeout", timeout, "")
	// Doctor's own flags are taken out; everything else is a daemon setting.
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		name, _, hasVal := strings.Cut(name, "=")
		if !strings.HasPrefix(a, "-") || fs.Lookup(name) == nil {
			if name == "help" || name == "h" {
				fmt.Fprint(stdout, Usage)
				return 0
			}
			rest = append(rest, a)
			continue
		}
		pair := []string{a}
		if !hasVal && i+1 < len(args) {
			i++
			pair = append(pair, args[i])
		}
		if err := fs.Parse(pair); err != nil {
			fmt.Fprintf(stderr, "netctl doctor: %v\n%s", err, Usage)
			return 2
		}
	}
	switch output {
	case "table", "wide", "json", "yaml":
	default:
		fmt.Fprintf(stderr, "netctl doctor: --output %q: use table, wide, json or yaml\n", output)
		return 2
	}
	cfg, err := config.Load(rest, environ, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "netctl doctor: %v\n", err)
		return 2
	}
	r := Run(ctx, cfg, Options{Timeout: timeout})
	switch output {
	case "json":
		err = WriteJSON(stdout, r)
	case "yaml":
		err = WriteYAML(stdout, r)
	default:
		err = WriteTable(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "netctl doctor: %v\n", err)
		return 2
	}
	return r.ExitCode()
}
