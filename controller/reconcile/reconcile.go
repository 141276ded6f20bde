// Package reconcile is what every reconciler of ovnhost-controller shares:
// a named, rate-limited work queue (its name labels the workqueue_*
// metrics), the worker loop that retries a failed key with back-off, and
// the few predicates on pods and nodes that several reconcilers read.
package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Queue is a reconciler's work queue of object keys.
type Queue = workqueue.TypedRateLimitingInterface[string]

// NewQueue is a queue named name whose failed keys come back after base,
// doubling up to max.
func NewQueue(name string, base, max time.Duration) Queue {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// NewDefaultQueue is NewQueue with a back-off from 50ms to 30s.
func NewDefaultQueue(name string) Queue { return NewQueue(name, 50*time.Millisecond, 30*time.Second) }

// SyncFunc brings one key in line; an error retries it with back-off.
type SyncFunc func(ctx context.Context, key string) error

// ProcessNext takes one key and syncs it; false once the queue is shut down
// (or ctx ended while the key failed).
func ProcessNext(ctx context.Context, log *slog.Logger, q Queue, sync SyncFunc, what string) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil {
		if ctx.Err() != nil {
			return false
		}
		log.Warn("sync failed, will retry", "kind", what, "key", key, "error", err)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// Workers starts n workers on q, tracked by wg; they end once q is shut down.
func Workers(ctx context.Context, wg *sync.WaitGroup, log *slog.Logger, n int, q Queue, sync SyncFunc, what string) {
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ProcessNext(ctx, log, q, sync, what) {
			}
		}()
	}
}

// ShutDownWith shuts q down when ctx ends (its workers then return), tracked by wg.
func ShutDownWith(ctx context.Context, wg *sync.WaitGroup, q Queue) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		q.ShutDown()
	}()
}

// Enqueue is an informer handler that adds the object's namespace/name key
// (also of a deleted object whose final state is unknown).
func Enqueue(q Queue) func(any) {
	return func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
}

// WantsAddress says whether a pod needs an address now: scheduled, not
// host-network, not finished.
func WantsAddress(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// NodeReady: no Ready condition (not reported yet) counts as ready; False
// or Unknown (kubelet gone) does not.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}

// ReadyOf is the status of the node's Ready condition ("" when it has none).
func ReadyOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
