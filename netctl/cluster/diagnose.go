package cluster

import (
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// Severity of a finding, worst first.
type Severity string

// Severities.
const (
	Fail Severity = "fail"
	Warn Severity = "warn"
	Pass Severity = "pass"
)

func (s Severity) rank() int {
	switch s {
	case Fail:
		return 0
	case Warn:
		return 1
	}
	return 2
}

// Finding is one row of `netctl diagnose`.
type Finding struct {
	Severity Severity `json:"severity"`
	Scope    string   `json:"scope"` // cluster, node/NAME, subnet/NAME, pod/NS/NAME
	Check    string   `json:"check"`
	Found    string   `json:"found"`
	Fix      string   `json:"fix,omitempty"`
}

// Sort orders findings worst first, then by scope and check.
func Sort(f []Finding) {
	sort.SliceStable(f, func(i, j int) bool {
		if f[i].Severity.rank() != f[j].Severity.rank() {
			return f[i].Severity.rank() < f[j].Severity.rank()
		}
		if f[i].Scope != f[j].Scope {
			return f[i].Scope < f[j].Scope
		}
		return f[i].Check < f[j].Check
	})
}

// Worst is the worst severity (Pass for none).
func Worst(f []Finding) Severity {
	w := Pass
	for _, x := range f {
		if x.Severity.rank() < w.rank() {
			w = x.Severity
		}
	}
	return w
}

// ExitCode is doctor's: 0 all pass, 1 warnings, 2 failures.
func ExitCode(f []Finding) int {
	switch Worst(f) {
	case Fail:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// LeaderCheck reads the controller's leader Lease (nil: not found).
func LeaderCheck(l *coordinationv1.Lease, ref string, now time.Time) Finding {
	f := Finding{Scope: "cluster", Check: "controller-leader"}
	if l == nil {
		f.Severity, f.Found = Warn, "no leader Lease "+ref+": the controller is not deployed, or runs with --leader-elect=false (one replica only)"
		f.Fix = "kubectl -n kube-system get deploy ovnhost-controller; with several replicas keep --leader-elect=true"
		return f
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		f.Severity, f.Found, f.Fix = Fail, "Lease "+ref+" has no holder: no controller replica leads, pods get no addresses", "check the ovnhost-controller pods and their logs"
		return f
	}
	dur := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if l.Spec.RenewTime != nil {
		age := now.Sub(l.Spec.RenewTime.Time)
		if age > dur {
			f.Severity = Fail
			f.Found = fmt.Sprintf("leader %s stopped renewing Lease %s %s ago (lease %s): no controller acts", holder, ref, age.Round(time.Second), dur)
			f.Fix = "check the ovnhost-controller pod " + holder + " (kubectl -n kube-system logs); a standby takes over once the lease expires"
			return f
		}
	}
	f.Severity, f.Found = Pass, "leader "+holder+" renews Lease "+ref
	return f
}

// ChassisChecks compares the chassis each node announces (node annotation
// ovn.kubernetes.io/chassis) with the SB Chassis rows (name, hostname,
// encap IPs): a node without a chassis, two nodes with one chassis
// (cloned VMs share the OVS system-id), two chassis with one encap IP,
// and SB chassis of no node.
func ChassisChecks(nodes []corev1.Node, sb []SBChassis, sbKnown bool) []Finding {
	var out []Finding
	byChassis := map[string][]string{}
	sbByName := map[string]SBChassis{}
	for _, c := range sb {
		sbByName[c.Name] = c
	}
	for _, n := range nodes {
		id := n.Annotations[annotations.Chassis]
		scope := "node/" + n.Name
		if id == "" {
			out = append(out, Finding{Severity: Warn, Scope: scope, Check: "chassis", Found: "the node announces no chassis (annotation " + annotations.Chassis + ")",
				Fix: "start ovnhost on the node (it writes the annotation once ovn-controller runs)"})
			continue
		}
		byChassis[id] = append(byChassis[id], n.Name)
		if !sbKnown {
			continue
		}
		if c, ok := sbByName[id]; !ok {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "chassis", Found: "chassis " + id + " is not in the southbound database: ovn-controller on the node is not connected",
				Fix: "netctl diagnose node " + n.Name + " (sb-reachable, ovn-controller); netctl appctl " + n.Name + " ovn-controller connection-status"})
		} else {
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: "chassis", Found: fmt.Sprintf("chassis %s in SB (hostname %s, encap %s)", id, c.Hostname, strings.Join(c.EncapIPs, ","))})
		}
	}
	ids := make([]string, 0, len(byChassis))
	for id := range byChassis {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if ns := byChassis[id]; len(ns) > 1 {
			sort.Strings(ns)
			out = append(out, Finding{Severity: Fail, Scope: "cluster", Check: "duplicate-chassis",
				Found: fmt.Sprintf("nodes %s share chassis %s: they fight over one SB Chassis row and cross-node traffic breaks (cloned VMs keep the OVS system-id)", strings.Join(ns, ", "), id),
				Fix:   "on all but one of them: stop ovnhost, remove system-id.conf in the OVS db dir (/var/lib/openvswitch), start ovnhost (a new system-id is made)"})
		}
	}
	if sbKnown {
		byIP := map[string][]string{}
		for _, c := range sb {
			for _, ip := range c.EncapIPs {
				byIP[ip] = append(byIP[ip], c.Name)
			}
			if _, ok := byChassis[c.Name]; !ok {
				out = append(out, Finding{Severity: Warn, Scope: "cluster", Check: "stale-chassis", Found: fmt.Sprintf("SB chassis %s (hostname %s) belongs to no node", c.Name, c.Hostname),
					Fix: "if that host is gone: ovn-sbctl chassis-del " + c.Name})
			}
		}
		for ip, names := range byIP {
			if len(names) > 1 {
				sort.Strings(names)
				out = append(out, Finding{Severity: Fail, Scope: "cluster", Check: "duplicate-encap-ip", Found: fmt.Sprintf("chassis %s share encap IP %s: tunnels go to the wrong host", strings.Join(names, ", "), ip),
					Fix: "give each node its own tunnel address (IFACE / ENCAP_IP) and restart ovnhost there"})
			}
		}
	}
	return out
}

