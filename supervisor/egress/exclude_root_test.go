package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Item 8 end to end on the host side: the Nodes' addresses (from the API
// server) and the chassis' encap addresses (from a real SB ovsdb-server)
// reach the kernel's masquerade exclusions, and those added later do too,
// without a new plan. In a throwaway network namespace, nft backend, a
// fake API server.
func TestNodeAddressesAreNeverMasqueraded(t *testing.T) {
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = netns.Set(orig)
		orig.Close()
		ns.Close()
		runtime.UnlockOSThread()
	}()
	m, err := hostnat.New(hostnat.BackendNFT, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	node := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	kc := fake.NewClientset(node("n1", "192.168.50.11"), node("n2", "192.168.50.12"))
	sb := startSB(t)
	addChassis(t, sb, "ch-n1", "172.30.0.11")
	u := &Unit{log: slog.New(slog.DiscardHandler), kube: kc, mgr: m, sb: nodeconfig.Remote{Endpoint: sb}}
	plan := Plan{NATOutgoing: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")}, Cluster: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")}}
	u.plan = &plan
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); u.runExclusions(ctx) }()
	defer func() { cancel(); <-done }()

	// excluded reports whether the kernel's exclude set (an interval set:
	// start keys and end keys, the first address after a range) holds a.
	excluded := func(a netip.Addr) (bool, string) {
		c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.GetSetByName(&nftables.Table{Name: hostnat.TableName, Family: nftables.TableFamilyIPv4}, "exclude")
		if err != nil {
			return false, "no exclude set yet"
		}
		es, err := c.GetSetElements(s)
		if err != nil {
			t.Fatal(err)
		}
		type edge struct {
			at  netip.Addr
			end bool
		}
		var edges []edge
		for _, e := range es {
			k, _ := netip.AddrFromSlice(e.Key)
			edges = append(edges, edge{k, e.IntervalEnd})
		}
		slices.SortFunc(edges, func(x, y edge) int { return x.at.Compare(y.at) })
		in := false
		for _, e := range edges {
			if e.at.Compare(a) > 0 {
				break
			}
			in = !e.end
		}
		var st []string
		for _, e := range edges {
			st = append(st, map[bool]string{false: "", true: "end:"}[e.end]+e.at.String())
		}
		return in, fmt.Sprint(st)
	}
	wait := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			missing, state := "", ""
			for _, w := range want {
				ok, st := excluded(netip.MustParseAddr(w))
				state = st
				if !ok {
					missing = w
					break
				}
			}
			if missing == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s is not in the exclude set %s", what, missing, state)
			}
			time.Sleep(20 * time.Millisecond) // poll interval of the kernel read, not synchronisation
		}
	}
	wait("the nodes and encaps there at start", "10.16.3.4", "192.168.50.11", "192.168.50.12", "172.30.0.11")
	if ok, st := excluded(netip.MustParseAddr("192.168.50.99")); ok {
		t.Fatalf("192.168.50.99 (no node) excluded: %s", st)
	}
	if _, err := kc.CoreV1().Nodes().Create(ctx, node("n3", "192.168.50.13"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("a node added later", "192.168.50.13")
	addChassis(t, sb, "ch-n4", "172.30.0.99")
	wait("a chassis added later", "172.30.0.99")
}

// startSB serves the southbound schema with a real ovsdb-server; its
// endpoint.
func startSB(t *testing.T) string {
	t.Helper()
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool", "ovsdb-client")
	_, self, _, _ := runtime.Caller(0)
	schema := filepath.Join(filepath.Dir(self), "..", "..", "internal", "ovsdb", "sbdb", "ovn-sb.ovsschema")
	dir := t.TempDir()
	db := filepath.Join(dir, "sb.db")
	if out, err := exec.Command("ovsdb-tool", "create", db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "sb.sock")
	cmd := exec.Command("ovsdb-server", db, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "ctl"),
		"--no-chdir", "--log-file="+filepath.Join(dir, "log"), "--pidfile="+filepath.Join(dir, "pid"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "unix:" + sock
}

// addChassis inserts a Chassis with one Geneve Encap (ovsdb-client waits
// for the socket with --timeout).
func addChassis(t *testing.T, endpoint, name, ip string) {
	t.Helper()
	txn := fmt.Sprintf(`["OVN_Southbound",
 {"op":"insert","table":"Encap","uuid-name":"e","row":{"chassis_name":%q,"ip":%q,"type":"geneve","options":["map",[["csum","true"]]]}},
 {"op":"insert","table":"Chassis","row":{"name":%q,"hostname":%q,"encaps":["named-uuid","e"]}}]`, name, ip, name, name)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ovsdb-client", "--timeout=5", "transact", endpoint, txn).CombinedOutput()
		if err == nil && !strings.Contains(string(out), "error") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("insert chassis %s: %v %s", name, err, out)
		}
		time.Sleep(50 * time.Millisecond) // the server's socket appears
	}
}
