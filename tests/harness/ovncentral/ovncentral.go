// Package ovncentral starts a real OVN central for tests: the northbound and
// southbound ovsdb-servers and ovn-northd from Debian's ovn-central package,
// as children of the test process, on unix sockets in a private directory.
//
//	c := ovncentral.Start(t)          // stopped and removed by t.Cleanup
//	nb := c.NB()                      // "unix:/tmp/ovnc.../nb.sock"
//	c.WaitNorthd(ctx)                 // northd has processed every NB change so far
//
// Missing programs skip the test, or fail it under OVNHOST_TEST_STRICT=1.
package ovncentral

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Schema locations of Debian's ovn-common package.
const (
	NBSchema = "/usr/share/ovn/ovn-nb.ovsschema"
	SBSchema = "/usr/share/ovn/ovn-sb.ovsschema"
)

// Central is a running NB + SB + northd.
type Central struct {
	Dir string
	// With StartSSL: NB also listens on NBSSL(), with key, cert and cacert
	// in TLSDir (Kube-OVN's /var/run/tls layout).
	TLSDir  string
	sslPort int
	mu      sync.Mutex
	proc    map[string]*proc
	t       testing.TB
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	args []string
}

// NB is the northbound endpoint for libovsdb.
func (c *Central) NB() string { return "unix:" + filepath.Join(c.Dir, "nb.sock") }

// SB is the southbound endpoint.
func (c *Central) SB() string { return "unix:" + filepath.Join(c.Dir, "sb.sock") }

// NBSSL is the northbound ssl: endpoint (StartSSL only).
func (c *Central) NBSSL() string { return fmt.Sprintf("ssl:127.0.0.1:%d", c.sslPort) }

// StartSSL is Start plus an ssl: listener on the NB with a fresh CA, server
// and client certificates.
func StartSSL(t testing.TB) *Central { return start(t, true) }

// Start starts NB, SB and northd; t.Cleanup stops them and removes the directory.
func Start(t testing.TB) *Central { return start(t, false) }

// StartSchemas is Start with the NB and SB created from other schema files
// (another OVN release's, served by the installed ovsdb-server and northd).
func StartSchemas(t testing.TB, nbSchema, sbSchema string) *Central {
	return startWith(t, false, nbSchema, sbSchema)
}

func start(t testing.TB, ssl bool) *Central { return startWith(t, ssl, NBSchema, SBSchema) }

func startWith(t testing.TB, ssl bool, nbSchema, sbSchema string) *Central {
	t.Helper()
	if testing.Short() && !testenv.Strict() { // make test-unit only; make test never passes -short
		t.Skip("real daemons are not started under -short (make test-unit)")
	}
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool", "ovn-northd")
	for _, s := range []string{nbSchema, sbSchema} {
		if _, err := os.Stat(s); err != nil {
			if testenv.Strict() {
				t.Fatalf("prerequisite missing: %s (Debian package ovn-common)", s)
			}
			t.Skipf("prerequisite missing: %s", s)
		}
	}
	// Short path: unix socket names are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "ovnc")
	if err != nil {
		t.Fatal(err)
	}
	c := &Central{Dir: dir, proc: map[string]*proc{}, t: t}
	t.Cleanup(c.Stop)
	if ssl {
		c.TLSDir = filepath.Join(dir, "tls")
		if err := os.MkdirAll(c.TLSDir, 0o700); err != nil {
			t.Fatal(err)
		}
		// Kube-OVN's layout: cacert, a client pair key/cert, and the
		// servers' own pair. Certificates name roles, not addresses.
		pki := testenv.NewPKI(t, c.TLSDir)
		if err := os.Rename(pki.CACert(), filepath.Join(c.TLSDir, "cacert")); err != nil {
			t.Fatal(err)
		}
		pki.IssueTo(t, filepath.Join(c.TLSDir, "server.key"), filepath.Join(c.TLSDir, "server.crt"), "ovnnb")
		pki.IssueTo(t, filepath.Join(c.TLSDir, "key"), filepath.Join(c.TLSDir, "cert"), "ovn-controller")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.sslPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	for _, db := range []struct{ name, schema string }{{"nb", nbSchema}, {"sb", sbSchema}} {
		file := filepath.Join(dir, db.name+".db")
		if out, err := exec.Command(mustLook(t, "ovsdb-tool"), "create", file, db.schema).CombinedOutput(); err != nil {
			t.Fatalf("ovsdb-tool create %s: %v: %s", file, err, out)
		}
		c.startDB(t, db.name)
	}
	c.start(t, "northd", mustLook(t, "ovn-northd"),
		"--ovnnb-db="+c.NB(), "--ovnsb-db="+c.SB(),
		"--unixctl="+filepath.Join(dir, "northd.ctl"),
		"--log-file="+filepath.Join(dir, "northd.log"), "-vconsole:off", "-vfile:info")
	return c
}

func (c *Central) startDB(t testing.TB, name string) {
	dir := c.Dir
	args := []string{"--remote=punix:" + filepath.Join(dir, name+".sock"),
		"--unixctl=" + filepath.Join(dir, name+".ctl"),
		"--log-file=" + filepath.Join(dir, name+".log"), "-vconsole:off", "-vfile:info",
		"--no-chdir"}
	if name == "nb" && c.TLSDir != "" {
		args = append(args, fmt.Sprintf("--remote=pssl:%d:127.0.0.1", c.sslPort),
			"--private-key="+filepath.Join(c.TLSDir, "server.key"), "--certificate="+filepath.Join(c.TLSDir, "server.crt"),
			"--ca-cert="+filepath.Join(c.TLSDir, "cacert"))
	}
	c.start(t, name, mustLook(t, "ovsdb-server"), append(args, filepath.Join(dir, name+".db"))...)
	if err := waitSocket(filepath.Join(dir, name+".sock"), c.proc[name], 10*time.Second); err != nil {
		t.Fatalf("%s ovsdb-server: %v; log: %s", name, err, tail(filepath.Join(dir, name+".log")))
	}
}

func mustLook(t testing.TB, name string) string {
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func (c *Central) start(t testing.TB, name, bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), args: append([]string{bin}, args...)}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.proc[name] = p
	c.mu.Unlock()
}

