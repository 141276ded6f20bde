package extgw

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// Issue 23 item 7: who may take which external address is the admin's
// (keys of kube-system/ovn-external-gw-config), not the pod author's.

// natFor is the NAT rule of type typ whose logical IP is the pod's (nil: none).
func natFor(t *testing.T, e *ctltest.Env, typ nbdb.NATType, podIP string) *nbdb.NAT {
	t.Helper()
	for _, n := range nbtest.Rows[*nbdb.NAT](t, e.NBServer, e.NB, nbdb.NATTable) {
		if n.Type == typ && n.LogicalIP == podIP {
			return n
		}
	}
	return nil
}

// events keeps every event seen, so that waiting for one does not drop
// another the test waits for next (the pods are synced in any order).
type events struct {
	e    *ctltest.Env
	seen []string
}

// await returns the first event starting with prefix whose message holds
// every one of subs, waiting for it if need be.
func (ev *events) await(t *testing.T, prefix string, subs ...string) string {
	t.Helper()
	match := func(s string) bool {
		if !strings.HasPrefix(s, prefix) {
			return false
		}
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return false
			}
		}
		return true
	}
	for _, s := range ev.seen {
		if match(s) {
			return s
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-ev.e.Recorder.Events:
			ev.seen = append(ev.seen, s)
			if match(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no event %q with %q; events: %q", prefix, subs, ev.seen)
			return ""
		}
	}
}

var tenants = with(map[string]string{
	ovnnet.KeyNamespaceAddresses: "team-a: 172.56.0.10-172.56.0.19\nteam-b: 172.56.0.20-172.56.0.29 # b's block\n",
	ovnnet.KeyReservedAddresses:  "172.56.0.2-172.56.0.9, 172.56.0.15",
})

func TestEIPOutsideTheNamespacesAllowlistIsRefused(t *testing.T) {
	e := startExternal(t, gatewayConfig(tenants), gatewayNode("n1"),
		nsPod("team-b", "squat", "10.16.0.5", map[string]string{annotations.EIP: "172.56.0.10"}),            // team-a's
		nsPod("team-a", "lan", "10.16.0.6", map[string]string{annotations.EIP: "172.56.0.5"}),               // reserved (a LAN host)
		nsPod("team-a", "reserved-in-own", "10.16.0.7", map[string]string{annotations.SNAT: "172.56.0.15"}), // reserved inside team-a's block
		nsPod("team-c", "unlisted", "10.16.0.8", map[string]string{annotations.SNAT: "172.56.0.30"}),        // namespace not listed
		nsPod("team-a", "own", "10.16.0.9", map[string]string{annotations.EIP: "172.56.0.11"}))              // allowed
	e.AwaitNB("team-a's own EIP", func() bool { return natFor(t, e, nbdb.NATTypeDNATAndSNAT, "10.16.0.9") != nil })

	evs := &events{e: e}
	ev := evs.await(t, "Warning ExternalAddressNotAllowed", "172.56.0.10", "team-b")
	for _, want := range []string{ovnnet.KeyNamespaceAddresses, "172.56.0.20-172.56.0.29", `"team-b: 172.56.0.10"`} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q does not name %q (the rule, what team-b may use, the fix)", ev, want)
		}
	}
	ev = evs.await(t, "Warning ExternalAddressNotAllowed", "172.56.0.30", "team-c")
	if !strings.Contains(ev, "for team-c only none") {
		t.Errorf("event %q should say team-c may use no address", ev)
	}
	evs.await(t, "Warning ExternalAddressReserved", "172.56.0.5", ovnnet.KeyReservedAddresses)
	evs.await(t, "Warning ExternalAddressReserved", "172.56.0.15", ovnnet.KeyReservedAddresses)
	for ip, typ := range map[string]nbdb.NATType{"10.16.0.5": nbdb.NATTypeDNATAndSNAT, "10.16.0.6": nbdb.NATTypeDNATAndSNAT, "10.16.0.7": nbdb.NATTypeSNAT, "10.16.0.8": nbdb.NATTypeSNAT} {
		if n := natFor(t, e, typ, ip); n != nil {
			t.Errorf("refused pod %s got a NAT rule: %+v", ip, n)
		}
	}
}

func TestWithoutAnAllowlistNoNamespaceGetsAnExternalAddress(t *testing.T) {
	e := startExternal(t, gatewayConfig(with(map[string]string{ovnnet.KeyNamespaceAddresses: ""})), gatewayNode("n1"),
		eipPod("a", "10.16.0.5", map[string]string{annotations.EIP: "172.56.0.10"}))
	evs := &events{e: e}
	evs.await(t, "Warning NoNamespaceMayUseExternalAddresses", ovnnet.KeyNamespaceAddresses)
	evs.await(t, "Warning ExternalAddressNotAllowed", "172.56.0.10", "default")
	if n := nat(t, e, "172.56.0.10"); n != nil {
		t.Fatalf("EIP programmed with no namespace allowed: %+v", n)
	}
}

