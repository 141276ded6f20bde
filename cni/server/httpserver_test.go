package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// blockingSource answers no pod until its context ends (a controller that
// never annotates), counting the requests that are inside it.
type blockingSource struct {
	inside, returned atomic.Int32
	entered          chan struct{}
}

func (b *blockingSource) PodNetwork(ctx context.Context, _ podsource.PodRef) (*podsource.PodNetwork, error) {
	b.inside.Add(1)
	b.entered <- struct{}{}
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond) // a handler that takes a moment to unwind
	b.returned.Add(1)
	return nil, &podsource.AnnotationTimeout{Msg: "gave up: " + ctx.Err().Error()}
}
func (b *blockingSource) Release(context.Context, podsource.PodRef) error { return nil }
func (b *blockingSource) NodeNetwork(context.Context) (*podsource.NodeNetwork, error) {
	return nil, errors.New("none")
}
func (b *blockingSource) Kubernetes() bool            { return false }
func (b *blockingSource) Start(context.Context) error { return nil }
func (b *blockingSource) Stop()                       {}

func httpTestServer(t *testing.T, maxConcurrent int) (*Server, *blockingSource, func(body []byte) (*protocol.Response, error)) {
	t.Helper()
	testenv.RequireRoot(t)
	src := &blockingSource{entered: make(chan struct{}, 16)}
	sock := filepath.Join(t.TempDir(), "cni.sock")
	s, err := Assemble(Config{Socket: sock, AnnotationWait: time.Minute, InstallWait: time.Minute, MaxConcurrent: maxConcurrent,
		Registerer: prometheus.NewRegistry(), Log: slog.Default()}, Parts{Source: src, Wiring: &fakeWiring{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.listen(); err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(body []byte) (*protocol.Response, error) {
		resp, err := cl.Post("http://cni"+protocol.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var r protocol.Response
		return &r, json.NewDecoder(resp.Body).Decode(&r)
	}
	return s, src, post
}

func addRequest(t *testing.T, netns, id string) []byte {
	b, _ := json.Marshal(protocol.Request{Command: "ADD", ContainerID: id, Netns: netns, IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + id, Config: json.RawMessage(`{"cniVersion":"1.0.0","name":"n","type":"ovnhost-cni"}`)})
	return b
}

// Stop used to return while handlers still ran against the OVS client and
// pod source it was about to close.
func TestStopWaitsForRequestsInFlight(t *testing.T) {
	s, src, post := httpTestServer(t, 4)
	ns := podnettest.NewNetNS(t, "ovht-stop")
	done := make(chan error, 1)
	go func() { _, err := post(addRequest(t, ns, "inflight")); done <- err }()
	<-src.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = s.Stop(ctx)
	if src.returned.Load() != 1 {
		t.Fatal("Stop returned while a request was still being handled")
	}
	<-done
}

func TestRequestsBeyondTheCapWaitThenTryAgain(t *testing.T) {
	s, src, post := httpTestServer(t, 1)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	}()
	ns := podnettest.NewNetNS(t, "ovht-cap")
	go func() { _, _ = post(addRequest(t, ns, "first")) }()
	<-src.entered
	// The second waits for the slot; its client gives up first here.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://cni"+protocol.Path, bytes.NewReader(addRequest(t, ns, "second")))
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.cfg.Socket)
	}}}
	if _, err := cl.Do(req); err == nil {
		t.Fatal("a request beyond the cap was answered while the slot was taken")
	}
	if src.inside.Load() != 1 {
		t.Fatalf("%d requests reached the pod source with a cap of 1", src.inside.Load())
	}
}

func TestUnknownProtocolFieldsAreRefused(t *testing.T) {
	s, _, post := httpTestServer(t, 2)
	defer func() { _ = s.Stop(context.Background()) }()
	for _, body := range []string{
		`{"command":"ADD","containerID":"x","netns":"/x","ifName":"eth0","config":{},"sudo":true}`,
		`{"command":"ADD","config":{}} {"command":"DEL"}`,
		`{"config":{}}`,
	} {
		r, err := post([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if r.Error == nil || r.Error.Code != 6 || !strings.Contains(r.Error.Msg, "cannot decode the plugin's request") {
			t.Errorf("%s: %+v", body, r.Error)
		}
	}
}