// SBChassis is one SB Chassis row.
type SBChassis struct {
	Name     string
	Hostname string
	EncapIPs []string
}

// SubnetChecks reports exhausted or nearly full Subnets and bad conditions.
func SubnetChecks(subs []*SubnetInfo) []Finding {
	var out []Finding
	for _, s := range subs {
		scope := "subnet/" + s.Name
		total := s.Used + s.Available
		switch {
		case total > 0 && s.Available == 0:
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "subnet-usage", Found: fmt.Sprintf("%s exhausted: %s addresses used, none free; new pods get no address", s.CIDR, num(s.Used)),
				Fix: "widen cidrBlock, shrink excludeIps, or delete pods (netctl ip list shows who holds addresses)"})
		case s.Usage >= 90:
			out = append(out, Finding{Severity: Warn, Scope: scope, Check: "subnet-usage", Found: fmt.Sprintf("%s is %.0f%% used (%s free)", s.CIDR, s.Usage, num(s.Available)),
				Fix: "widen cidrBlock or move namespaces to another Subnet before it fills"})
		default:
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: "subnet-usage", Found: fmt.Sprintf("%s %s used", s.CIDR, s.UsageString())})
		}
		if f, ok := BindingCheck(s); ok {
			out = append(out, f)
		}
		if p := s.Problem(); p != "" {
			sev := Fail
			if strings.HasPrefix(p, "Error=True") {
				sev = Warn // the usage check says it already when exhausted
			}
			out = append(out, Finding{Severity: sev, Scope: scope, Check: "subnet-conditions", Found: p, Fix: "netctl subnet show " + s.Name})
		}
	}
	return out
}

// BindingCheck: a private Subnet is meant to keep its pods among
// themselves, but one bound to no namespace (no spec.namespaces, no
// spec.namespaceSelectors) takes any pod whose author names it in the
// ovn.kubernetes.io/logical_switch annotation, as in Kube-OVN: a tenant of
// another namespace joins it and passes its isolation. false: the check
// does not apply (the Subnet is not private).
func BindingCheck(s *SubnetInfo) (Finding, bool) {
	if !s.Private {
		return Finding{}, false
	}
	f := Finding{Scope: "subnet/" + s.Name, Check: "subnet-binding"}
	switch {
	case s.Default:
		f.Severity, f.Found = Warn, "private but the default Subnet: it takes the pods of every namespace that no Subnet binds, whatever its namespaces say"
		f.Fix = "make another Subnet the default, or do not rely on this one's private isolation to separate tenants"
	case len(s.Namespaces) == 0 && len(s.NamespaceSelectors) == 0:
		f.Severity = Warn
		f.Found = "private but bound to no namespace: any pod, of any namespace, that names it in its " + annotations.LogicalSwitch + " annotation joins it and passes its isolation"
		f.Fix = "bind it to the namespaces it is for: kubectl patch subnet " + s.Name + ` --type=merge -p '{"spec":{"namespaces":["<namespace>"]}}' (or spec.namespaceSelectors)`
	default:
		f.Severity = Pass
		var parts []string
		if len(s.Namespaces) > 0 {
			parts = append(parts, "namespaces "+strings.Join(s.Namespaces, ", "))
		}
		if len(s.NamespaceSelectors) > 0 {
			parts = append(parts, "namespaces matching "+strings.Join(s.NamespaceSelectors, "; "))
		}
		f.Found = "private, admits only " + strings.Join(parts, " and ")
	}
	return f, true
}

// UnaddressedPods finds scheduled pod-network pods the controller has not
// allocated after grace, with the latest Warning event the controller wrote
// about each (events keyed "namespace/name").
func UnaddressedPods(pods []corev1.Pod, events map[string]corev1.Event, now time.Time, grace time.Duration) []Finding {
	var out []Finding
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Spec.NodeName == "" || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Annotations[annotations.Allocated] == "true" || now.Sub(p.CreationTimestamp.Time) < grace {
			continue
		}
		f := Finding{Severity: Fail, Scope: "pod/" + p.Namespace + "/" + p.Name, Check: "pod-address"}
		if e, ok := events[p.Namespace+"/"+p.Name]; ok {
			f.Found = fmt.Sprintf("no address after %s: %s: %s", now.Sub(p.CreationTimestamp.Time).Round(time.Second), e.Reason, e.Message)
			f.Fix = "act on the controller's reason above (kubectl describe pod)"
		} else {
			f.Found = fmt.Sprintf("no address after %s and no event from the controller", now.Sub(p.CreationTimestamp.Time).Round(time.Second))
			f.Fix = "the controller is not acting: check the controller-leader finding and its logs"
		}
		out = append(out, f)
	}
	return out
}

// LatestWarnings indexes the newest Warning event per involved pod.
func LatestWarnings(events []corev1.Event) map[string]corev1.Event {
	out := map[string]corev1.Event{}
	for _, e := range events {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Pod" {
			continue
		}
		k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
		if cur, ok := out[k]; !ok || eventTime(e).After(eventTime(cur)) {
			out[k] = e
		}
	}
	return out
}

func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
