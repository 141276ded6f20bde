package compat_test

import (
	"context"
	"encoding/json"
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

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/tests/harness/debschema"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestNode runs the real node daemon (all-in-one) with conf.db created
// from each release's vswitch.ovsschema (--ovs-schema) and NB/SB from its
// OVN schemas (--ovn-schema-dir; bookworm's where the suite has no OVN),
// served by bookworm's daemons. It must become ready (Open_vSwitch row,
// br-int, ovn-controller's flows), wire a pod through the installed plugin
// with external_ids and QoS on its Interface, and doctor must pass its
// OVSDB checks.
func TestNode(t *testing.T) {
	requireDaemons(t)
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovs-vswitchd", "ovn-controller", "ovn-northd", "ip")
	bookworm := debschema.Bookworm(t)
	for _, r := range debschema.All(t) {
		t.Run(r.Suite, func(t *testing.T) {
			ovnDir := filepath.Dir(bookworm.NB)
			ovn := "OVN 23.03 (bookworm)"
			if r.NB != "" {
				ovnDir, ovn = filepath.Dir(r.NB), "OVN "+r.OVN
			}
			n := startNode(t, "--ovs-schema="+r.VSwitch, "--ovn-schema-dir="+ovnDir)
			t.Logf("%s: conf.db from %s, NB/SB from %s", r.Name(), r.VSwitch, ovn)

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ovs := probe(t, ctx, "Open_vSwitch", "unix:"+n.path("ovs-run", "db.sock"))
			root := selectRows(t, ctx, ovs, "Open_vSwitch")
			if len(root) != 1 {
				t.Fatalf("%d Open_vSwitch rows", len(root))
			}
			if v := ovs.Schema().Version; v != schemaVersions[r.Suite][0] {
				t.Errorf("conf.db schema %s, want %s (the release's, not converted)", v, schemaVersions[r.Suite][0])
			}
			ids := root[0]["external_ids"].(ovsdb.OvsMap).GoMap
			if ids["system-id"] == nil || ids["ovn-encap-type"] == nil {
				t.Errorf("Open_vSwitch external_ids %v lack system-id or ovn-encap-type", ids)
			}
			expectRow(t, ctx, ovs, "Bridge", "name", "br-int")

			// A pod with rates, through the plugin the node installed.
			pod := n.add(t, "p1", "INGRESS_RATE=10;EGRESS_RATE=5")
			ifs := selectRows(t, ctx, ovs, "Interface", ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, mapOf(t, map[string]string{"iface-id": "p1.default"})))
			if len(ifs) != 1 {
				t.Fatalf("%d Interface rows with iface-id=p1.default, want 1", len(ifs))
			}
			ext := ifs[0]["external_ids"].(ovsdb.OvsMap).GoMap
			for _, k := range []string{"pod_name", "pod_namespace", "pod_netns", "ip", "attached-mac", "vendor"} {
				if ext[k] == nil {
					t.Errorf("pod Interface external_ids lack %s: %v", k, ext)
				}
			}
			if ext["ovn-installed"] != "true" {
				t.Errorf("pod Interface has no ovn-installed=true: %v", ext)
			}
			if rate := fmt.Sprint(ifs[0]["ingress_policing_rate"]); rate != "5000" {
				t.Errorf("ingress_policing_rate %v, want 5000 kbit/s (EGRESS_RATE=5)", ifs[0]["ingress_policing_rate"])
			}
			if q := selectRows(t, ctx, ovs, "QoS"); len(q) != 1 || q[0]["type"] != "linux-htb" {
				t.Errorf("QoS rows %v, want one linux-htb (INGRESS_RATE=10)", q)
			}

			// doctor against this node: its OVSDB checks read conf.db and SB.
			rep := n.doctor(t)
			for _, name := range []string{"ovsdb:Open_vSwitch", "ovs-vswitchd", "ovsdb:OVN_Southbound", "chassis", "ovn-version-skew", "ovs-owner"} {
				c, ok := rep.find(name)
				if !ok {
					t.Errorf("doctor has no check %q:\n%s", name, rep.raw)
					continue
				}
				if c.Status != "pass" {
					t.Errorf("doctor %s: %s on %s: %s (fix: %s)", c.Name, c.Status, r.Name(), c.Found, c.Fix)
				}
			}
			if out := n.del(t, pod); out != "" {
				t.Errorf("DEL: %s", out)
			}
			if code := n.stop(); code != 0 {
				t.Errorf("ovnhost exited %d\n%s", code, n.logTail())
			}
		})
	}
}

// node is one `ovnhost run` in its own network namespace.
type node struct {
	t      *testing.T
	dir    string
	ns     string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	notify *notifyListener
}

func (n *node) path(p ...string) string { return filepath.Join(append([]string{n.dir}, p...)...) }

var nsSeq int

