package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The dispatch tests drive the server with a recording pod source and
// wiring: what each CNI command asks of them, in which order, and which
// CNI code and metrics reason their failures become. The real parts have
// their own tests (cni/podsource, cni/podwire) and tests/cni runs them
// together against real daemons.

// fakeSource is a pod source that records its calls.
type fakeSource struct {
	kube       bool
	net        *podsource.PodNetwork
	netErr     error
	releaseErr error

	mu    sync.Mutex
	calls []string
	refs  []podsource.PodRef
}

func (f *fakeSource) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeSource) PodNetwork(_ context.Context, ref podsource.PodRef) (*podsource.PodNetwork, error) {
	f.record("network " + ref.Key())
	f.mu.Lock()
	f.refs = append(f.refs, ref)
	f.mu.Unlock()
	return f.net, f.netErr
}

func (f *fakeSource) Release(_ context.Context, ref podsource.PodRef) error {
	f.record("release " + ref.Key())
	f.mu.Lock()
	f.refs = append(f.refs, ref)
	f.mu.Unlock()
	return f.releaseErr
}

func (f *fakeSource) NodeNetwork(context.Context) (*podsource.NodeNetwork, error) {
	return nil, errors.New("none")
}
func (f *fakeSource) Kubernetes() bool            { return f.kube }
func (f *fakeSource) Start(context.Context) error { return nil }
func (f *fakeSource) Stop()                       {}

// fakeWiring is a pod wiring that records its calls; errs fails a call
// by name.
type fakeWiring struct {
	errs  map[string]error
	owned []podwire.Attachment
	// wired and rates are the pods wired and the rates of their ports.
	wired map[string][2]int

	mu       sync.Mutex
	calls    []string
	added    podwire.Network
	addedTo  podwire.Attachment
	expected podwire.Expected
}

func (f *fakeWiring) record(c string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	name, _, _ := strings.Cut(c, " ")
	return f.errs[name]
}

func (f *fakeWiring) Start(context.Context) error   { return nil }
func (f *fakeWiring) Stop()                         {}
func (f *fakeWiring) Datapath() nodeconfig.Datapath { return nodeconfig.Kernel }
func (f *fakeWiring) Status(context.Context) error  { return f.record("status") }
func (f *fakeWiring) Forget(a podwire.Attachment)   { _ = f.record("forget " + a.Port) }
func (f *fakeWiring) Remove(_ context.Context, port string) error {
	return f.record("remove " + port)
}
func (f *fakeWiring) Del(_ context.Context, a podwire.Attachment) error {
	return f.record("del " + a.Port)
}

func (f *fakeWiring) Add(_ context.Context, a podwire.Attachment, n podwire.Network, done func(*podwire.Result) error) error {
	f.mu.Lock()
	f.added, f.addedTo = n, a
	f.mu.Unlock()
	if err := f.record("add " + a.Port); err != nil {
		return err
	}
	mac, _ := net.ParseMAC("aa:bb:cc:00:00:01")
	if err := done(&podwire.Result{HostIfName: a.Port, HostMAC: mac}); err != nil {
		_ = f.record("undo " + a.Port)
		return err
	}
	return nil
}

func (f *fakeWiring) Check(_ context.Context, a podwire.Attachment, want podwire.Expected) error {
	f.mu.Lock()
	f.expected = want
	f.mu.Unlock()
	return f.record("check " + a.Port)
}

func (f *fakeWiring) Owned(context.Context) ([]podwire.Attachment, error) {
	return f.owned, f.record("owned")
}

