package podsource

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// The QoS hook is installed while the informer's handlers run (the server
// sets it around Start): run with -race (make test-unit does), this used to
// report a data race on Kube.onQoS.
func TestQoSHookInstalledWhileInformerRuns(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
		Annotations: map[string]string{annotations.IngressRate: "1"}}, Spec: corev1.PodSpec{NodeName: "n"}})
	k := NewKube(cs, nil, KubeOptions{Node: "n", Log: slog.Default()})
	ctx := context.Background()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if err := k.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	got := make(chan int, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 2; i < 20; i++ {
			p, _ := cs.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			p.Annotations[annotations.IngressRate] = strconv.Itoa(i)
			_, _ = cs.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{})
		}
	}()
	k.OnRatesChanged(func(_ string, r Rates) { calls.Add(1); got <- r.IngressMbps })
	<-done
	// A change after the hook is in place reaches it.
	p, _ := cs.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	p.Annotations[annotations.IngressRate] = "77"
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v := <-got:
			if v == 77 {
				return
			}
		case <-deadline:
			t.Fatalf("the hook did not see the last rate change (%d calls)", calls.Load())
		}
	}
}
