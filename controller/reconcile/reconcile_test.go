package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestAFailedKeyIsRetriedUntilItSyncs(t *testing.T) {
	q := NewQueue("test", time.Millisecond, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	tries := 0
	synced := make(chan struct{})
	f := func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		tries++
		if tries < 3 {
			return errors.New("not yet")
		}
		close(synced)
		return nil
	}
	var wg sync.WaitGroup
	Workers(ctx, &wg, slog.New(slog.NewTextHandler(io.Discard, nil)), 1, q, f, "test")
	ShutDownWith(ctx, &wg, q)
	q.Add("k")
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		t.Fatal("the key was not retried until it synced")
	}
	cancel()
	wg.Wait() // the workers return once the queue is shut down
	if q.NumRequeues("k") != 0 {
		t.Fatalf("the key's back-off was not forgotten after it synced (%d requeues)", q.NumRequeues("k"))
	}
}

func TestNodeReadiness(t *testing.T) {
	for _, c := range []struct {
		conds []corev1.NodeCondition
		ready bool
	}{
		{nil, true}, // not reported yet
		{[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, true},
		{[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}, false},
		{[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}, false},
	} {
		if got := NodeReady(&corev1.Node{Status: corev1.NodeStatus{Conditions: c.conds}}); got != c.ready {
			t.Errorf("NodeReady(%v) = %v, want %v", c.conds, got, c.ready)
		}
	}
}
