// Command netctl is the operator's command line for ovnhost nodes. Installed
// as kubectl-netctl it is also a kubectl plugin (kubectl netctl doctor).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ovnhost/ovnhost/internal/version"
	"github.com/ovnhost/ovnhost/netctl/doctor"
	"github.com/ovnhost/ovnhost/netctl/status"
)

const usage = `usage: netctl <command> [arguments]

commands:
  doctor     check this node for what breaks OVS/OVN networking (--output json)
  status     the node daemon's children: pid, readiness, restarts, memory (--output json)
  version    print the build
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "doctor":
		return doctor.Main(ctx, args[1:], os.Environ(), os.Stdout, os.Stderr)
	case "status":
		return status.Main(ctx, args[1:], os.Environ(), os.Stdout, os.Stderr)
	case "version", "--version":
		fmt.Println("netctl", version.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "netctl: unknown command %q\n%s", args[0], usage)
	return 2
}