func (f *fakeWiring) Wired() []string {
	var out []string
	for k := range f.wired {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (f *fakeWiring) SetRates(key string, in, eg int) { _ = f.record("rates " + key) }
func (f *fakeWiring) ReapplyRates(_ context.Context, key string, in, eg int) {
	if f.wired[key] != [2]int{in, eg} {
		_ = f.record("rates " + key)
	}
}

func (f *fakeWiring) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func dispatchServer(t *testing.T, src *fakeSource, w *fakeWiring) *Server {
	t.Helper()
	s, err := Assemble(Config{PodMTU: 1400, Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Parts{Source: src, Wiring: w})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func cniRequest(cmd, version string, extra map[string]any) *protocol.Request {
	conf := map[string]any{"cniVersion": version, "name": "ovnhost", "type": "ovnhost-cni"}
	for k, v := range extra {
		conf[k] = v
	}
	b, _ := json.Marshal(conf)
	return &protocol.Request{Command: cmd, ContainerID: "c1", Netns: "/run/netns/none", IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", Config: b}
}

var wiringStepErr = func(s podwire.Step) error { return &podwire.Error{Step: s, Err: errors.New("boom")} }

func TestDelUnwiresReleasesThenForgets(t *testing.T) {
	port := podwire.PortName("c1", "eth0")
	for _, c := range []struct {
		name      string
		wireErr   error
		relErr    error
		code      uint
		reason    string
		wantCalls []string
		released  bool
	}{
		{"ok", nil, nil, 0, "", []string{"del " + port, "forget " + port}, true},
		{"ovs", wiringStepErr(podwire.StepPort), nil, types.ErrTryAgainLater, "ovs", []string{"del " + port}, false},
		{"plumbing", wiringStepErr(podwire.StepPlumbing), nil, types.ErrInternal, "plumbing", []string{"del " + port}, false},
		{"release", nil, errors.New("NB down"), types.ErrTryAgainLater, "pod_network", []string{"del " + port}, true},
	} {
		src := &fakeSource{releaseErr: c.relErr}
		w := &fakeWiring{errs: map[string]error{"del": c.wireErr}}
		_, cerr := dispatchServer(t, src, w).handle(t.Context(), cniRequest("DEL", "1.0.0", nil))
		if (cerr == nil) != (c.code == 0) || cerr != nil && (cerr.code != c.code || cerr.reason != c.reason || !strings.HasPrefix(cerr.msg, "DEL ns/p: ")) {
			t.Errorf("%s: %+v, want code %d reason %q", c.name, cerr, c.code, c.reason)
		}
		if got := w.log(); !slices.Equal(got, c.wantCalls) {
			t.Errorf("%s: wiring calls %v, want %v", c.name, got, c.wantCalls)
		}
		if released := len(src.calls) == 1 && src.calls[0] == "release ns/p"; released != c.released {
			t.Errorf("%s: source calls %v", c.name, src.calls)
		}
	}
}

func TestGCRemovesOnlyInvalidAndRefusesANonRootWipe(t *testing.T) {
	owned := []podwire.Attachment{
		{Namespace: "ns", Name: "a", ContainerID: "ca", IfName: "eth0", Port: "veth-a"},
		{Namespace: "ns", Name: "b", ContainerID: "cb", IfName: "eth0", Port: "veth-b"},
	}
	gc := func(valid ...string) *protocol.Request {
		var va []map[string]string
		for _, v := range valid {
			va = append(va, map[string]string{"containerID": v, "ifname": "eth0"})
		}
		return cniRequest("GC", "1.1.0", map[string]any{"cni.dev/valid-attachments": va})
	}
	root := context.WithValue(t.Context(), peerKey{}, peerCred{uid: 0, known: true})
	user := context.WithValue(t.Context(), peerKey{}, peerCred{uid: 1000, known: true})
	for _, c := range []struct {
		name     string
		ctx      context.Context
		req      *protocol.Request
		reason   string
		removed  []string
		released []string
	}{
		{"one valid", user, gc("ca"), "", []string{"remove veth-b"}, []string{"release ns/b"}},
		{"wipe by root", root, gc(), "", []string{"remove veth-a", "remove veth-b"}, []string{"release ns/a", "release ns/b"}},
		{"wipe by a group member", user, gc(), "gc_refused", nil, nil},
		{"wipe, caller unknown", t.Context(), gc(), "gc_refused", nil, nil},
	} {
		src := &fakeSource{}
		w := &fakeWiring{owned: owned}
		_, cerr := dispatchServer(t, src, w).handle(c.ctx, c.req)
		if reason := ""; cerr != nil {
			reason = cerr.reason
			if reason != c.reason {
				t.Errorf("%s: %+v, want reason %q", c.name, cerr, c.reason)
			}
		} else if c.reason != "" {
			t.Errorf("%s: answered, want %q", c.name, c.reason)
		}
		if got := w.log()[1:]; !slices.Equal(got, c.removed) {
			t.Errorf("%s: removed %v, want %v", c.name, got, c.removed)
		}
		if !slices.Equal(src.calls, c.released) {
			t.Errorf("%s: released %v, want %v", c.name, src.calls, c.released)
		}
	}
}

// CHECK reads what ADD reported from prevResult (the MTU when the result
// has one, else the host end's) and maps the wiring's answer.
func TestCheckExpectsPrevResultAndMapsErrors(t *testing.T) {
	prev := func(version string) map[string]any {
		s := &Server{cfg: Config{PodMTU: 1400}}
		q := sampleResult(t, version)
		n, res := samplePodNetwork()
		n.Routes = []podsource.Route{{Dst: netip.MustParsePrefix("192.168.0.0/24"), GW: netip.MustParseAddr("10.16.0.254")}}
		b, err := s.result(q, n, res)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]any{"prevResult": json.RawMessage(b)}
	}
	for _, c := range []struct {
		version     string
		mtu         int
		mtuFromHost bool
	}{{"1.0.0", 1350, false}, {"0.4.0", 1400, true}} {
		w := &fakeWiring{}
		if _, cerr := dispatchServer(t, &fakeSource{}, w).handle(t.Context(), cniRequest("CHECK", c.version, prev(c.version))); cerr != nil {
			t.Fatalf("%s: %+v", c.version, cerr)
		}
		e := w.expected
		if e.MTU != c.mtu || e.MTUFromHost != c.mtuFromHost || e.MAC.String() != "0a:58:0a:10:00:05" || len(e.Addrs) != 2 ||
			len(e.Routes) != 3 || e.Routes[2].Dst.String() != "192.168.0.0/24" {
			t.Errorf("%s: expected %+v", c.version, e)
		}
	}
	for step, want := range map[podwire.Step]struct {
		code   uint
		reason string
	}{podwire.StepPort: {types.ErrTryAgainLater, "ovs"}, podwire.StepCheck: {types.ErrInternal, "check"}} {
		w := &fakeWiring{errs: map[string]error{"check": wiringStepErr(step)}}
		_, cerr := dispatchServer(t, &fakeSource{}, w).handle(t.Context(), cniRequest("CHECK", "1.0.0", prev("1.0.0")))
		if cerr == nil || cerr.code != want.code || cerr.reason != want.reason || cerr.msg != "CHECK ns/p: boom" {
			t.Errorf("step %d: %+v, want %+v", step, cerr, want)
		}
	}
	_, cerr := dispatchServer(t, &fakeSource{}, &fakeWiring{}).handle(t.Context(), cniRequest("CHECK", "1.0.0", nil))
	if cerr == nil || cerr.code != types.ErrInvalidNetworkConfig || !strings.Contains(cerr.msg, "prevResult") {
		t.Errorf("CHECK without prevResult: %+v", cerr)
	}
}

func TestStatusAnswersPluginNotAvailable(t *testing.T) {
	w := &fakeWiring{errs: map[string]error{"status": errors.New("bridge br-int is missing")}}
	_, cerr := dispatchServer(t, &fakeSource{}, w).handle(t.Context(), cniRequest("STATUS", "1.1.0", nil))
	if cerr == nil || cerr.code != types.ErrPluginNotAvailable || cerr.msg != "ovnhost: bridge br-int is missing" {
		t.Fatalf("%+v", cerr)
	}
	if _, cerr := dispatchServer(t, &fakeSource{}, &fakeWiring{}).handle(t.Context(), cniRequest("STATUS", "1.1.0", nil)); cerr != nil {
		t.Fatalf("%+v", cerr)
	}
}

// Every failure of the pod source and of the wiring has its CNI code and
// metrics reason; the runtime retries the "try again later" ones.
func TestErrorsBecomeCNICodes(t *testing.T) {
	s := &Server{cfg: Config{InstallWait: DefaultInstallWait}}
	q := &request{Request: &protocol.Request{}, pod: podsource.PodRef{Namespace: "ns", Name: "p"}, host: "ovh1"}
	for _, c := range []struct {
		err    error
		code   uint
		reason string
		msg    string
	}{
		{&podsource.AnnotationError{Key: "k", Value: "v", Problem: "bad"}, types.ErrInvalidNetworkConfig, "invalid_annotation", `pod ns/p: annotation k="v": bad`},
		{&podsource.AnnotationTimeout{Msg: "late"}, types.ErrTryAgainLater, "annotation_timeout", "late"},
		// A pod whose annotations differ from what OVN holds is refused, not retried.
		{&podsource.MismatchError{Pod: "ns/p", Field: "ovn.kubernetes.io/ip_address", Annotation: "10.16.0.7", OVN: "10.16.0.9", Source: "the OVN southbound database at tcp:1"},
			types.ErrInvalidNetworkConfig, "annotation_mismatch", (&podsource.MismatchError{Pod: "ns/p", Field: "ovn.kubernetes.io/ip_address", Annotation: "10.16.0.7", OVN: "10.16.0.9", Source: "the OVN southbound database at tcp:1"}).Error()},
		{errors.New("other"), types.ErrInternal, "pod_network", "pod ns/p: other"},
	} {
		if got := s.sourceError(q, c.err); got.code != c.code || got.reason != c.reason || got.msg != c.msg {
			t.Errorf("source %v: %+v", c.err, got)
		}
	}
	for _, c := range []struct {
		err    error
		code   uint
		reason string
		msg    string
	}{
		{wiringStepErr(podwire.StepStale), types.ErrInternal, "ovs", "remove stale ports of p.ns: boom"},
		{wiringStepErr(podwire.StepConfig), types.ErrInvalidNetworkConfig, "bad_request", "boom"},
		{wiringStepErr(podwire.StepPlumbing), types.ErrInternal, "plumbing", "pod ns/p: boom"},
		{wiringStepErr(podwire.StepMirror), types.ErrInvalidNetworkConfig, "ovs", "pod ns/p: boom"},
		{wiringStepErr(podwire.StepPort), types.ErrInternal, "ovs", "pod ns/p: boom"},
		{wiringStepErr(podwire.StepInstall), types.ErrInternal, "ovs", "pod ns/p: waiting for ovn-installed on ovh1: boom"},
		{wiringStepErr(podwire.StepInstallTimeout), types.ErrTryAgainLater, "ovn_install_timeout", "pod ns/p: timed out after 30s waiting for ovn-controller"},
		{errors.New("unsupported version"), types.ErrInternal, "internal", "encode result: unsupported version"},
	} {
		if got := s.wiringError(q, q.pod.LSP(), c.err); got.code != c.code || got.reason != c.reason || !strings.HasPrefix(got.msg, c.msg) {
			t.Errorf("wiring %v: %+v, want %d %s %q", c.err, got, c.code, c.reason, c.msg)
		}
	}
}

// ADD: the source's network reaches the wiring with the MTU and routes
// the server settles; a failed ADD releases what the source allocated.
func TestAddHandsTheNetworkToTheWiringAndReleasesOnFailure(t *testing.T) {
	testenv.RequireRoot(t) // CNI_NETNS must be a real network namespace
	ns := podnettest.NewNetNS(t, "ovht-disp")
	n, _ := samplePodNetwork()
	for _, c := range []struct {
		name, version string
		wireErr       error
		reason        string
		calls         []string
	}{
		{"wired", "1.0.0", nil, "", []string{"network ns/p"}},
		{"not installed", "1.0.0", wiringStepErr(podwire.StepInstallTimeout), "ovn_install_timeout", []string{"network ns/p", "release ns/p"}},
		{"answer impossible", "9.9.9", nil, "internal", []string{"network ns/p", "release ns/p"}},
	} {
		src := &fakeSource{net: n}
		w := &fakeWiring{errs: map[string]error{"add": c.wireErr}}
		req := cniRequest("ADD", c.version, nil)
		req.Netns = ns
		out, cerr := dispatchServer(t, src, w).handle(t.Context(), req)
		if (cerr == nil) != (c.reason == "") || cerr != nil && cerr.reason != c.reason {
			t.Errorf("%s: %+v, want %q", c.name, cerr, c.reason)
		}
		if !slices.Equal(src.calls, c.calls) {
			t.Errorf("%s: source calls %v, want %v", c.name, src.calls, c.calls)
		}
		if c.reason == "" && !strings.Contains(string(out), `"10.16.0.5/16"`) {
			t.Errorf("%s: answer %s", c.name, out)
		}
		if c.reason == "internal" && !slices.Contains(w.log(), "undo "+podwire.PortName("c1", "eth0")) {
			t.Errorf("%s: the wiring was not undone: %v", c.name, w.log())
		}
	}
	w := &fakeWiring{}
	req := cniRequest("ADD", "1.0.0", map[string]any{"mtu": 1450})
	req.Netns = ns
	if _, cerr := dispatchServer(t, &fakeSource{net: n}, w).handle(t.Context(), req); cerr != nil {
		t.Fatal(cerr)
	}
	if w.added.MTU != 1350 || len(w.added.Routes) != 2 || w.added.Routes[0].Dst.Bits() != 0 || w.added.Mirror {
		t.Fatalf("network handed to the wiring: %+v", w.added)
	}
}

// The rates of pods wired before a restart are applied once the source
// has listed, only where they differ.
func TestReapplyRates(t *testing.T) {
	w := &fakeWiring{wired: map[string][2]int{"ns/same": {5, 0}, "ns/changed": {5, 0}, "ns/gone": {1, 1}, "ns/bad": {3, 4}}}
	rs := &fakeRates{rates: map[string]podsource.Rates{"ns/same": {IngressMbps: 5}, "ns/changed": {IngressMbps: 7}}, bad: "ns/bad"}
	dispatchServer(t, &fakeSource{}, w).reapplyRates(t.Context(), rs)
	// A rate annotation made invalid while the daemon was down removes
	// the limit it replaced (issue 23, item 6): it used to stay.
	got := w.log()
	slices.Sort(got)
	if !slices.Equal(got, []string{"rates ns/bad", "rates ns/changed"}) {
		t.Fatalf("rates applied to %v", got)
	}
}

type fakeRates struct {
	rates map[string]podsource.Rates
	bad   string
}

func (f *fakeRates) OnRatesChanged(func(string, podsource.Rates)) {}
func (f *fakeRates) WaitSynced(context.Context) error             { return nil }
func (f *fakeRates) PodRates(key string) (podsource.Rates, bool, error) {
	if key == f.bad {
		// As podsource.Kube: invalid rates are no limit, and the error.
		return podsource.Rates{}, true, errors.New("invalid")
	}
	r, ok := f.rates[key]
	return r, ok, nil
}

// A held ovn-controller (version skew) installs nothing: ADD fails at once
// with the reason, before the pod's network is looked up or allocated.
func TestAddFailsAtOnceWhileOVNControllerIsHeld(t *testing.T) {
	testenv.RequireRoot(t) // CNI_NETNS must be a real network namespace
	n, _ := samplePodNetwork()
	src := &fakeSource{net: n}
	w := &fakeWiring{}
	s := dispatchServer(t, src, w)
	s.cfg.InstallHeld = func() string { return "ovn-controller 23.03 is held for version skew with ovn-northd 25.03" }
	req := cniRequest("ADD", "1.0.0", nil)
	req.Netns = podnettest.NewNetNS(t, "ovht-held")
	_, cerr := s.handle(t.Context(), req)
	if cerr == nil || cerr.code != types.ErrTryAgainLater || cerr.reason != "ovn_controller_held" ||
		!strings.Contains(cerr.msg, "pod ns/p not wired: ovn-controller 23.03 is held for version skew") {
		t.Fatalf("ADD while held: %+v", cerr)
	}
	if len(src.calls) != 0 || len(w.log()) != 0 {
		t.Fatalf("a held ADD reached the source %v or the wiring %v", src.calls, w.log())
	}
}
