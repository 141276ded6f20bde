package controller_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestTwoReplicasLeaderElectionHealthAndMetrics: of two controller
// processes only the lease holder works and is ready; the standby answers
// /healthz but not /readyz; when the leader is killed the standby takes
// over and serves new pods; /metrics counts the pods.
func TestTwoReplicasLeaderElectionHealthAndMetrics(t *testing.T) {
	t0 := time.Now()
	e := newEnv(t)
	t.Logf("env up after %s", time.Since(t0))
	t.Cleanup(func() { t.Logf("cleanup starts after %s", time.Since(t0)) })
	e.createNode("node-a", "192.168.10.11")
	lease := []string{"--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=250ms"}
	a1, a2 := freeAddr(t), freeAddr(t)
	p1 := e.startControllerProcess(append([]string{"--identity=replica-1", "--health-addr=" + a1}, lease...)...)
	p1.waitReady(t, 60*time.Second)
	p2 := e.startControllerProcess(append([]string{"--identity=replica-2", "--health-addr=" + a2}, lease...)...)
	// The standby serves /healthz; /readyz says why it is not ready.
	p2.waitLine(t, "standby: another replica leads", 30*time.Second)
	if code, body := get("http://" + a2 + "/healthz"); code != 200 {
		t.Fatalf("standby /healthz = %d %q", code, body)
	}
	if code, body := get("http://" + a2 + "/readyz"); code != 503 || !strings.Contains(body, "standby") {
		t.Fatalf("standby /readyz = %d %q, want 503 naming standby", code, body)
	}
	if code, _ := get("http://" + a1 + "/readyz"); code != 200 {
		t.Fatalf("leader /readyz = %d", code)
	}
	t.Logf("standby checked after %s", time.Since(t0))
	e.createPod("default", "before", "node-a", nil)
	e.waitFor(30*time.Second, "pod before annotated by the leader", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/before")
		return ok && annotated(p.(*corev1.Pod)), "not annotated"
	})
	e.waitFor(30*time.Second, "ovn-default status counting the pod", func() (bool, string) {
		s := e.subnet("ovn-default")
		return s != nil && s.Status.V4UsingIPs == 1, "not yet"
	})
	_, metrics := get("http://" + a1 + "/metrics")
	for _, m := range []string{"ovnhost_controller_pod_addresses_assigned_total 1", "ovnhost_controller_leader 1", "ovnhost_controller_nb_connected 1",
		`ovnhost_controller_subnet_ips{family="ipv4",state="using",subnet="ovn-default"} 1`,
		// Work queues and API client, under Kubernetes' own metric names.
		`workqueue_adds_total{name="pods"}`, `workqueue_depth{name="subnets"}`, `workqueue_work_duration_seconds_count{name="pods"}`,
		`rest_client_requests_total{code="200",host=`, `rest_client_request_duration_seconds_count{host=`} {
		if !strings.Contains(metrics, m) {
			t.Fatalf("leader /metrics lacks %q", m)
		}
	}
	t.Logf("killing the leader after %s", time.Since(t0))
	p1.kill()
	p2.waitReady(t, 30*time.Second)
	t.Logf("standby took over after %s", time.Since(t0))
	e.createPod("default", "after", "node-a", nil)
	e.waitFor(30*time.Second, "pod after annotated by the new leader, with a different address", func() (bool, string) {
		p, ok, _ := e.pods.GetStore().GetByKey("default/after")
		q, _, _ := e.pods.GetStore().GetByKey("default/before")
		if !ok || !annotated(p.(*corev1.Pod)) {
			return false, "not annotated"
		}
		good, why := e.podPortMatches(p.(*corev1.Pod))
		return good && p.(*corev1.Pod).Annotations["ovn.kubernetes.io/ip_address"] != q.(*corev1.Pod).Annotations["ovn.kubernetes.io/ip_address"], why
	})
	if code, _ := get("http://" + a2 + "/readyz"); code != 200 {
		t.Fatalf("new leader /readyz = %d", code)
	}
}
