package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/supervisor/egress"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
)

// The assembly is checked without root and without starting anything:
// which units, in which order, for each role and mode, and what each
// feature is given.

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://192.0.2.1:6443"}
  name: c
contexts:
- context: {cluster: c, user: u}
  name: c
current-context: c
users:
- name: u
  user: {token: t}
`

// host is a temporary root: programs (empty executables), directories
// and a kubeconfig.
type host struct {
	t    *testing.T
	root string
}

func newHost(t *testing.T) *host {
	t.Helper()
	// Not in a pod: no in-cluster configuration.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	h := &host{t: t, root: t.TempDir()}
	bin := filepath.Join(h.root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovsdb-tool", "ovn-northd", "ovsdb-client"} {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(h.root, "kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// settings loads the settings table as `ovnhost run` would, on h's
// directories, plus args.
func (h *host) settings(args ...string) *config.Config {
	h.t.Helper()
	base := []string{"--node-name=n1", "--bin-dirs=" + filepath.Join(h.root, "bin")}
	for _, s := range layout.DirSettings {
		base = append(base, "--"+s.Name+"="+filepath.Join(h.root, s.Name))
	}
	cfg, err := config.Load(append(base, args...), nil, io.Discard)
	if err != nil {
		h.t.Fatal(err)
	}
	return cfg
}

func (h *host) kubeconfig() string { return "--kubeconfig=" + filepath.Join(h.root, "kubeconfig") }

func (h *host) nodeConfig(f nodeconfig.Findings, args ...string) *nodeconfig.NodeConfig {
	h.t.Helper()
	nc, err := h.settings(args...).Resolve(f, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return nc
}

func options() Options {
	return Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: health.New()}
}

func assemble(t *testing.T, nc *nodeconfig.NodeConfig) *Agent {
	t.Helper()
	a, err := New(nc, options())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var eth0 = nodeconfig.Findings{KernelDatapath: true, TunnelIface: "eth0", EncapIP: "10.0.0.9", UnderlayMTU: 1500}

func TestUnitOrder(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct {
		name string
		args []string
		find nodeconfig.Findings
		want string
		kube bool
	}{
		{"all-in-one standalone", nil, eth0,
			"ovn-central+ovs(ovsdb-nb ovsdb-sb ovn-northd | ovsdb-server ovs-config ovs-vswitchd) ovn-controller underlay host-nat cni-server", false},
		{"all-in-one with Kubernetes", []string{h.kubeconfig()}, eth0,
			"ovn-central+ovs(ovsdb-nb ovsdb-sb ovn-northd | ovsdb-server ovs-config ovs-vswitchd) ovn-controller kube-informers underlay host-nat external-gateway cni-server", true},
		{"remote with Kubernetes", []string{"--ovn-sb-addr=tcp:10.0.0.1:6642", h.kubeconfig()}, eth0,
			"ovsdb-server ovs-config ovs-vswitchd ovn-controller kube-informers underlay host-nat external-gateway cni-server", true},
		{"remote standalone, NB given", []string{"--ovn-db-ips=10.0.0.1"}, eth0,
			"ovsdb-server ovs-config ovs-vswitchd ovn-controller underlay host-nat cni-server", false},
		// No source of pod addresses: no CNI server, and nothing that
		// would serve it; the underlay still gives back what an earlier
		// run left.
		{"remote, SB only, no Kubernetes", []string{"--ovn-sb-addr=tcp:10.0.0.1:6642"}, eth0,
			"ovsdb-server ovs-config ovs-vswitchd ovn-controller underlay", false},
		{"userspace tunnel", []string{"--ovn-db-ips=10.0.0.1", "--datapath=netdev", "--userspace-tunnel"}, eth0,
			"ovsdb-server ovs-config ovs-vswitchd tunnel-bridge ovn-controller underlay host-nat cni-server", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := assemble(t, h.nodeConfig(c.find, c.args...))
			if got := lifecycle.Describe(a.Units()); got != c.want {
				t.Errorf("units:\n got %s\nwant %s", got, c.want)
			}
			if a.Kubernetes() != c.kube {
				t.Errorf("Kubernetes() = %v, want %v", a.Kubernetes(), c.kube)
			}
		})
	}
}

// Features are given the one client set, or none on a standalone node.
func TestFeaturesShareTheOneClientSet(t *testing.T) {
	h := newHost(t)
	a := assemble(t, h.nodeConfig(eth0, "--ovn-sb-addr=tcp:10.0.0.1:6642", h.kubeconfig()))
	if a.kube == nil || a.kube.client == nil || a.kube.dynamic == nil || a.kube.configMaps == nil || a.kube.subnets == nil {
		t.Fatalf("client set: %+v", a.kube)
	}
	// One Subnet watch per node: egress and the pod source share it.
	if a.egress.SubnetInformer() != a.kube.subnets {
		t.Fatal("egress was not given the node's shared Subnet informer")
	}
	if a.kube.rest.Host != "https://192.0.2.1:6443" {
		t.Fatalf("client set from the kubeconfig: %s", a.kube.rest.Host)
	}
	if a.egress == nil || a.extgw == nil || a.cni == nil || (a.cni.kube == nil) {
		t.Fatalf("features: egress %v extgw %v cni %+v", a.egress, a.extgw, a.cni)
	}
	var got kubernetes.Interface
	o := options()
	o.NodeAPI = func(_ context.Context, kc kubernetes.Interface) (func(), error) {
		got = kc
		return func() {}, nil
	}
	a, err := New(h.nodeConfig(eth0, "--ovn-sb-addr=tcp:10.0.0.1:6642", h.kubeconfig()), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.startNodeAPI(); err != nil {
		t.Fatal(err)
	}
	a.stopNodeAPI()
	if got != a.kube.client {
		t.Fatalf("node API given %v, not the agent's client", got)
	}

	// Standalone: no client, the CNI server allocates from the NB.
	s := assemble(t, h.nodeConfig(eth0))
	if s.kube != nil || s.kubeClient() != nil || s.extgw != nil || s.cni.kube != nil {
		t.Fatalf("standalone: kube %v extgw %v cni standalone %v", s.kube, s.extgw, s.cni.kube == nil)
	}
}

func TestUnreadableKubeconfigIsAnError(t *testing.T) {
	h := newHost(t)
	missing := filepath.Join(h.root, "nope")
	_, err := New(h.nodeConfig(eth0, "--kubeconfig="+missing), options())
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("got %v, want an error naming %s", err, missing)
	}
}

func TestMissingProgramsAreNamed(t *testing.T) {
	h := newHost(t)
	if err := os.Remove(filepath.Join(h.root, "bin", "ovn-northd")); err != nil {
		t.Fatal(err)
	}
	// A remote node does not need ovn-northd.
	assemble(t, h.nodeConfig(eth0, "--ovn-db-ips=10.0.0.1"))
	_, err := New(h.nodeConfig(eth0), options())
	if err == nil || !strings.Contains(err.Error(), "ovn-northd") {
		t.Fatalf("all-in-one without ovn-northd: %v", err)
	}
}

// A node API that cannot start is told apart from a failed start: it has
// been logged with its fix.
func TestNodeAPIFailure(t *testing.T) {
	h := newHost(t)
	o := options()
	o.NodeAPI = func(context.Context, kubernetes.Interface) (func(), error) { return nil, errors.New("address in use") }
	a, err := New(h.nodeConfig(eth0), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrNodeAPI) {
		t.Fatalf("Start = %v, want ErrNodeAPI", err)
	}
}

func TestCentralUnits(t *testing.T) {
	h := newHost(t)
	c, err := NewCentral(h.settings("--role=central", "--ovn-db-ips=10.0.0.1,10.0.0.2,10.0.0.3", "--central-ip=10.0.0.2"), options())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lifecycle.Describe(c.Units()), "ovn-databases(ovsdb-nb | ovsdb-sb) ovn-northd"; got != want {
		t.Fatalf("central units: %s, want %s", got, want)
	}

	// Dropped from OVN_DB_IPS with no database: a configuration error.
	_, err = NewCentral(h.settings("--role=central", "--ovn-db-ips=10.0.0.1,10.0.0.3", "--central-ip=10.0.0.2"), options())
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "ovn-db-ips" {
		t.Fatalf("a member neither listed nor holding a database: %v, want a *config.Error on ovn-db-ips", err)
	}

	// Dropped with its database: it starts only its databases, to leave.
	cfg := h.settings("--role=central", "--ovn-db-ips=10.0.0.1,10.0.0.3", "--central-ip=10.0.0.2")
	l := layout.New(cfg.Paths)
	if err := os.MkdirAll(filepath.Dir(l.NBDB), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.NBDB, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = NewCentral(cfg, options())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lifecycle.Describe(c.Units()), "ovn-databases(ovsdb-nb | ovsdb-sb)"; got != want {
		t.Fatalf("leaving member's units: %s, want %s", got, want)
	}
}

func TestEgressPlanFromThePodSource(t *testing.T) {
	p := netip.MustParsePrefix
	got := egressPlan(podsource.EgressPlan{NATOutgoing: []netip.Prefix{p("10.16.0.0/16")}, Cluster: []netip.Prefix{p("10.96.0.0/12")},
		Gateways: []podsource.GatewayPlan{{Subnet: "s1", CIDRs: []netip.Prefix{p("10.17.0.0/16"), p("fd00:17::/64")},
			Transit: ovnnet.Transit{V4: p("100.65.0.1/30"), V6: p("fd00:a9fe:4000::1/126")}, NATOutgoing: true,
			EgressIP: netip.MustParseAddr("192.0.2.9")}}})
	want := egress.Plan{NATOutgoing: []netip.Prefix{p("10.16.0.0/16")}, Cluster: []netip.Prefix{p("10.96.0.0/12")},
		Gateways: []egress.Gateway{{Subnet: "s1", CIDRs: []netip.Prefix{p("10.17.0.0/16"), p("fd00:17::/64")},
			Transit: ovnnet.Transit{V4: p("100.65.0.1/30"), V6: p("fd00:a9fe:4000::1/126")}, NATOutgoing: true,
			EgressIP: netip.MustParseAddr("192.0.2.9")}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// The host firewall guard's state is the host-nat unit's readiness: while
// it cannot be installed or restored the node is not ready and /readyz
// says why; once back, ready again.
func TestGuardStateIsReadiness(t *testing.T) {
	h := newHost(t)
	a := assemble(t, h.nodeConfig(eth0))
	for _, c := range a.o.Health.Children() {
		a.o.Health.Ready(c.Name, 0, 0)
	}
	if ok, s := a.o.Health.Status(); !ok {
		t.Fatalf("not ready before: %s", s)
	}
	a.guardState(errors.New("the host firewall guard, which was removed and cannot be restored: EPERM"))
	ok, s := a.o.Health.Status()
	if ok || !strings.Contains(s, "host-nat: waiting for the host firewall guard, which was removed and cannot be restored: EPERM") {
		t.Fatalf("with the guard missing: ready=%v %q", ok, s)
	}
	a.guardState(nil)
	if ok, s := a.o.Health.Status(); !ok {
		t.Fatalf("guard back, still not ready: %s", s)
	}
}

// The guard's drop counter is a metric of the node (0 before the unit runs).
func TestGuardDropsMetric(t *testing.T) {
	h := newHost(t)
	a := assemble(t, h.nodeConfig(eth0))
	mfs, err := a.o.Health.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ovnhost_guard_dropped_packets_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
				t.Fatalf("drops before start = %v", v)
			}
			return
		}
	}
	t.Fatal("no ovnhost_guard_dropped_packets_total metric")
}
