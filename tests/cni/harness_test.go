package cni_test

// The harness: the whole test binary re-executes itself inside a private
// network namespace (so br-int's tap devices, ovn0 and its routes never touch
// the real host), starts a real OVN central (tests/harness/ovncentral) and a
// real OVS node (ovsdb-server, ovs-vswitchd with the userspace datapath,
// ovn-controller) as children, runs the CNI server in-process and plays
// kubelet by executing the installed ovnhost-cni binary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"

	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

const envInNetns = "OVNHOST_CNI_TEST_NETNS"

// pluginPath is the ovnhost-cni binary the tests install and execute.
var pluginPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() == 0 && os.Getenv(envInNetns) == "" {
		if !testing.Short() {
			// The private netns has no route to the module proxy: build
			// (or find cached) kube-apiserver and etcd out here.
			testing.Benchmark(func(b *testing.B) { kubeapi.Binaries(b) })
		}
		os.Exit(reexecInNetns())
	}
	if os.Getenv(envInNetns) != "" {
		if lo, err := netlink.LinkByName("lo"); err == nil {
			_ = netlink.LinkSetUp(lo)
		}
	}
	code := m.Run()
	if pluginDir != "" {
		os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// reexecInNetns runs this test binary again inside a fresh named netns
// (`ip netns exec` also gives it a matching /sys) and deletes the netns after.
func reexecInNetns() int {
	name := fmt.Sprintf("ovht-cni-%d", os.Getpid())
	if _, err := podnettest.Create(name); err != nil {
		fmt.Fprintln(os.Stderr, "create the test netns:", err)
		return 1
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "delete netns %s: %v %s\n", name, err, out)
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", name, exe}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInNetns+"="+name)
	if !testing.Short() {
		cmd.Env = append(cmd.Env, buildOldLibcnis()...)
	}
	if wantsBench() {
		if dir, err := buildRefPlugins(); err != nil {
			cmd.Env = append(cmd.Env, envRefDir+"_ERR="+err.Error())
		} else {
			cmd.Env = append(cmd.Env, envRefDir+"="+dir)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

var pluginDir string

func wantsBench() bool {
	for i, a := range os.Args {
		if strings.HasPrefix(a, "-test.bench=") && a != "-test.bench=" || a == "-test.bench" && i+1 < len(os.Args) && os.Args[i+1] != "" {
			return true
		}
	}
	return false
}

// plugin returns the ovnhost-cni binary: $OVNHOST_BIN (make build) or a
// fresh build of ./cni/cmd/ovnhost-cni.
func plugin(t testing.TB) string {
	t.Helper()
	if pluginPath != "" {
		return pluginPath
	}
	if d := os.Getenv("OVNHOST_BIN"); d != "" {
		pluginPath = testenv.Binary(t, "ovnhost-cni")
		return pluginPath
	}
	dir, err := os.MkdirTemp("", "ovht-cnibin")
	if err != nil {
		t.Fatal(err)
	}
	pluginDir = dir
	out := filepath.Join(dir, "ovnhost-cni")
	cmd := exec.Command(goBin(), "build", "-trimpath", "-o", out, "./cni/cmd/ovnhost-cni")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build ovnhost-cni: %v\n%s", err, b)
	}
	pluginPath = out
	return out
}

func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// node is a running OVS+OVN node with the CNI server.
type node struct {
	t       testing.TB
	dir     string
	central *ovncentral.Central
	ovs     client.Client
	procs   []*daemon
	cfg     *server.Options
	srv     *server.Server
	reg     *prometheus.Registry
	logs    lockedBuffer // everything the CNI server logged (warn and up)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon is one OVS/OVN daemon of the node, restartable with its spec.
type daemon struct {
	spec proc.Spec
	proc *proc.Process
}

type nodeOpts struct {
	mirrorOutput string
	beforeServer func(cfg *server.Options) // runs before the CNI server starts
	serverOpts   []server.Option
	noServer     bool
}

// startNode brings up central + node + CNI server; everything stops at cleanup.
func startNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	if testing.Short() {
		t.Skip("real OVS/OVN daemons: not in -short")
	}
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ip", "ping")
	if os.Getenv(envInNetns) == "" {
		t.Fatal("the harness must run inside its private netns (TestMain re-executes as root)")
	}
	n := &node{t: t, central: ovncentral.Start(t)}
	dir, err := os.MkdirTemp("", "ovht")
	if err != nil {
		t.Fatal(err)
	}
	n.dir = dir
	t.Cleanup(n.stop)
	db := filepath.Join(dir, "conf.db")
	if out, err := exec.Command(look(t, "ovsdb-tool"), "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v %s", err, out)
	}
	sock := filepath.Join(dir, "db.sock")
	env := []string{"OVS_RUNDIR=" + dir, "OVS_LOGDIR=" + dir, "OVS_DBDIR=" + dir, "OVS_SYSCONFDIR=" + dir, "OVN_RUNDIR=" + dir, "OVN_LOGDIR=" + dir}
	if err := proc.WaitFile(sock, 20*time.Second, func() error {
		n.start("ovsdb-server", env, look(t, "ovsdb-server"), db, "--remote=punix:"+sock,
			"--unixctl="+filepath.Join(dir, "ovsdb-server.ctl"), "--log-file="+filepath.Join(dir, "ovsdb-server.log"),
			"-vconsole:off", "--no-chdir")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dbm, err := vswitch.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The socket file exists a moment before ovsdb-server listens on it:
	// ovsdbconn retries a refused connection until the deadline.
	conn, err := ovsdbconn.Dial(ctx, dbm, "unix:"+sock, ovsdbconn.Options{Name: "ovsdb-server (conf.db)"})
	if err != nil {
		t.Fatalf("connect to conf.db: %v", err)
	}
	n.ovs = conn.Client
	// Root row with the chassis configuration, then vswitchd, then br-int
	// (before ovn-controller, or its OpenFlow connection backs off).
	n.transact(ctx,
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Open_vSwitch", Row: ovsdb.Row{
			"next_cfg": 1,
			"external_ids": ovsdb.OvsMap{GoMap: map[any]any{
				"system-id": "node1", "hostname": "node1", "ovn-remote": n.central.SB(),
				"ovn-encap-type": "geneve", "ovn-encap-ip": "127.0.0.1", "ovn-bridge-datapath-type": "netdev",
			}}}})
	n.start("ovs-vswitchd", env, look(t, "ovs-vswitchd"), "unix:"+sock, "--disable-system",
		"--unixctl="+filepath.Join(dir, "ovs-vswitchd.ctl"), "--log-file="+filepath.Join(dir, "ovs-vswitchd.log"),
		"-vconsole:off", "--no-chdir")
	n.transact(ctx,
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Interface", UUIDName: "brif", Row: ovsdb.Row{"name": "br-int", "type": "internal"}},
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Port", UUIDName: "brport", Row: ovsdb.Row{"name": "br-int",
			"interfaces": ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: "brif"}}}}},
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Bridge", UUIDName: "br", Row: ovsdb.Row{"name": "br-int",
			"datapath_type": "netdev", "fail_mode": "secure",
			"other_config": ovsdb.OvsMap{GoMap: map[any]any{"disable-in-band": "true"}},
			"ports":        ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: "brport"}}}}},
		ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: all(),
			Mutations: []ovsdb.Mutation{
				*ovsdb.NewMutation("bridges", ovsdb.MutateOperationInsert, ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: "br"}}}),
				*ovsdb.NewMutation("next_cfg", ovsdb.MutateOperationAdd, 1)}})
	// vswitchd has applied it when cur_cfg reaches next_cfg (2): a
	// server-side wait, no polling.
	timeout := 20000
	n.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Open_vSwitch", Where: all(),
		Columns: []string{"cur_cfg"}, Until: "==", Rows: []ovsdb.Row{{"cur_cfg": 2}}, Timeout: &timeout})
	n.start("ovn-controller", env, look(t, "ovn-controller"), "unix:"+sock,
		"--log-file="+filepath.Join(dir, "ovn-controller.log"), "-vconsole:off", "--no-chdir",
		"--pidfile="+filepath.Join(dir, "ovn-controller.pid"))

	n.cfg = &server.Options{
		Node: &nodeconfig.NodeConfig{
			Name:     "node1",
			Datapath: nodeconfig.Userspace,
			NB:       nodeconfig.Remote{Endpoint: n.central.NB()},
			SB:       nodeconfig.Remote{Endpoint: n.central.SB()},
		},
		BinDir:  filepath.Join(dir, "cni-bin"),
		ConfDir: filepath.Join(dir, "cni-conf"),
		Socket:  filepath.Join(dir, "cni.sock"),
	}
	n.cfg.MirrorOutput = o.mirrorOutput
	if o.beforeServer != nil {
		o.beforeServer(n.cfg)
	}
	if !o.noServer {
		n.startServer(append([]server.Option{server.WithStandalone()}, o.serverOpts...)...)
	}
	return n
}

