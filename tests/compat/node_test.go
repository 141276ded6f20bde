package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/tests/harness/debschema"
	"github.com/ovnhost/ovnhost/tests/harness/nodedaemon"
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
			ovs := probe(t, ctx, "Open_vSwitch", "unix:"+n.Path("ovs-run", "db.sock"))
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
			if code := n.Stop(); code != 0 {
				t.Errorf("ovnhost exited %d\n%s", code, n.LogTail())
			}
		})
	}
}

// node is one `ovnhost run` in its own network namespace
// (tests/harness/nodedaemon).
type node struct{ *nodedaemon.Node }

func startNode(t *testing.T, extra ...string) *node {
	t.Helper()
	n := nodedaemon.New(t, nodedaemon.Options{Name: "compat-node"})
	n.Start(extra...)
	return &node{n}
}

type pod struct{ name, netns string }

// add plays kubelet: a network namespace and a CNI ADD through the
// installed plugin (standalone: the pod's requests ride in CNI_ARGS).
func (n *node) add(t *testing.T, name, args string) pod {
	t.Helper()
	p := pod{name: name, netns: n.NS + "-" + name}
	run(t, "ip", "netns", "add", p.netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
	a := "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name
	if args != "" {
		a += ";" + args
	}
	out, err := n.cni(p, "ADD", a)
	if err != nil {
		t.Fatalf("CNI ADD %s: %v\n%s\n%s", name, err, out, n.LogTail())
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
	conf, err := os.ReadFile(n.Path("cni-conf", "00-ovnhost.conflist"))
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
	cmd := exec.Command(n.Path("cni-bin", "ovnhost-cni"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + p.name, "CNI_NETNS=/var/run/netns/" + p.netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + n.Path("cni-bin"), "CNI_ARGS=" + args}
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
	args := append([]string{"netns", "exec", n.NS, testenv.Binary(t, "netctl"), "doctor", "--output", "json"}, n.Args...)
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