// waitSocket waits until the unix socket accepts a connection or the process exits.
func waitSocket(path string, p *proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.Dial("unix", path)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("socket %s not accepting connections after %s: %v", path, d, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before %s accepted connections", path)
		case <-tick.C:
		}
	}
}

// StopNB kills the northbound ovsdb-server (to test reconnects); StartNB brings it back with its data.
func (c *Central) StopNB() { c.kill("nb") }

// StartNB restarts the northbound ovsdb-server on the same socket and database file.
func (c *Central) StartNB(t testing.TB) { c.startDB(t, "nb") }

// StopSB kills the southbound ovsdb-server (the central unreachable for the
// nodes); StartSB brings it back with its data.
func (c *Central) StopSB() { c.kill("sb") }

// StopNorthd stops ovn-northd (its SB_Global options then stay as written:
// OVN's fail-safe upgrade procedure edits northd_internal_version so).
func (c *Central) StopNorthd() { c.kill("northd") }

// StartSB restarts the southbound ovsdb-server on the same socket and database file.
func (c *Central) StartSB(t testing.TB) { c.startDB(t, "sb") }

func (c *Central) kill(name string) {
	c.mu.Lock()
	p := c.proc[name]
	delete(c.proc, name)
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Stop stops northd, SB and NB and removes the directory. Idempotent.
func (c *Central) Stop() {
	for _, n := range []string{"northd", "sb", "nb"} {
		c.kill(n)
	}
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// Log returns the tail of a daemon's log ("nb", "sb", "northd"), for failure messages.
func (c *Central) Log(name string) string { return tail(filepath.Join(c.Dir, name+".log")) }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// WaitNorthd bumps NB_Global.nb_cfg and waits until northd reports it in
// sb_cfg: every NB change made before the call is then in the SB.
func (c *Central) WaitNorthd(ctx context.Context) error {
	dbm, err := nbdb.FullDatabaseModel()
	if err != nil {
		return err
	}
	cl, err := client.NewOVSDBClient(dbm, client.WithEndpoint(c.NB()))
	if err != nil {
		return err
	}
	if err := cl.Connect(ctx); err != nil {
		return fmt.Errorf("connect %s: %w", c.NB(), err)
	}
	defer cl.Close()
	if _, err := cl.Monitor(ctx, cl.NewMonitor(client.WithTable(&nbdb.NBGlobal{}))); err != nil {
		return err
	}
	var gs []nbdb.NBGlobal
	if err := cl.List(ctx, &gs); err != nil {
		return err
	}
	var target int
	if len(gs) == 0 {
		// northd creates the row; wait for it.
		if err := waitCond(ctx, cl, func() bool { return cl.List(ctx, &gs) == nil && len(gs) > 0 }); err != nil {
			return fmt.Errorf("waiting for ovn-northd to create NB_Global: %w; northd log: %s", err, c.Log("northd"))
		}
	}
	g := gs[0]
	target = g.NbCfg + 1
	ops, err := cl.Where(&g).Mutate(&g, model.Mutation{Field: &g.NbCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1})
	if err != nil {
		return err
	}
	if _, err := cl.Transact(ctx, ops...); err != nil {
		return err
	}
	if err := waitCond(ctx, cl, func() bool {
		var gs []nbdb.NBGlobal
		return cl.List(ctx, &gs) == nil && len(gs) > 0 && gs[0].SbCfg >= target
	}); err != nil {
		return fmt.Errorf("waiting for ovn-northd to report sb_cfg >= %d: %w; northd log: %s", target, err, c.Log("northd"))
	}
	return nil
}

// waitCond re-checks cond whenever the libovsdb cache changes, until ctx ends.
func waitCond(ctx context.Context, cl client.Client, cond func() bool) error {
	ch := make(chan struct{}, 1)
	cl.Cache().AddEventHandler(&notify{ch: ch})
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("condition not reached: " + ctx.Err().Error())
		case <-ch:
		}
	}
}

type notify struct{ ch chan struct{} }

func (n *notify) poke() {
	select {
	case n.ch <- struct{}{}:
	default:
	}
}
func (n *notify) OnAdd(string, model.Model)                 { n.poke() }
func (n *notify) OnUpdate(string, model.Model, model.Model) { n.poke() }
func (n *notify) OnDelete(string, model.Model)              { n.poke() }

// PID is the process id of a daemon ("nb", "sb", "northd"), 0 when it is
// not running (benchmarks read its RSS and CPU from /proc).
func (c *Central) PID(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.proc[name]; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Ctl is the unixctl socket of a daemon ("nb", "sb", "northd"), for
// ovn-appctl -t (stopwatch/show, ovsdb-server/compact).
func (c *Central) Ctl(name string) string { return filepath.Join(c.Dir, name+".ctl") }

// DBFile is the database file of "nb" or "sb".
func (c *Central) DBFile(name string) string { return filepath.Join(c.Dir, name+".db") }
