package node_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Standalone mode (no Kubernetes) against an OVN central that only speaks
// SSL: the node is given ENABLE_SSL=true and OVN_DB_IPS, as a Kube-OVN
// node with TLS would be, and no KUBECONFIG, so its CNI server allocates
// pod addresses itself from the central's northbound database. That
// connection must carry the node's certificates: without them the CNI
// server cannot start and the node never becomes ready.
//
// The central runs in its own network namespace, joined to the node's by
// a veth underlay; its NB and SB listen on pssl: at the central's address
// only (plus unix sockets for the test itself), so the node can reach them
// over SSL and in no other way.
func TestStandaloneOverSSLCentralWiresAPod(t *testing.T) {
	n := newNode(t)
	testenv.RequireCommands(t, "ovsdb-client")
	testenv.Binary(t, "ovnhost-cni") // the plugin the node installs
	const centralIP, nodeIP = "192.168.203.1", "192.168.203.2"

	pkiDir := n.Path("pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	pki := testenv.NewPKI(t, pkiDir)
	pki.Issue(t, "ovn", "node-chassis") // ovn-privkey.pem, ovn-cert.pem: the node's defaults under --ssl-dir
	nbKey, nbCert := pki.Issue(t, "nb", "ovn-nb")
	sbKey, sbCert := pki.Issue(t, "sb", "ovn-sb")

	cns := newNetns(t, "ohc")
	run(t, "ip", "link", "add", "ul0", "netns", n.NS, "type", "veth", "peer", "name", "ul0", "netns", cns)
	run(t, "ip", "-n", cns, "addr", "add", centralIP+"/24", "dev", "ul0")
	run(t, "ip", "-n", cns, "link", "set", "ul0", "up")
	run(t, "ip", "-n", n.NS, "addr", "add", nodeIP+"/24", "dev", "ul0")
	run(t, "ip", "-n", n.NS, "link", "set", "ul0", "up")

	c := n.Path("central")
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "ovsdb-tool", "create", c+"/nb.db", "/usr/share/ovn/ovn-nb.ovsschema")
	run(t, "ovsdb-tool", "create", c+"/sb.db", "/usr/share/ovn/ovn-sb.ovsschema")
	daemon := func(name string, args ...string) {
		args = append(args, "--no-chdir", "-vconsole:off", "--log-file="+filepath.Join(c, name+".log"), "--unixctl="+filepath.Join(c, name+".ctl"))
		cmd := exec.Command("ip", append([]string{"netns", "exec", cns}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	ca := pkiDir + "/cacert.pem"
	daemon("nb", "ovsdb-server", c+"/nb.db", "--remote=punix:"+c+"/nb.sock", "--remote=pssl:6641:"+centralIP,
		"--private-key="+nbKey, "--certificate="+nbCert, "--ca-cert="+ca)
	daemon("sb", "ovsdb-server", c+"/sb.db", "--remote=punix:"+c+"/sb.sock", "--remote=pssl:6642:"+centralIP,
		"--private-key="+sbKey, "--certificate="+sbCert, "--ca-cert="+ca)
	daemon("northd", "ovn-northd", "--ovnnb-db=unix:"+c+"/nb.sock", "--ovnsb-db=unix:"+c+"/sb.sock")
	// Both servers answer (ovsdb-client retries until their sockets exist);
	// their pssl: listeners were opened with the unix ones.
	run(t, "ovsdb-client", "--timeout=20", "wait", "unix:"+c+"/nb.sock", "OVN_Northbound", "connected")
	run(t, "ovsdb-client", "--timeout=20", "wait", "unix:"+c+"/sb.sock", "OVN_Southbound", "connected")

	// No KUBECONFIG (newNode hands the daemon only PATH and NOTIFY_SOCKET).
	n.Env = []string{"ENABLE_SSL=true", "OVN_DB_IPS=" + centralIP, "IFACE=ul0"}
	n.Start("--ssl-dir=" + pkiDir)
	log := string(must(os.ReadFile(n.Path("ovnhost.log"))))
	if !strings.Contains(log, "sb=ssl:"+centralIP+":6642") {
		t.Fatalf("the node did not use the SSL remote derived from OVN_DB_IPS:\n%s", n.LogTail())
	}
	if strings.Contains(log, "CNI server disabled") {
		t.Fatalf("the CNI server is disabled:\n%s", n.LogTail())
	}
	// The CNI server is up: the readiness endpoint says so, its socket and
	// the plugin are where kubelet looks.
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
		t.Fatalf("/readyz: %d %q %v\n%s", code, body, err, n.LogTail())
	}
	for _, p := range []string{n.Path("cni.sock"), n.Path("cni-bin", "ovnhost-cni")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the CNI server is not up: %v\n%s", err, n.LogTail())
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nb := dial(t, nbdb.FullDatabaseModel, "unix:"+c+"/nb.sock")
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	lspNames := func() []string {
		var ls []nbdb.LogicalSwitchPort
		if err := nb.List(ctx, &ls); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ls {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	ovsPorts := func() []string {
		var ps []vswitch.Port
		if err := ovs.List(ctx, &ps); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	links := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(run(t, "ip", "-n", n.NS, "-o", "-br", "link")), "\n") {
			out = append(out, strings.Fields(l)[0])
		}
		slices.Sort(out)
		return out
	}
	// The standalone source wrote the default topology into the central's
	// NB over SSL (the node knows no other way there).
	var sw []nbdb.LogicalSwitch
	if err := nb.List(ctx, &sw); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(sw, func(s nbdb.LogicalSwitch) bool { return s.Name == "ovn-default" }) {
		t.Fatalf("no ovn-default logical switch in the central's NB: %+v\n%s", sw, n.LogTail())
	}
	// The node's own port (ovn0) comes up right after READY: the "before"
	// snapshot is taken once it is installed.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	if err := ovs.WaitUntil(wctx, "ovn0 installed by ovn-controller", func() bool {
		i := &vswitch.Interface{Name: "ovn0"}
		return ovs.Get(wctx, i) == nil && i.ExternalIDs["ovn-installed"] == "true"
	}, nil); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}
	wcancel()
	lspBefore, portsBefore, linksBefore := lspNames(), ovsPorts(), links()

	// kubelet's ADD through the installed plugin.
	podNS := newNetns(t, "ohk")
	out, err := cni(n, "ADD", podNS, "web")
	if err != nil {
		t.Fatalf("ADD: %v\n%s\n%s", err, out, n.LogTail())
	}
	var res struct {
		IPs []struct{ Address, Gateway string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("ADD result %s: %v", out, err)
	}
	pfx, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		t.Fatalf("ADD result address %q: %v", res.IPs[0].Address, err)
	}
	podIP := pfx.Addr()
	if !netip.MustParsePrefix("10.16.0.0/16").Contains(podIP) {
		t.Fatalf("pod address %s is not in the default subnet 10.16.0.0/16", pfx)
	}
	lsp := &nbdb.LogicalSwitchPort{Name: "web.default"}
	if err := nb.Get(ctx, lsp); err != nil {
		t.Fatalf("logical switch port web.default is not in the central's NB: %v (ports %v)", err, lspNames())
	}
	if !slices.ContainsFunc(lsp.Addresses, func(a string) bool { return slices.Contains(strings.Fields(a), podIP.String()) }) {
		t.Fatalf("web.default addresses %v do not carry the pod's %s", lsp.Addresses, podIP)
	}
	if gw := res.IPs[0].Gateway; gw == "" {
		t.Fatalf("ADD result has no gateway: %s", out)
	} else if err := ping(podNS, gw, 5); err != nil {
		t.Fatalf("pod to its gateway: %v\n%s", err, n.LogTail())
	}
	// kubelet's probes: the node reaches its pod through ovn0.
	if err := ping(n.NS, podIP.String(), 10); err != nil {
		routes, _ := exec.Command("ip", "-n", n.NS, "route").CombinedOutput()
		links, _ := exec.Command("ip", "-n", n.NS, "-o", "link", "show", "ovn0").CombinedOutput()
		t.Fatalf("node to its pod through ovn0: %v\nroutes:\n%s\novn0: %s\n%s", err, routes, links, n.LogTail())
	}

	if out, err := cni(n, "DEL", podNS, "web"); err != nil {
		t.Fatalf("DEL: %v\n%s\n%s", err, out, n.LogTail())
	}
	// DEL's NB and OVS transactions are committed when it answers; this
	// test's own monitors hear of them a moment later.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := nb.WaitUntil(dctx, "web.default gone from the test's NB monitor", func() bool {
		return nb.Get(dctx, &nbdb.LogicalSwitchPort{Name: "web.default"}) != nil
	}, nil); err != nil {
		t.Errorf("logical switch port web.default is still in NB after DEL: %v", err)
	}
	_ = ovs.WaitUntil(dctx, "the pod's OVS port gone from the test's monitor", func() bool {
		var ps []vswitch.Port
		return ovs.List(dctx, &ps) == nil && len(ps) == len(portsBefore)
	}, nil)
	if got := lspNames(); !slices.Equal(got, lspBefore) {
		t.Errorf("NB ports after DEL %v, before ADD %v", got, lspBefore)
	}
	if got := ovsPorts(); !slices.Equal(got, portsBefore) {
		t.Errorf("OVS ports after DEL %v, before ADD %v", got, portsBefore)
	}
	if got := links(); !slices.Equal(got, linksBefore) {
		t.Errorf("node links after DEL %v, before ADD %v", got, linksBefore)
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
}
