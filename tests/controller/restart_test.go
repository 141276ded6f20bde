package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// TestKilledMidBurstRestartLeavesNoDuplicateAndNoOrphan: the controller
// process is SIGKILLed while 500 pods are being created, some pods are
// deleted while it is down, and a new process (same leader identity) takes
// over. In the end every pod has a unique address and a matching port, and
// no port exists without its pod.
func TestKilledMidBurstRestartLeavesNoDuplicateAndNoOrphan(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	e.createNode("node-b", "192.168.10.12")
	p1 := e.startControllerProcess()
	p1.waitReady(t, 60*time.Second)

	created := make(chan error, 1)
	go func() {
		created <- e.createPods("default", 500, 16, func(i int) string { return fmt.Sprintf("burst-%03d", i) },
			func(i int) string { return []string{"node-a", "node-b"}[i%2] }, nil)
	}()
	e.waitFor(60*time.Second, "at least 100 pods annotated before the kill", func() (bool, string) {
		n := 0
		for _, p := range e.podList("default") {
			if annotated(p) {
				n++
			}
		}
		return n >= 100, fmt.Sprintf("%d annotated", n)
	})
	p1.kill()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	killedAt := 0
	for _, p := range e.podList("default") {
		if annotated(p) {
			killedAt++
		}
	}
	t.Logf("killed with %d/500 pods annotated", killedAt)
	// While it is down: delete ten annotated pods; their ports must be collected.
	deleted := map[string]bool{}
	for _, p := range e.podList("default") {
		if annotated(p) && len(deleted) < 10 {
			deleted[p.Name] = true
			if err := e.kc.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.waitFor(30*time.Second, "10 pods gone from the API", func() (bool, string) {
		n := len(e.podList("default"))
		return n == 490, fmt.Sprintf("%d pods", n)
	})

	p2 := e.startControllerProcess()
	line := p2.waitReady(t, 60*time.Second)
	t.Logf("restart: %s", line)
	e.waitFor(90*time.Second, "490 pods annotated with matching ports, no orphan port", func() (bool, string) {
		n := 0
		for _, p := range e.podList("default") {
			if !annotated(p) {
				continue
			}
			if ok, why := e.podPortMatches(p); !ok {
				return false, why
			}
			n++
		}
		if n != 490 {
			return false, fmt.Sprintf("%d/490 annotated", n)
		}
		for _, l := range e.lsps() {
			if l.Type == "" && strings.HasPrefix(l.Name, "burst-") {
				if deleted[strings.TrimSuffix(l.Name, ".default")] {
					return false, "orphan port " + l.Name
				}
			}
		}
		return true, ""
	})
	ips := map[string]string{}
	for _, p := range e.podList("default") {
		ip := p.Annotations[annotations.IPAddress]
		if o, dup := ips[ip]; dup {
			t.Fatalf("duplicate address %s: %s and %s", ip, o, p.Name)
		}
		ips[ip] = p.Name
	}
	ports := 0
	for _, l := range e.lsps() {
		if l.Type == "" {
			ports++
			for _, a := range l.Addresses {
				f := strings.Fields(a)
				if len(f) > 1 && !strings.HasPrefix(l.Name, "node-") {
					if ips[f[1]] == "" || ips[f[1]]+".default" != l.Name {
						t.Fatalf("port %s has %s which belongs to %q", l.Name, f[1], ips[f[1]])
					}
				}
			}
		}
	}
	if ports != 490+2 {
		t.Fatalf("%d workload ports, want 490 pod ports + 2 node ports", ports)
	}
}
