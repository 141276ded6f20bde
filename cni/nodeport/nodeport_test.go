package nodeport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/cni/podsource"
)

// What brings a new attempt at ovn0 (tests/cni and tests/node configure
// the real one): a retry with back-off while the source fails, and at
// once a Subnet change.

// failingSource never has the node's network; it reports each call.
type failingSource struct {
	calls         chan struct{}
	node, subnets chan struct{}
}

func (f *failingSource) NodeNetwork(context.Context) (*podsource.NodeNetwork, error) {
	f.calls <- struct{}{}
	return nil, errors.New("not annotated yet")
}

type watchingSource struct{ *failingSource }

func (w watchingSource) WatchNode() (node, subnets <-chan struct{}, stop func()) {
	return w.node, w.subnets, func() {}
}

func run(t *testing.T, src Source, retry time.Duration) (stop func()) {
	t.Helper()
	p := New(Options{Source: src, Retry: retry, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	return func() { cancel(); <-done }
}

func TestRetriesWhileTheSourceFails(t *testing.T) {
	src := &failingSource{calls: make(chan struct{})}
	stop := run(t, src, time.Millisecond)
	defer stop()
	timeout := time.After(20 * time.Second)
	for range 5 {
		select {
		case <-src.calls:
		case <-timeout:
			t.Fatal("no retry")
		}
	}
}

func TestSubnetChangeReconfigures(t *testing.T) {
	src := watchingSource{&failingSource{calls: make(chan struct{}), node: make(chan struct{}), subnets: make(chan struct{})}}
	stop := run(t, src, time.Hour) // no retry by time in this test
	defer stop()
	<-src.calls // the first attempt
	go func() { src.subnets <- struct{}{} }()
	select {
	case <-src.calls:
	case <-time.After(20 * time.Second):
		t.Fatal("a Subnet change did not bring a new attempt")
	}
}
