package subnets

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// statusFingerprint is what syncStatus compares between writes: counts and
// conditions without their times.
func statusFingerprint(st kubeovnv1.SubnetStatus, conds []kubeovnv1.Condition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v/%v/%s/%s/%v/%v/%s/%s", st.V4AvailableIPs, st.V4UsingIPs, st.V4AvailableIPRange, st.V4UsingIPRange, st.V6AvailableIPs, st.V6UsingIPs,
		st.U2OInterconnectionIP, st.U2OInterconnectionMAC)
	for _, c := range conds {
		fmt.Fprintf(&b, "|%s=%s/%s/%s/%d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return b.String()
}

// syncStatus writes a Subnet's status: address counts and conditions.
func (r *Reconciler) syncStatus(ctx context.Context, name string) error {
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured)
	r.mu.Lock()
	_, valid := r.valid[name]
	r.mu.Unlock()
	var st kubeovnv1.SubnetStatus
	if usage, ok := r.cfg.IPAM.Usage(name); ok && valid {
		st.V4AvailableIPs, st.V4UsingIPs, st.V4AvailableIPRange, st.V4UsingIPRange = usage.V4Available, usage.V4Using, usage.V4AvailableRange, usage.V4UsingRange
		st.V6AvailableIPs, st.V6UsingIPs, st.V6AvailableIPRange, st.V6UsingIPRange = usage.V6Available, usage.V6Using, usage.V6AvailableRange, usage.V6UsingRange
		r.ipsGauge.WithLabelValues(name, "ipv4", "available").Set(st.V4AvailableIPs)
		r.ipsGauge.WithLabelValues(name, "ipv4", "using").Set(st.V4UsingIPs)
		r.ipsGauge.WithLabelValues(name, "ipv6", "available").Set(st.V6AvailableIPs)
		r.ipsGauge.WithLabelValues(name, "ipv6", "using").Set(st.V6UsingIPs)
	}
	conds := r.conditions(u)
	if conds == nil {
		return nil // not processed yet
	}
	if ips, mac, ok := r.cfg.Net.U2O(ctx, name); ok && valid {
		st.U2OInterconnectionIP, st.U2OInterconnectionMAC, st.U2OInterconnectionVPC = strings.Join(ips, ","), mac, ovnnet.DefaultRouter
	}
	cur, _ := kubeovnv1.FromUnstructured(u)
	same := stampConditions(conds, cur, u.GetGeneration(), time.Now().UTC().Format(time.RFC3339)) && cur != nil &&
		cur.Status.U2OInterconnectionIP == st.U2OInterconnectionIP && cur.Status.U2OInterconnectionMAC == st.U2OInterconnectionMAC &&
		cur.Status.V4AvailableIPs == st.V4AvailableIPs && cur.Status.V4UsingIPs == st.V4UsingIPs &&
		cur.Status.V4AvailableIPRange == st.V4AvailableIPRange && cur.Status.V4UsingIPRange == st.V4UsingIPRange &&
		cur.Status.V6AvailableIPs == st.V6AvailableIPs && cur.Status.V6UsingIPs == st.V6UsingIPs
	fp := statusFingerprint(st, conds)
	r.mu.Lock()
	written, wrote := r.statusWritten[name]
	r.mu.Unlock()
	if same && (!wrote || written == fp) {
		return nil
	}
	st.Conditions = conds
	body := map[string]any{}
	raw, _ := json.Marshal(st)
	_ = json.Unmarshal(raw, &body)
	for _, k := range []string{"u2oInterconnectionIP", "u2oInterconnectionMAC", "u2oInterconnectionVPC"} {
		if _, set := body[k]; !set {
			body[k] = nil // a merge patch removes what it sets to null
		}
	}
	patch, _ := json.Marshal(map[string]any{"status": body})
	_, err = r.cfg.Dynamic.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err == nil {
		r.mu.Lock()
		r.statusWritten[name] = fp
		r.mu.Unlock()
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// conditions are the Subnet's conditions now (nil: not processed yet):
// Validated and Ready, Error (pods waiting for an address), and the
// gateway's GatewayReady of a valid centralized subnet.
func (r *Reconciler) conditions(u *unstructured.Unstructured) []kubeovnv1.Condition {
	name := u.GetName()
	r.mu.Lock()
	prob := r.problems[name]
	_, valid := r.valid[name]
	notApplied := r.notApplied[name]
	blocked := r.deleting[name]
	r.mu.Unlock()
	conds := []kubeovnv1.Condition{}
	switch {
	case prob != nil:
		conds = append(conds,
			kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "False", Reason: prob.Reason, Message: prob.Message},
			kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: "ValidationFailed", Message: "see the Validated condition"},
		)
	case valid:
		v := kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "True", Reason: kubeovnv1.ValidationSucceeded}
		if notApplied != "" {
			v.Reason, v.Message = kubeovnv1.AcceptedNotApplied, notApplied
		}
		ready := kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: "ResourceReady", Message: "logical switch and router port programmed"}
		if blocked != "" && u.GetDeletionTimestamp() != nil {
			ready = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: "DeletionWaitsForPods", Message: blocked}
		}
		conds = append(conds, v, ready)
	default:
		return nil
	}
	if exhausted := r.pods.Exhausted(name); exhausted > 0 {
		conds = append(conds, kubeovnv1.Condition{Type: kubeovnv1.Error, Status: "True", Reason: string(ipam.KindExhausted),
			Message: fmt.Sprintf("%d pod(s) wait for an address: subnet has no free address; widen cidrBlock, shrink excludeIps or delete pods", exhausted)})
	} else {
		conds = append(conds, kubeovnv1.Condition{Type: kubeovnv1.Error, Status: "False", Reason: "NoError"})
	}
	if gw := r.gateways.Condition(name); gw != nil && valid {
		conds = append(conds, *gw)
	}
	return conds
}

// stampConditions sets each condition's generation and times (a condition
// whose status stays keeps its transition time) and reports whether they
// say what cur's say.
func stampConditions(conds []kubeovnv1.Condition, cur *kubeovnv1.Subnet, generation int64, now string) bool {
	same := cur != nil && len(cur.Status.Conditions) == len(conds)
	for i := range conds {
		conds[i].ObservedGeneration = generation
		conds[i].LastUpdateTime = now
		conds[i].LastTransitionTime = now
		if cur == nil {
			continue
		}
		for _, old := range cur.Status.Conditions {
			if old.Type == conds[i].Type {
				if old.Status == conds[i].Status {
					conds[i].LastTransitionTime = old.LastTransitionTime
				}
				if old.Status != conds[i].Status || old.Reason != conds[i].Reason || old.Message != conds[i].Message || old.ObservedGeneration != conds[i].ObservedGeneration {
					same = false
				}
			}
		}
	}
	return same
}