func (n *node) startServer(opts ...server.Option) {
	t := n.t
	t.Helper()
	n.reg = prometheus.NewRegistry()
	level := slog.LevelWarn
	if os.Getenv("CNI_TEST_LOG") == "info" {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &n.logs), &slog.HandlerOptions{Level: level}))
	opts = append([]server.Option{server.WithRegisterer(n.reg), server.WithPluginSource(plugin(t))}, opts...)
	o := *n.cfg
	o.OVS, o.Log = n.ovs, log
	srv, err := server.New(o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("start the CNI server: %v", err)
	}
	n.srv = srv
}

func (n *node) stopServer() {
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.srv.Stop(ctx); err != nil {
			n.t.Errorf("stop the CNI server: %v", err)
		}
		n.srv = nil
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func look(t testing.TB, name string) string {
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func (n *node) transact(ctx context.Context, ops ...ovsdb.Operation) []ovsdb.OperationResult {
	n.t.Helper()
	res, err := n.ovs.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		n.t.Fatalf("OVSDB transaction: %v %+v", err, res)
	}
	return res
}

func (n *node) start(name string, env []string, bin string, args ...string) {
	n.t.Helper()
	d := &daemon{spec: proc.Spec{Name: name, Path: bin, Args: args, Env: append(os.Environ(), env...), Pdeathsig: true}}
	d.proc = proc.MustStart(n.t, d.spec)
	n.procs = append(n.procs, d)
}

func (n *node) daemon(name string) *daemon {
	n.t.Helper()
	for _, d := range n.procs {
		if d.spec.Name == name {
			return d
		}
	}
	n.t.Fatalf("no daemon %s", name)
	return nil
}

// kill stops a daemon for good (SIGTERM).
func (n *node) kill(name string) {
	n.t.Helper()
	d := n.daemon(name)
	_ = d.proc.Signal(syscall.SIGTERM)
	<-d.proc.Exited()
}

// crash kills a daemon with SIGKILL and starts it again with the same
// arguments, as a supervisor would.
func (n *node) crash(name string) {
	n.t.Helper()
	d := n.daemon(name)
	d.proc.Kill()
	d.proc = proc.MustStart(n.t, d.spec)
}

func (n *node) stop() {
	n.stopServer()
	if n.ovs != nil {
		n.ovs.Close()
	}
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].proc.Terminate(5 * time.Second)
	}
	// netdev bridges are tap devices that outlive vswitchd.
	for _, l := range []string{"br-int", "ovs-netdev", "ovn0", "mirror0"} {
		if link, err := netlink.LinkByName(l); err == nil {
			_ = netlink.LinkDel(link)
		}
	}
	if n.t.Failed() {
		for _, f := range []string{"ovs-vswitchd.log", "ovn-controller.log"} {
			b, _ := os.ReadFile(filepath.Join(n.dir, f))
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 20 {
				lines = lines[len(lines)-20:]
			}
			n.t.Logf("%s:\n%s", f, strings.Join(lines, "\n"))
		}
		n.t.Logf("CNI server (warnings and errors):\n%s", n.logs.String())
	}
	os.RemoveAll(n.dir)
}

