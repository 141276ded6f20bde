// Package ctltest is what the controller's unit tests share: a Kubernetes
// API made of client-go's fake clientsets (the unit tests run without an
// apiserver; tests/controller runs the real one), the shared informer
// factories on them, an OVN northbound database (libovsdb's in-memory
// server, internal/ovnnb/nbtest) with the ovnnet library on it, and an
// event recorder whose events the tests read.
package ctltest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Env is one controller's world.
type Env struct {
	// Kube and Dynamic are fakes: the unit tests run without an apiserver.
	Kube       *fake.Clientset
	Dynamic    *dynamicfake.FakeDynamicClient
	Informers  informers.SharedInformerFactory
	DInformers dynamicinformer.DynamicSharedInformerFactory
	NBServer   *nbtest.Server
	NB         *ovnnb.Client
	Net        *ovnnet.Network
	Recorder   *record.FakeRecorder
	Log        *slog.Logger
	// Ctx ends with the test; workers started with WG are waited for
	// before the NB goes.
	Ctx context.Context
	WG  sync.WaitGroup
	t   testing.TB
}

// New builds the world around typed objects (pods, nodes, namespaces,
// ...) and unstructured ones (Subnets, IPs); the router ovn-cluster exists.
// Nothing runs until Start.
func New(t testing.TB, typed []runtime.Object, custom ...runtime.Object) *Env {
	t.Helper()
	s, nb := nbtest.Client(t)
	return newEnv(t, s, nb, typed, custom)
}

// NewOVSDB is New with a real ovsdb-server as the NB (nbtest.StartOVSDB),
// for what the in-memory server cannot do (an HA chassis group replaced).
func NewOVSDB(t testing.TB, typed []runtime.Object, custom ...runtime.Object) *Env {
	t.Helper()
	s := nbtest.StartOVSDB(t)
	return newEnv(t, s, s.Connect(t, ovnnb.Options{PortGroups: true}), typed, custom)
}

func newEnv(t testing.TB, s *nbtest.Server, nb *ovnnb.Client, typed, custom []runtime.Object) *Env {
	ctx, cancel := context.WithCancel(context.Background())
	w := &testWriter{t: t}
	e := &Env{
		Kube: fake.NewClientset(typed...),
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{kubeovnv1.SubnetGVR: "SubnetList", kubeovnv1.IPGVR: "IPList",
				kubeovnv1.VlanGVR: "VlanList", kubeovnv1.ProviderNetworkGVR: "ProviderNetworkList", kubeovnv1.VpcGVR: "VpcList",
				kubeovnv1.OvnEipGVR: "OvnEipList", kubeovnv1.OvnFipGVR: "OvnFipList", kubeovnv1.OvnSnatRuleGVR: "OvnSnatRuleList", kubeovnv1.OvnDnatRuleGVR: "OvnDnatRuleList"}, custom...),
		NBServer: s, NB: nb, Net: ovnnet.New(nb, ovnnet.Config{}),
		Recorder: record.NewFakeRecorder(1000),
		Log:      slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ctx:      ctx, t: t,
	}
	t.Cleanup(func() {
		cancel()
		e.WG.Wait()
		w.close()
	})
	e.Informers = informers.NewSharedInformerFactory(e.Kube, 0)
	e.DInformers = dynamicinformer.NewDynamicSharedInformerFactory(e.Dynamic, 0)
	if err := e.Net.EnsureRouter(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// Start starts the informers a reconciler registered and waits for their caches.
func (e *Env) Start() {
	e.t.Helper()
	e.Informers.Start(e.Ctx.Done())
	e.DInformers.Start(e.Ctx.Done())
	for typ, ok := range e.Informers.WaitForCacheSync(e.Ctx.Done()) {
		if !ok {
			e.t.Fatalf("cache of %v did not sync", typ)
		}
	}
	for typ, ok := range e.DInformers.WaitForCacheSync(e.Ctx.Done()) {
		if !ok {
			e.t.Fatalf("cache of %v did not sync", typ)
		}
	}
}

// Subnet is a Subnet object with that spec (for New or Dynamic).
func Subnet(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": "Subnet",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// GetSubnet reads a Subnet from the (fake) API.
func (e *Env) GetSubnet(name string) *kubeovnv1.Subnet {
	e.t.Helper()
	u, err := e.Dynamic.Resource(kubeovnv1.SubnetGVR).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("Subnet %s: %v", name, err)
	}
	s, err := kubeovnv1.FromUnstructured(u)
	if err != nil {
		e.t.Fatalf("Subnet %s: %v", name, err)
	}
	return s
}

// Await waits until the informer's cache holds an object for which ok is
// true (nil: the key is absent), woken by the informer's events.
func Await(t testing.TB, inf cache.SharedIndexInformer, key string, ok func(obj any) bool) {
	t.Helper()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	deadline := time.After(10 * time.Second)
	for {
		obj, exists, _ := inf.GetIndexer().GetByKey(key)
		if (exists && ok(obj)) || (!exists && ok(nil)) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("informer cache: %s never got there (now %v)", key, obj)
		}
	}
}

// Events drains the events recorded so far ("<type> <reason> <message>").
func (e *Env) Events() []string {
	var out []string
	for {
		select {
		case ev := <-e.Recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// Event is the first recorded event (drained) starting with prefix
// ("Warning SubnetNotAllowed"), "" when none.
func Event(events []string, prefix string) string {
	for _, ev := range events {
		if strings.HasPrefix(ev, prefix) {
			return ev
		}
	}
	return ""
}

// testWriter logs into the test until it ends (a late goroutine's line is dropped).
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// AwaitNB waits until ok, looking again after each change the NB client's
// cache sees (what the reconcilers write comes back through it).
func (e *Env) AwaitNB(what string, ok func() bool) {
	e.t.Helper()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	e.NB.Raw().Cache().AddEventHandler(&libcache.EventHandlerFuncs{
		AddFunc:    func(string, model.Model) { poke() },
		UpdateFunc: func(string, model.Model, model.Model) { poke() },
		DeleteFunc: func(string, model.Model) { poke() },
	})
	deadline := time.After(10 * time.Second)
	for !ok() {
		select {
		case <-changed:
		case <-deadline:
			e.t.Fatalf("never in the NB: %s", what)
		}
	}
}

// AwaitEvent waits for an event starting with prefix ("Warning
// SubnetNotAllowed"), recorded by a worker; events before it are dropped.
func (e *Env) AwaitEvent(prefix string) string {
	e.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-e.Recorder.Events:
			if strings.HasPrefix(ev, prefix) {
				return ev
			}
		case <-deadline:
			e.t.Fatalf("no event %q", prefix)
			return ""
		}
	}
}
