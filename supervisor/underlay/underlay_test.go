package underlay

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf/ovsconftest"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func pn(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func TestDesired(t *testing.T) {
	objs := []*unstructured.Unstructured{
		pn("zeta", map[string]any{"defaultInterface": "eth1"}),
		pn("alpha", map[string]any{"defaultInterface": "eth1", "customInterfaces": []any{map[string]any{"interface": "bond0", "nodes": []any{"n1"}}}}),
		pn("excluded", map[string]any{"defaultInterface": "eth2", "excludeNodes": []any{"n1"}}),
		// A nodeSelector wins over excludeNodes (Kube-OVN's rule).
		pn("selected", map[string]any{"defaultInterface": "eth3", "excludeNodes": []any{"n1"},
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"underlay": "yes"}}}),
		pn("other", map[string]any{"defaultInterface": "eth4", "nodeSelector": map[string]any{"matchLabels": map[string]any{"underlay": "no"}}}),
		pn("invalid", map[string]any{"defaultInterface": "eth5", "color": "blue"}),
		pn("external", map[string]any{"defaultInterface": "eth6"}), // reserved: EIP/SNAT's
	}
	got := Desired("n1", map[string]string{"underlay": "yes"}, objs, quiet)
	want := []nodeconfig.ProviderNetwork{{Name: "alpha", NIC: "bond0"}, {Name: "selected", NIC: "eth3"}, {Name: "zeta", NIC: "eth1"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestNodeLabels(t *testing.T) {
	have := map[string]string{"kubernetes.io/hostname": "n1", "gone.provider-network.kubernetes.io/ready": "true",
		"gone.provider-network.kubernetes.io/interface": "eth9", "up.provider-network.kubernetes.io/ready": "true",
		"up.provider-network.kubernetes.io/interface": "eth1", "up.provider-network.kubernetes.io/mtu": "1500"}
	haveAnn := map[string]string{"up.provider-network.ovnhost.io/error": "old", "ovn.kubernetes.io/chassis": "x"}
	labels, ann := NodeLabels([]Status{
		{ProviderNetwork: nodeconfig.ProviderNetwork{Name: "up", NIC: "eth1"}, Ready: true, MTU: 1500},
		{ProviderNetwork: nodeconfig.ProviderNetwork{Name: "down", NIC: "eth2"}, Problem: "eth2 not found; this host has eth0, eth1"},
	}, have, haveAnn)
	str := func(m map[string]*string) string {
		var s []string
		for k, v := range m {
			if v == nil {
				s = append(s, k+"=<nil>")
			} else {
				s = append(s, k+"="+*v)
			}
		}
		return strings.Join(slices.Sorted(slices.Values(s)), " ")
	}
	if got, want := str(labels), "down.provider-network.kubernetes.io/interface=eth2 down.provider-network.kubernetes.io/ready=false gone.provider-network.kubernetes.io/interface=<nil> gone.provider-network.kubernetes.io/ready=<nil>"; got != want {
		t.Errorf("labels:\n got %s\nwant %s", got, want)
	}
	if got, want := str(ann), "down.provider-network.ovnhost.io/error=eth2 not found; this host has eth0, eth1 up.provider-network.ovnhost.io/error=<nil>"; got != want {
		t.Errorf("annotations:\n got %s\nwant %s", got, want)
	}
}

type fakeNode struct{ ovs *ovsdbconn.Conn }

func (n fakeNode) OVS() *ovsdbconn.Conn  { return n.ovs }
func (n fakeNode) KeepingDatapath() bool { return false }

// The set changes at runtime: a network no longer wanted leaves the
// reports and the unit's problems, a new one is looked at, a NIC changed
// is looked for under its new name. The NICs do not exist (no root
// needed): nothing on the host is touched.
func TestSetChangesTheNetworksAtRuntime(t *testing.T) {
	reports := make(chan []Status, 16)
	u := New(Options{Networks: []nodeconfig.ProviderNetwork{{Name: "a", NIC: "ovhtnone0"}}, Node: fakeNode{ovsconftest.ConfDB(t, nil)},
		JournalDir: t.TempDir(), Log: quiet, Report: func(s []Status) { reports <- s }})
	ctx := context.Background()
	if err := u.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := u.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case s := <-reports:
			var out []string
			for _, st := range s {
				out = append(out, st.Name+":"+st.NIC+":"+map[bool]string{true: "ready", false: "not ready: " + st.Problem}[st.Ready])
			}
			return strings.Join(out, ", ")
		case <-time.After(10 * time.Second):
			t.Fatal("no report within 10s")
			return ""
		}
	}
	if got := next(); !strings.HasPrefix(got, "a:ovhtnone0:not ready: ovhtnone0 not found;") {
		t.Fatalf("first report: %s", got)
	}
	u.Set([]nodeconfig.ProviderNetwork{{Name: "b", NIC: "ovhtnone1"}})
	if got := next(); !strings.HasPrefix(got, "b:ovhtnone1:not ready: ovhtnone1 not found;") || strings.Contains(got, "a:") {
		t.Fatalf("after the change: %s", got)
	}
	if err := u.Lacks(); err == nil || strings.Contains(err.Error(), "network a") || !strings.Contains(err.Error(), "network b") {
		t.Fatalf("Lacks after the change: %v", err)
	}
	u.Set([]nodeconfig.ProviderNetwork{{Name: "b", NIC: "ovhtnone2"}})
	if got := next(); !strings.HasPrefix(got, "b:ovhtnone2:not ready: ovhtnone2 not found;") {
		t.Fatalf("after the NIC changed: %s", got)
	}
	u.Set(nil)
	if got := next(); got != "" {
		t.Fatalf("after all went: %s", got)
	}
	if err := u.Lacks(); err != nil {
		t.Fatalf("Lacks with nothing wanted: %v", err)
	}
}
