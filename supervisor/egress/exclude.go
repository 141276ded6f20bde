package egress

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
)

// Item 8 of issue 23: pod traffic to another node's tunnel endpoint must
// not leave masqueraded to this node's address, where it could pass for a
// trusted chassis's tunnel packet (with pod-chosen Geneve metadata). Pod
// traffic to the chassis' encap addresses (the SB Encap table) and to the
// nodes' addresses (their Node objects) is never masqueraded; the guard's
// forward hook drops pod traffic to the tunnel ports before that.

// natRules is what the host masquerades for plan: NATOutgoing towards
// anything but the cluster's prefixes, the encap addresses and the node
// addresses.
func natRules(plan Plan, encaps, nodes []netip.Addr) hostnat.Rules {
	ex := slices.Clone(plan.Cluster)
	for _, a := range append(slices.Clone(encaps), nodes...) {
		a = a.Unmap()
		ex = append(ex, netip.PrefixFrom(a, a.BitLen()))
	}
	return hostnat.Rules{NATOutgoing: plan.NATOutgoing, Exclude: ex, SNAT: gatewaySNAT(plan.Gateways)}
}

// encapAddrs parses the Encap rows' ips (one address each; rows with
// anything else are skipped), sorted and deduplicated.
func encapAddrs(rows []sbdb.Encap) []netip.Addr {
	var out []netip.Addr
	for _, r := range rows {
		if a, err := netip.ParseAddr(r.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// nodeAddrs are the InternalIP and ExternalIP addresses of the nodes,
// sorted and deduplicated.
func nodeAddrs(nodes []*corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// runExclusions follows the SB Encap table and (with Kubernetes) the
// Nodes' addresses until ctx ends, and re-applies the last plan's NAT
// rules when they change.
func (u *Unit) runExclusions(ctx context.Context) {
	changed := make(chan struct{}, 1)
	kick := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var encapConn *ovsdbconn.Conn
	var connected chan *ovsdbconn.Conn // nil: no dial under way
	if u.sb.Endpoint != "" {
		connected = make(chan *ovsdbconn.Conn, 1)
		out := connected
		go func() {
			c, err := u.dialEncaps(ctx)
			if err != nil {
				if ctx.Err() == nil {
					u.log.Warn("pod egress: the SB Encap table is not followed; masquerade excludes only the node addresses", "err", err)
				}
				out <- nil
				return
			}
			out <- c
		}()
	}
	var nodeStore cache.Store
	if u.kube != nil {
		fac := informers.NewSharedInformerFactory(u.kube, 0)
		inf := fac.Core().V1().Nodes().Informer()
		// Keep only the addresses: every node's Node stays small in memory.
		_ = inf.SetTransform(func(obj any) (any, error) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return obj, nil
			}
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
				Status: corev1.NodeStatus{Addresses: n.Status.Addresses}}, nil
		})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { kick() },
			UpdateFunc: func(any, any) { kick() },
			DeleteFunc: func(any) { kick() },
		})
		nodeStore = inf.GetStore()
		fac.Start(ctx.Done())
		defer fac.Shutdown()
	}
	var encapChanged <-chan struct{}
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if encapConn != nil {
				encapConn.Close()
			}
			if pending := connected; pending != nil {
				go func() { // a dial that succeeded as ctx ended
					if c := <-pending; c != nil {
						c.Close()
					}
				}()
			}
			return
		case c := <-connected:
			encapConn = c
			connected = nil // received: the goroutine is done
		case <-encapChanged:
		case <-changed:
		case <-retry:
		}
		retry = nil
		var encaps, nodes []netip.Addr
		if encapConn != nil {
			encapChanged = encapConn.Changed()
			var rows []sbdb.Encap
			if err := encapConn.List(ctx, &rows); err == nil {
				encaps = encapAddrs(rows)
			}
		}
		if nodeStore != nil {
			var ns []*corev1.Node
			for _, o := range nodeStore.List() {
				if n, ok := o.(*corev1.Node); ok {
					ns = append(ns, n)
				}
			}
			nodes = nodeAddrs(ns)
		}
		if !u.setExclusions(ctx, encaps, nodes) {
			retry = time.After(time.Second)
		}
	}
}

func (u *Unit) dialEncaps(ctx context.Context) (*ovsdbconn.Conn, error) {
	full, err := sbdb.FullDatabaseModel()
	if err != nil {
		return nil, err
	}
	e := &sbdb.Encap{}
	dbm, err := ovsdbconn.Subset(full, e)
	if err != nil {
		return nil, err
	}
	return ovsdbconn.Dial(ctx, dbm, u.sb.Endpoint, ovsdbconn.Options{
		Monitor: []ovsdbconn.Table{{Model: e, Fields: []any{&e.IP}, Where: []model.Condition(nil)}},
		TLS:     u.sb.TLS, Log: u.log.With("component", "libovsdb"), Name: "OVN_Southbound at " + u.sb.Endpoint,
	})
}

// setExclusions records the encap and node addresses and, when they
// changed and a plan was applied, re-applies its NAT rules. False when
// that failed: the caller tries again (a transient failure must not leave
// pod traffic to a tunnel endpoint masqueraded).
func (u *Unit) setExclusions(ctx context.Context, encaps, nodes []netip.Addr) bool {
	u.natMu.Lock()
	defer u.natMu.Unlock()
	u.mu.Lock()
	same := slices.Equal(u.encaps, encaps) && slices.Equal(u.nodeAddrs, nodes)
	prevE, prevN := u.encaps, u.nodeAddrs
	u.encaps, u.nodeAddrs = encaps, nodes
	plan, m := u.plan, u.mgr
	u.mu.Unlock()
	if same || plan == nil || m == nil {
		return true
	}
	if err := m.Apply(ctx, natRules(*plan, encaps, nodes)); err != nil {
		u.log.Warn("pod egress: cannot update the masquerade exclusions; retrying", "err", err)
		u.mu.Lock()
		u.encaps, u.nodeAddrs = prevE, prevN
		u.mu.Unlock()
		return false
	}
	u.log.Info("pod egress: masquerade exclusions updated", "encap_addresses", encaps, "node_addresses", nodes)
	return true
}
