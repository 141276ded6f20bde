package node_test

import (
	"net"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/nodedaemon"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// These tests run the real bin/ovnhost against Debian's OVS/OVN daemons
// (userspace datapath), each node in its own network namespace so the tap
// devices of one test never meet another's (tests/harness/nodedaemon).

// node is one ovnhost process under test.
type node = nodedaemon.Node

// newNode plans a node with every directory under a fresh temp dir.
func newNode(t testing.TB) *node {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ping", "ethtool")
	return nodedaemon.New(t, nodedaemon.Options{})
}

// newNetns creates a network namespace with lo up, removed at cleanup.
func newNetns(t testing.TB, prefix string) string { return netns.New(t, prefix) }

// run runs a command and returns its output, failing t on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return netns.Run(t, name, args...)
}

// notifyListener is testenv's sd_notify listener.
type notifyListener = testenv.NotifyListener

func listenNotify(t testing.TB, dir string) *notifyListener { return testenv.ListenNotify(t, dir) }

// dialInNetns opens a TCP connection from inside the named namespace.
func dialInNetns(name, addr string) (net.Conn, error) { return netns.Dial(name, addr, 5*time.Second) }

// inNetns runs fn on a thread switched into the named namespace: sockets
// fn creates belong to that namespace and stay there afterwards.
func inNetns(name string, fn func() error) error { return netns.Do(name, fn) }

// processesUnder lists live processes whose command line mentions dir.
func processesUnder(dir string) []string { return proc.Describe(proc.Mentioning(dir)) }
