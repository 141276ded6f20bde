// Package status is `netctl status`: what the node daemon says about its
// children (GET /status on its health address), as a table or JSON.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/config"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// Usage is the help of `netctl status`.
const Usage = `usage: netctl status [-o|--output table|wide|json|yaml] [--timeout 3s] [ovnhost run settings...]

Asks the node daemon on this node (its --health-addr, 127.0.0.1:10665 by
default) for the state of ovsdb-server, ovs-vswitchd, ovn-controller (and the
local OVN databases and ovn-northd in all-in-one mode) and the CNI server:
pid, readiness, restarts, memory, and why a child is not ready.

Exit status: 0 ready, 1 not ready, 2 the daemon did not answer.
`

// Main runs `netctl status` with args (after "status").
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	output, timeout := "table", 3*time.Second
	fs := flag.NewFlagSet("netctl status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&output, "output", output, "")
	fs.StringVar(&output, "o", output, "")
	fs.DurationVar(&timeout, "timeout", timeout, "")
	var rest []string
	// Our own flags first; everything else is an ovnhost setting.
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
		if name == "output" || name == "o" || name == "timeout" {
			if !strings.Contains(a, "=") && i+1 < len(args) {
				a += "=" + args[i+1]
				i++
			}
			if err := fs.Parse([]string{a}); err != nil {
				fmt.Fprintf(stderr, "netctl status: %v\n%s", err, Usage)
				return 2
			}
			continue
		}
		if name == "h" || name == "help" {
			fmt.Fprint(stdout, Usage)
			return 0
		}
		rest = append(rest, a)
	}
	switch output {
	case "table", "wide", "json", "yaml":
	default:
		fmt.Fprintf(stderr, "netctl status: --output %q: use table, wide, json or yaml\n", output)
		return 2
	}
	cfg, err := config.Load(rest, environ, io.Discard)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if cfg.HealthAddr == "" {
		fmt.Fprintln(stderr, "netctl status: the node daemon's health address is disabled (--health-addr=); set it to ask the daemon")
		return 2
	}
	snap, err := Fetch(ctx, cfg.HealthAddr, timeout)
	if err != nil {
		fmt.Fprintf(stderr, "netctl status: %v\n", err)
		return 2
	}
	switch output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap)
	case "yaml":
		raw, _ := json.Marshal(snap)
		y, _ := yaml.JSONToYAML(raw)
		_, _ = stdout.Write(y)
	default:
		Write(stdout, snap)
	}
	if !snap.Ready {
		return 1
	}
	return 0
}

// Fetch asks the daemon at addr for its state.
func Fetch(ctx context.Context, addr string, timeout time.Duration) (*api.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ovnhost does not answer on %s (is it running? is --health-addr the same?): %w", addr, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/status answered %s", addr, resp.Status)
	}
	var s api.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("%s/status: %w", addr, err)
	}
	return &s, nil
}

func unwrapURL(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// Write prints the snapshot for people.
func Write(w io.Writer, s *api.Snapshot) {
	verdict := "READY"
	if !s.Ready {
		verdict = "NOT READY"
	}
	fmt.Fprintf(w, "%s  %s  (ovnhost %s, up %s)\n\n", verdict, s.Status, s.Version, s.Uptime)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHILD\tPID\tSTATE\tRESTARTS\tRSS\tDETAIL")
	for _, c := range s.Children {
		// Units without a process of their own (the CNI server) have no pid.
		state := "starting"
		switch {
		case c.CrashLoop:
			state = "crash-loop"
		case c.Ready:
			state = "ready"
		case c.Waiting == "" && c.LastExit != "":
			state = "down"
		}
		pid, rss := "-", "-"
		if c.Pid > 0 {
			pid = fmt.Sprint(c.Pid)
		}
		if c.RSSBytes > 0 {
			rss = fmt.Sprintf("%.1f MiB", float64(c.RSSBytes)/(1<<20))
		}
		detail := c.Waiting
		if detail == "" && c.LastExit != "" {
			detail = "last exit: " + c.LastExit
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", c.Name, pid, state, c.Restarts, rss, detail)
	}
	_ = tw.Flush()
	if s.Central != nil {
		writeCentral(w, s.Central)
	}
}