// ---------------------------------------------------------------- playing kubelet

type cniCall struct {
	Command, ContainerID, Netns, IfName, Args string
	Conf                                      []byte
}

type cniOut struct {
	Code   int // exit code
	Stdout []byte
	Err    struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	}
}

// netconf is the installed conflist's plugin entry as a runtime passes it.
func (n *node) netconf(t testing.TB, version string, extra map[string]any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.cfg.ConfDir, cniconf.Conflist))
	if err != nil {
		t.Fatalf("installed conflist: %v", err)
	}
	return confFromList(t, b, version, extra)
}

// confFromList turns a conflist into the configuration of its first plugin,
// the way libcni does (cniVersion and name copied in).
func confFromList(t testing.TB, b []byte, opt ...any) []byte {
	t.Helper()
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Plugins) == 0 {
		t.Fatalf("conflist %s: %v", b, err)
	}
	conf := list.Plugins[0]
	conf["cniVersion"] = list.CNIVersion
	if len(opt) > 0 && opt[0].(string) != "" {
		conf["cniVersion"] = opt[0].(string)
	}
	conf["name"] = list.Name
	if len(opt) > 1 {
		for k, v := range opt[1].(map[string]any) {
			conf[k] = v
		}
	}
	out, _ := json.Marshal(conf)
	return out
}

