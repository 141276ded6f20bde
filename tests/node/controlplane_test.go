package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	controllerv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

var subnetsGVR schema.GroupVersionResource = controllerv1.SubnetGVR

// controlPlane is what the node daemons of a Kubernetes-mode test talk to: a
// real kube-apiserver with the Subnet CRD, an OVN central, and the real
// ovnhost-controller, which has programmed the default topology.
type controlPlane struct {
	api     *kubeapi.Server
	central *ovncentral.Central
	kc      kubernetes.Interface
	dc      dynamic.Interface
	ctrl    *proc.Process
	ctrlLog string // the controller's output
	// ctrlArgs are the controller's flags beyond the connections.
	ctrlArgs []string
}

// stopController kills ovnhost-controller (what is programmed stays).
func (cp *controlPlane) stopController() {
	cp.ctrl.Kill()
}

// controlPlaneSpec is what differs between the tests' control planes.
type controlPlaneSpec struct {
	api kubeapi.Options
	// ctrlArgs are added to the controller's flags (also when it is
	// started again).
	ctrlArgs []string
	// crds are more CRD manifests (paths from the repository root),
	// installed before the controller starts (it looks for some at start:
	// NetworkAttachmentDefinitions).
	crds []string
}

// startControlPlane starts the apiserver, the central and the controller.
func startControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	return startControlPlaneWith(t, controlPlaneSpec{})
}

func startControlPlaneWith(t testing.TB, spec controlPlaneSpec) *controlPlane {
	t.Helper()
	testenv.RequireRoot(t)
	api := kubeapi.StartWith(t, spec.api)
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-subnets.yaml"))
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-provider-networks.yaml"))
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-vlans.yaml"))
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-vpcs.yaml"))
	for _, crd := range []string{"crd-ovn-eips.yaml", "crd-ovn-fips.yaml", "crd-ovn-snat-rules.yaml", "crd-ovn-dnat-rules.yaml"} {
		api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", crd))
	}
	for _, c := range spec.crds {
		api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), c))
	}
	central := ovncentral.Start(t)
	if err := central.WaitNorthd(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := &controlPlane{api: api, central: central, kc: kubernetes.NewForConfigOrDie(api.Config), dc: dynamic.NewForConfigOrDie(api.Config),
		ctrlLog: filepath.Join(t.TempDir(), "controller.log"), ctrlArgs: spec.ctrlArgs}
	cp.startController(t)
	nb := dial(t, nbdb.FullDatabaseModel, central.NB())
	defer nb.Close()
	if err := nb.WaitUntil(ctx, "the controller's default topology (ovn-default)", func() bool {
		var ls []nbdb.LogicalSwitch
		_ = nb.List(ctx, &ls)
		for _, s := range ls {
			if s.Name == "ovn-default" {
				return true
			}
		}
		return false
	}, nil); err != nil {
		t.Fatal(err)
	}
	return cp
}

// startController runs ovnhost-controller (again, after stopController),
// its output appended to cp.ctrlLog.
func (cp *controlPlane) startController(t testing.TB) {
	t.Helper()
	ctrl := proc.MustStart(t, proc.Spec{Name: "ovnhost-controller", Path: testenv.Binary(t, "ovnhost-controller"),
		Args: append([]string{"--kubeconfig=" + cp.api.Kubeconfig, "--ovn-nb-addr=" + cp.central.NB(), "--health-addr=", "--leader-elect=false"}, cp.ctrlArgs...),
		Env:  os.Environ(), Log: cp.ctrlLog})
	cp.ctrl = ctrl
	t.Cleanup(ctrl.Kill)
}
