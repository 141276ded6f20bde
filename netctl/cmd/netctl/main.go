// Command netctl is the operator's command line for ovnhost nodes and
// clusters. Installed as kubectl-netctl it is also a kubectl plugin
// (kubectl netctl diagnose all). The commands are in package netctl/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ovnhost/ovnhost/netctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args, os.Environ(), cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