// resultIP is the first address of an ADD result.
func resultIP(t testing.TB, b []byte) string {
	t.Helper()
	var r addResult
	if err := json.Unmarshal(b, &r); err != nil || len(r.IPs) == 0 {
		t.Fatalf("ADD result %s: %v", b, err)
	}
	return strings.Split(r.IPs[0].Address, "/")[0]
}

func (n *node) installedPlugin() string { return filepath.Join(n.cfg.BinDir, "ovnhost-cni") }

func runPlugin(t testing.TB, bin string, c cniCall) cniOut {
	t.Helper()
	return runPluginEnv(t, bin, c)
}

// runPluginEnv executes a CNI plugin as kubelet would; extra overrides the
// environment (CNI_PATH defaults to the plugin's directory).
func runPluginEnv(t testing.TB, bin string, c cniCall, extra ...string) cniOut {
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND=" + c.Command, "CNI_CONTAINERID=" + c.ContainerID, "CNI_NETNS=" + c.Netns,
		"CNI_IFNAME=" + c.IfName, "CNI_ARGS=" + c.Args, "CNI_PATH=" + filepath.Dir(bin)}, extra...)
	cmd.Stdin = bytes.NewReader(c.Conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var out cniOut
	out.Stdout = stdout.Bytes()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			out.Code = -1
			out.Err.Msg = fmt.Sprintf("exec %s: %v", bin, err)
			return out
		}
		out.Code = ee.ExitCode()
		_ = json.Unmarshal(stdout.Bytes(), &out.Err)
	}
	return out
}

type addResult struct {
	CNIVersion string `json:"cniVersion"`
	Interfaces []struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
}

// pod is a network namespace wired through the plugin.
type pod struct {
	name, ns, id, netns string
	ip                  string
	raw                 []byte
	args                string
}

func (n *node) add(t testing.TB, name, args string) *pod {
	t.Helper()
	p := &pod{name: name, ns: "default", id: "cid-" + name, netns: podnettest.NewNetNS(t, "ovht-"+name)}
	p.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name
	if args != "" {
		p.args += ";" + args
	}
	out := runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: p.id, Netns: p.netns, IfName: "eth0", Args: p.args, Conf: n.netconf(t, "", nil)})
	if out.Code != 0 {
		t.Fatalf("ADD %s: exit %d: code %d: %s", name, out.Code, out.Err.Code, out.Err.Msg)
	}
	p.ip = resultIP(t, out.Stdout)
	p.raw = out.Stdout
	return p
}

func (n *node) del(t testing.TB, p *pod) cniOut {
	t.Helper()
	return runPlugin(t, n.installedPlugin(), cniCall{Command: "DEL", ContainerID: p.id, Netns: p.netns, IfName: "eth0", Args: p.args, Conf: n.netconf(t, "", nil)})
}

// inNetns runs fn in the pod's netns (sockets made there stay there).
func inNetns(t testing.TB, path string, fn func() error) {
	t.Helper()
	if err := podnet.InNetNSPath(path, fn); err != nil {
		t.Fatal(err)
	}
}

func ping(t testing.TB, netnsPath, ip string) error {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ping", "-c", "3", "-i", "0.2", "-W", "2", ip).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", ip, filepath.Base(netnsPath), err, out)
	}
	return nil
}

// selectRows reads rows of a conf.db table.
func (n *node) selectRows(t testing.TB, table string, where ...ovsdb.Condition) []ovsdb.Row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if where == nil {
		where = []ovsdb.Condition{}
	}
	res := n.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where})
	return res[0].Rows
}

func jsonRaw(b []byte) json.RawMessage { return json.RawMessage(b) }

func podnetNewNetNS(t testing.TB) string { return podnettest.NewNetNS(t, "ovht") }

// all matches every row (an empty where is dropped from non-select operations).
func all() []ovsdb.Condition {
	return []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionNotEqual, ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"})}
}