func startNode(t *testing.T, extra ...string) *node {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovnhost-compat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	nsSeq++
	n := &node{t: t, dir: dir, ns: fmt.Sprintf("ohc%d-%d", os.Getpid()%10000, nsSeq)}
	run(t, "ip", "netns", "add", n.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
	run(t, "ip", "-n", n.ns, "link", "set", "lo", "up")
	n.args = []string{
		"--ovs-db-dir=" + n.path("ovs-db"), "--ovs-run-dir=" + n.path("ovs-run"), "--ovs-log-dir=" + n.path("log"),
		"--ovn-db-dir=" + n.path("ovn-db"), "--ovn-run-dir=" + n.path("ovn-run"), "--ovn-log-dir=" + n.path("log"),
		"--health-addr=127.0.0.1:10665", "--node-name=compat-node", "--stop-timeout=5s", "--start-timeout=30s",
		"--cni-socket=" + n.path("cni.sock"), "--cni-bin-dir=" + n.path("cni-bin"), "--cni-conf-dir=" + n.path("cni-conf"),
	}
	n.notify = listenNotify(t, dir)
	args := append(append([]string{"netns", "exec", n.ns, testenv.Binary(t, "ovnhost"), "run"}, n.args...), extra...)
	n.cmd = exec.Command("ip", args...)
	logf, err := os.Create(n.path("ovnhost.log"))
	if err != nil {
		t.Fatal(err)
	}
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NOTIFY_SOCKET=" + n.notify.path}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func() { _ = n.cmd.Wait(); logf.Close(); close(n.exited) }()
	t.Cleanup(func() {
		select {
		case <-n.exited:
		default:
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.exited:
			case <-time.After(30 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
			}
		}
	})
	if err := n.notify.waitFor("READY=1", 60*time.Second, n.exited); err != nil {
		t.Fatalf("%v\n%s", err, n.logTail())
	}
	return n
}

func (n *node) stop() int {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		n.t.Fatalf("ovnhost did not exit within 60 s of SIGTERM\n%s", n.logTail())
	}
	return n.cmd.ProcessState.ExitCode()
}

func (n *node) logTail() string {
	raw, _ := os.ReadFile(n.path("ovnhost.log"))
	lines := strings.Split(string(raw), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return "--- ovnhost log tail ---\n" + strings.Join(lines, "\n")
}

type pod struct{ name, netns string }

// add plays kubelet: a network namespace and a CNI ADD through the
// installed plugin (standalone: the pod's requests ride in CNI_ARGS).
func (n *node) add(t *testing.T, name, args string) pod {
	t.Helper()
	p := pod{name: name, netns: n.ns + "-" + name}
	run(t, "ip", "netns", "add", p.netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
	a := "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name
	if args != "" {
		a += ";" + args
	}
	out, err := n.cni(p, "ADD", a)
	if err != nil {
		t.Fatalf("CNI ADD %s: %v\n%s\n%s", name, err, out, n.logTail())
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if json.Unmarshal([]byte(out), &res) != nil || len(res.IPs) == 0 {
		t.Fatalf("CNI ADD %s: no address in %s", name, out)
	}
	return p
}

func (n *node) del(t *testing.T, p pod) string {
	out, err := n.cni(p, "DEL", "K8S_POD_NAMESPACE=default;K8S_POD_NAME="+p.name)
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return ""
}

func (n *node) cni(p pod, command, args string) (string, error) {
	conf, err := os.ReadFile(n.path("cni-conf", "00-ovnhost.conflist"))
	if err != nil {
		return "", err
	}
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &list); err != nil || len(list.Plugins) == 0 {
		return "", fmt.Errorf("conflist %s: %v", conf, err)
	}
	var plugin map[string]any
	_ = json.Unmarshal(list.Plugins[0], &plugin)
	plugin["cniVersion"], plugin["name"] = list.CNIVersion, list.Name
	stdin, _ := json.Marshal(plugin)
	cmd := exec.Command(n.path("cni-bin", "ovnhost-cni"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + p.name, "CNI_NETNS=/var/run/netns/" + p.netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + n.path("cni-bin"), "CNI_ARGS=" + args}
	cmd.Stdin = strings.NewReader(string(stdin))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// doctorReport is `netctl doctor --output json`.
type doctorReport struct {
	Checks []doctorCheck `json:"checks"`
	raw    string
}

type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix"`
}

func (r doctorReport) find(name string) (doctorCheck, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return doctorCheck{}, false
}

func (n *node) doctor(t *testing.T) doctorReport {
	t.Helper()
	args := append([]string{"netns", "exec", n.ns, testenv.Binary(t, "netctl"), "doctor", "--output", "json"}, n.args...)
	out, _ := exec.Command("ip", args...).Output() // exit 1/2 for warnings/failures elsewhere on this host
	var rep doctorReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("netctl doctor --output json: %v\n%s", err, out)
	}
	rep.raw = string(out)
	return rep
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// notifyListener is the systemd side of sd_notify.
type notifyListener struct {
	path string
	mu   sync.Mutex
	msgs []string
	cond chan struct{}
}

func listenNotify(t *testing.T, dir string) *notifyListener {
	t.Helper()
	l := &notifyListener{path: filepath.Join(dir, "notify.sock"), cond: make(chan struct{})}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: l.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.msgs = append(l.msgs, strings.Split(string(buf[:k]), "\n")...)
			close(l.cond)
			l.cond = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *notifyListener) waitFor(msg string, d time.Duration, exited <-chan struct{}) error {
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for _, m := range l.msgs {
			if m == msg {
				l.mu.Unlock()
				return nil
			}
		}
		ch := l.cond
		l.mu.Unlock()
		select {
		case <-ch:
		case <-exited:
			return fmt.Errorf("ovnhost exited before sd_notify %s", msg)
		case <-deadline:
			return fmt.Errorf("no sd_notify %s within %v", msg, d)
		}
	}
}