func TestSNATIsSharedAcrossNamespacesOnlyWhenBothAreListed(t *testing.T) {
	data := with(map[string]string{ovnnet.KeyNamespaceAddresses: "team-a: 172.56.0.20\nteam-b: 172.56.0.20\n*: 172.56.0.30-172.56.0.40"})
	e := startExternal(t, gatewayConfig(data), gatewayNode("n1"),
		nsPod("team-a", "x", "10.16.0.5", map[string]string{annotations.SNAT: "172.56.0.20"}),
		nsPod("team-c", "z", "10.16.0.7", map[string]string{annotations.SNAT: "172.56.0.30"}))
	e.AwaitNB("team-a's and team-c's SNAT", func() bool {
		return natFor(t, e, nbdb.NATTypeSNAT, "10.16.0.5") != nil && natFor(t, e, nbdb.NATTypeSNAT, "10.16.0.7") != nil
	})
	// team-b is listed for .20 with team-a: they share it.
	if _, err := e.Kube.CoreV1().Pods("team-b").Create(e.Ctx, nsPod("team-b", "y", "10.16.0.6", map[string]string{annotations.SNAT: "172.56.0.20"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("team-b's shared SNAT", func() bool { return natFor(t, e, nbdb.NATTypeSNAT, "10.16.0.6") != nil })
	// team-d may take a free address of "*", not the one team-c leaves from.
	if _, err := e.Kube.CoreV1().Pods("team-d").Create(e.Ctx, nsPod("team-d", "w", "10.16.0.8", map[string]string{annotations.SNAT: "172.56.0.30"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := &events{e: e}
	ev := evs.await(t, "Warning "+ovnnet.ReasonSNATShared, "172.56.0.30", "team-c")
	if !strings.Contains(ev, ovnnet.KeyNamespaceAddresses) || !strings.Contains(ev, "team-d") {
		t.Errorf("event %q does not name the rule and both namespaces", ev)
	}
	if n := natFor(t, e, nbdb.NATTypeSNAT, "10.16.0.8"); n != nil {
		t.Fatalf("team-d leaves from team-c's SNAT address: %+v", n)
	}
	// A pod of team-c itself may share it.
	if _, err := e.Kube.CoreV1().Pods("team-c").Create(e.Ctx, nsPod("team-c", "z2", "10.16.0.9", map[string]string{annotations.SNAT: "172.56.0.30"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("team-c's second pod's SNAT", func() bool { return natFor(t, e, nbdb.NATTypeSNAT, "10.16.0.9") != nil })
}

func TestAnEIPTheAdminTakesAwayIsRemoved(t *testing.T) {
	e := startExternal(t, gatewayConfig(tenants), gatewayNode("n1"),
		nsPod("team-a", "own", "10.16.0.9", map[string]string{annotations.EIP: "172.56.0.11"}))
	e.AwaitNB("team-a's EIP", func() bool { return nat(t, e, "172.56.0.11") != nil })
	evs := &events{e: e}
	cm, err := e.Kube.CoreV1().ConfigMaps(ovnnet.ExternalGatewayNamespace).Get(e.Ctx, ovnnet.ExternalGatewayConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[ovnnet.KeyReservedAddresses] = "172.56.0.11"
	if _, err := e.Kube.CoreV1().ConfigMaps(ovnnet.ExternalGatewayNamespace).Update(e.Ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs.await(t, "Warning ExternalAddressReserved", "172.56.0.11")
	e.AwaitNB("the EIP the admin reserved is gone", func() bool { return nat(t, e, "172.56.0.11") == nil })
}

func TestAnSNATTheEIPOverridesIsNotChecked(t *testing.T) {
	e := startExternal(t, gatewayConfig(tenants), gatewayNode("n1"),
		nsPod("team-a", "both", "10.16.0.9", map[string]string{annotations.EIP: "172.56.0.11", annotations.SNAT: "172.56.0.25"}))
	e.AwaitNB("team-a's EIP", func() bool { return nat(t, e, "172.56.0.11") != nil })
	evs := &events{e: e}
	evs.await(t, "Warning SNATIgnored", "172.56.0.25")
}

func TestThePolicyAppliesWhileNoGatewayNodeIsReady(t *testing.T) {
	e := startExternal(t, gatewayConfig(tenants), gatewayNode("n1"),
		nsPod("team-a", "own", "10.16.0.9", map[string]string{annotations.EIP: "172.56.0.11"}))
	e.AwaitNB("team-a's EIP", func() bool { return nat(t, e, "172.56.0.11") != nil })
	evs := &events{e: e}
	n1 := gatewayNode("n1")
	n1.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := e.Kube.CoreV1().Nodes().Update(e.Ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs.await(t, "Normal WaitingForGatewayNodes", "n1: not Ready")
	cm, err := e.Kube.CoreV1().ConfigMaps(ovnnet.ExternalGatewayNamespace).Get(e.Ctx, ovnnet.ExternalGatewayConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[ovnnet.KeyNamespaceAddresses] = "team-b: 172.56.0.20"
	if _, err := e.Kube.CoreV1().ConfigMaps(ovnnet.ExternalGatewayNamespace).Update(e.Ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs.await(t, "Warning ExternalAddressNotAllowed", "172.56.0.11", "team-a")
	e.AwaitNB("the EIP team-a lost is gone", func() bool { return nat(t, e, "172.56.0.11") == nil })
}
