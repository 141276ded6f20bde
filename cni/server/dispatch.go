package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// Dispatch: a request decoded, then handed to the pod source and the pod
// wiring; their errors become CNI error codes and metrics reasons here.

// request is a decoded CNI request.
type request struct {
	*protocol.Request
	conf protocol.NetConf
	pod  podsource.PodRef
	host string // host veth / OVS port name
}

// attachment is the pod interface the request names, for the wiring.
func (q *request) attachment() podwire.Attachment {
	return podwire.Attachment{Namespace: q.pod.Namespace, Name: q.pod.Name, ContainerID: q.ContainerID,
		Netns: q.Netns, IfName: q.IfName, Port: q.host, Provider: q.pod.Provider}
}

// defaultIfName is the interface of a pod's default network: kubelet's
// (and every CRI runtime's) CNI_IFNAME for the pod network; Multus passes it
// on to the default network's delegate and names the extra ones net1 ...
const defaultIfName = "eth0"

// decodeProvider sets the network the request's interface is on: the
// default network, or the attachment network of the configuration's
// provider (a NetworkAttachmentDefinition's, through Multus).
func (s *Server) decodeProvider(q *request) *cniError {
	req := q.Request
	prov := protocol.AttachmentProvider(q.conf)
	if req.Provider != "" && req.Provider != prov {
		return fail(types.ErrDecodingFailure, "bad_request", "the request names provider %q but its network configuration %q", req.Provider, prov)
	}
	what := fmt.Sprintf("%s %s interface %s of pod %s", req.Command, shortID(req.ContainerID), req.IfName, q.pod.Key())
	if prov == "" {
		if s.src.Kubernetes() && req.IfName != defaultIfName && (req.Command == "ADD" || req.Command == "CHECK") {
			// It would bind to the pod's default port (<pod>.<namespace>)
			// and take it from eth0.
			return fail(types.ErrInvalidNetworkConfig, "bad_request",
				"%s: network %q asks for the pod's default network (its configuration has no attachment provider), which the pod has on %s already; "+
					"to give the pod an OVN network on %s, set \"provider\": \"<nad>.<namespace>.ovn\" in the NetworkAttachmentDefinition's config (the NAD's own name and namespace) and create a Subnet with that spec.provider",
				what, q.conf.Name, defaultIfName, req.IfName)
		}
		return nil
	}
	if req.Command == "DEL" {
		// DEL is never refused (the runtime retries it, and the pod's
		// deletion waits): it removes the interface's own port, and the
		// provider keeps the default network's address from being released.
		q.pod.Provider = prov
		return nil
	}
	ns, ok := annotations.AttachmentNamespace(prov)
	nad := strings.TrimSuffix(strings.TrimSuffix(prov, ".ovn"), "."+ns)
	if !ok || !isLabel(ns) || !isSubdomain(nad) {
		return fail(types.ErrInvalidNetworkConfig, "bad_request",
			"%s: network %q has provider %q, which is not an OVN attachment network's: write it as \"<nad>.<namespace>.ovn\" (the NetworkAttachmentDefinition's own name and namespace), or leave it out for the pod's default network",
			what, q.conf.Name, prov)
	}
	if !s.src.Kubernetes() {
		return fail(types.ErrInvalidNetworkConfig, "bad_request",
			"%s: network %q has provider %q: attachment networks need a node in Kubernetes mode (Multus and ovnhost-controller allocate them); this node runs standalone and wires the default network only",
			what, q.conf.Name, prov)
	}
	if req.IfName == defaultIfName && (req.Command == "ADD" || req.Command == "CHECK") {
		return fail(types.ErrInvalidNetworkConfig, "bad_request",
			"%s: network %q (provider %q) asks for %s, the pod's default network's interface; an attachment network is an extra interface (Multus names them net1, net2 ...): "+
				"the pod's default network as an attachment (v1.multus-cni.io/default-network) is not supported yet",
			what, q.conf.Name, prov, defaultIfName)
	}
	q.pod.Provider = prov
	return nil
}

// isSubdomain: a DNS-1123 subdomain (a NetworkAttachmentDefinition's name).
func isSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isLabel(l) {
			return false
		}
	}
	return true
}

func (s *Server) decode(req *protocol.Request) (*request, *cniError) {
	q := &request{Request: req}
	if err := json.Unmarshal(req.Config, &q.conf); err != nil {
		return nil, fail(types.ErrDecodingFailure, "bad_request", "network configuration is not valid JSON: %v", err)
	}
	if q.conf.CNIVersion == "" {
		q.conf.CNIVersion = "0.3.1"
	}
	switch req.Command {
	case "ADD", "DEL", "CHECK":
		if req.ContainerID == "" {
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "CNI_CONTAINERID is empty")
		}
		if req.IfName == "" {
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "CNI_IFNAME is empty")
		}
	}
	args, err := parseArgs(req.Args)
	if err != nil {
		return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "%v", err)
	}
	q.pod = podsource.PodRef{Namespace: args["K8S_POD_NAMESPACE"], Name: args["K8S_POD_NAME"], ContainerID: req.ContainerID, Annotations: map[string]string{}}
	if q.pod.Name == "" || q.pod.Namespace == "" {
		if s.src.Kubernetes() && (req.Command == "ADD" || req.Command == "CHECK") {
			// kubelet always passes both: a call without them is not a
			// pod of this cluster (and would wait for annotations in vain).
			var missing []string
			for _, k := range []string{"K8S_POD_NAMESPACE", "K8S_POD_NAME"} {
				if args[k] == "" {
					missing = append(missing, k)
				}
			}
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request",
				"%s %s: CNI_ARGS %q has no %s; the ovnhost CNI server runs in Kubernetes mode (pods come from the API server), where the runtime must pass K8S_POD_NAMESPACE and K8S_POD_NAME (kubelet does); containers without a pod need a node in standalone mode (no kubeconfig)",
				req.Command, req.ContainerID, req.Args, strings.Join(missing, " and "))
		}
	}
	if q.pod.Name == "" {
		// podman, nerdctl, plain containerd: the container is the pod.
		q.pod.Name = containerPodName(req.ContainerID)
	}
	if q.pod.Namespace == "" {
		q.pod.Namespace = "default"
	}
	for k, a := range map[string]string{"IP": annotations.IPAddress, "MAC": annotations.MACAddress, "INGRESS_RATE": annotations.IngressRate,
		"EGRESS_RATE": annotations.EgressRate, "MIRROR": annotations.Mirror, "LOGICAL_SWITCH": annotations.LogicalSwitch} {
		if v, ok := args[k]; ok {
			q.pod.Annotations[a] = v
		}
	}
	if cerr := s.decodeProvider(q); cerr != nil {
		return nil, cerr
	}
	q.host = podwire.PortName(req.ContainerID, req.IfName)
	return q, nil
}

// containerPodName is the pod name of a container attached without
// Kubernetes arguments (podman, nerdctl): the runtime's short ID (12
// characters) for the usual hexadecimal IDs and short IDs that are valid
// names as they are, else a readable prefix and a hash of the whole ID.
// It is a valid DNS label of at most 31 characters, so "<name>.default" is
// a valid OVN port name, and the same container ID always gives the same
// name (DEL and GC find what ADD made).
func containerPodName(id string) string {
	if isLabel(id) && (len(id) <= 12 || isHex(id)) {
		return shortID(id)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if b.Len() >= 20 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(id))
	prefix := strings.TrimSuffix(b.String(), "-")
	if prefix == "" {
		prefix = "ctr"
	}
	return prefix + "-" + hex.EncodeToString(sum[:5])
}

func isHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return s != ""
}

// isLabel: lowercase letters, digits and inner '-'.
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func parseArgs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("CNI_ARGS entry %q is not KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func (s *Server) handle(ctx context.Context, req *protocol.Request) ([]byte, *cniError) {
	q, cerr := s.decode(req)
	if cerr != nil {
		return nil, cerr
	}
	switch req.Command {
	case "ADD":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return s.add(ctx, q)
	case "DEL":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return nil, s.del(ctx, q)
	case "CHECK":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return nil, s.check(ctx, q)
	case "STATUS", "GC":
		// The plugin's skel already refuses these below 1.1.0; a request
		// that reaches the server anyway gets the same answer.
		if ok, err := version.GreaterThanOrEqualTo(q.conf.CNIVersion, "1.1.0"); err != nil || !ok {
			return nil, fail(types.ErrIncompatibleCNIVersion, "bad_request", "config version does not allow %s (cniVersion %q; %s needs 1.1.0)", req.Command, q.conf.CNIVersion, req.Command)
		}
		if req.Command == "STATUS" {
			return nil, s.status(ctx)
		}
		return nil, s.gc(ctx, q)
	}
	return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "unknown CNI command %q", req.Command)
}

// podMTU is the pod interface's MTU: its Subnet's mtu (n may be nil), else
// for an underlay pod its provider network's on this node, else the
// conflist's, else the node's (underlay minus encapsulation).
func (s *Server) podMTU(q *request, n *podsource.PodNetwork) int {
	if n != nil && n.MTU > 0 {
		return n.MTU
	}
	if n != nil && n.ProviderNetwork != "" && s.cfg.UnderlayMTU != nil {
		if mtu := s.cfg.UnderlayMTU(n.ProviderNetwork); mtu > 0 {
			return mtu
		}
	}
	if q.conf.MTU > 0 {
		return q.conf.MTU
	}
	return s.cfg.PodMTU
}

func (s *Server) add(ctx context.Context, q *request) (_ []byte, cerr *cniError) {
	if q.Netns == "" {
		return nil, fail(types.ErrInvalidNetNS, "bad_request", "CNI_NETNS is empty")
	}
	if err := checkPodNetns(q.Netns, s.ownNetns); err != nil {
		return nil, fail(types.ErrInvalidNetNS, "netns", "CNI_NETNS %s: %v", q.Netns, err)
	}
	if s.cfg.InstallHeld != nil {
		if why := s.cfg.InstallHeld(); why != "" {
			return nil, fail(types.ErrTryAgainLater, "ovn_controller_held", "pod %s not wired: %s", q.pod.Key(), why)
		}
	}
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, s.cfg.AnnotationWait)
	n, err := s.src.PodNetwork(actx, q.pod)
	cancel()
	tNet := time.Now()
	if err != nil {
		return nil, s.sourceError(q, err)
	}
	if pn := n.ProviderNetwork; pn != "" && s.cfg.UnderlayMTU != nil && s.cfg.UnderlayMTU(pn) == 0 {
		// Wired, its port would be bound here with no way onto its VLAN:
		// traffic would vanish. Fail the pod while the network is not
		// bridged on this node; kubelet tries again.
		return nil, fail(types.ErrTryAgainLater, "provider_network_not_ready",
			"pod %s is on Subnet %s of provider network %s, which is not bridged on this node (its Node's label %s.provider-network.kubernetes.io/ready is not true; the annotation %s.provider-network.ovnhost.io/error says why): schedule the pod where the network is ready (nodeSelector %s.provider-network.kubernetes.io/ready: \"true\") or fix the network here",
			q.pod.Key(), n.Switch, pn, pn, pn, pn)
	}
	ok := false
	defer func() {
		if !ok {
			if err := s.src.Release(context.WithoutCancel(ctx), q.pod); err != nil {
				s.log.Warn("release after a failed ADD", "pod", q.pod.Key(), "err", err)
			}
		}
	}()
	var out []byte
	var res *podwire.Result
	wn := podwire.Network{Addrs: n.Addrs, MAC: n.MAC, MTU: s.podMTU(q, n), Routes: wireRoutes(n.PodRoutes()),
		IngressMbps: n.IngressMbps, EgressMbps: n.EgressMbps, Mirror: n.Mirror}
	att := q.attachment()
	att.LSP = n.LSP // a KubeVirt VM's port, whichever pod runs it
	err = s.wire.Add(ctx, att, wn, func(r *podwire.Result) (err error) {
		res = r
		out, err = s.result(q, n, r)
		return err
	})
	if err != nil {
		return nil, s.wiringError(q, att.IfaceID(), err)
	}
	ok = true
	now := time.Now()
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }
	s.log.Info("pod wired", "pod", q.pod.Key(), "container", shortID(q.ContainerID), "ifname", q.IfName, "lsp", att.IfaceID(), "port", q.host, "ip", podwire.JoinAddrs(n.Addrs),
		"ms_total", ms(t0, now), "ms_pod_network", ms(t0, tNet), "ms_stale", ms(tNet, res.StaleDone), "ms_veth", ms(res.StaleDone, res.VethDone),
		"ms_ovs_port", ms(res.VethDone, res.PortDone), "ms_ovn_installed", ms(res.PortDone, now))
	return out, nil
}

func (s *Server) sourceError(q *request, err error) *cniError {
	var ae *podsource.AnnotationError
	var at *podsource.AnnotationTimeout
	var ie *podsource.IPAMError
	var me *podsource.MismatchError
	switch {
	case errors.As(err, &me):
		// The message names the pod, the annotation, its value and OVN's.
		return fail(types.ErrInvalidNetworkConfig, "annotation_mismatch", "%v", err)
	case errors.As(err, &ae):
		return fail(types.ErrInvalidNetworkConfig, "invalid_annotation", "pod %s: %v", q.pod.Key(), err)
	case errors.As(err, &at):
		return fail(types.ErrTryAgainLater, "annotation_timeout", "%v", err)
	case errors.As(err, &ie):
		return fail(types.ErrInternal, "ipam", "pod %s: %v", q.pod.Key(), err)
	}
	return fail(types.ErrInternal, "pod_network", "pod %s: %v", q.pod.Key(), err)
}

// wiringStep is the step a wiring error names (0: not a wiring error).
func wiringStep(err error) podwire.Step {
	var we *podwire.Error
	if errors.As(err, &we) {
		return we.Step
	}
	return 0
}

// wiringError is the answer to an ADD the wiring failed.
func (s *Server) wiringError(q *request, lsp string, err error) *cniError {
	key := q.pod.Key()
	switch wiringStep(err) {
	case 0: // the answer could not be built
		return fail(types.ErrInternal, "internal", "encode result: %v", err)
	case podwire.StepStale:
		return fail(types.ErrInternal, "ovs", "remove stale ports of %s: %v", lsp, err)
	case podwire.StepConfig:
		return fail(types.ErrInvalidNetworkConfig, "bad_request", "%v", err)
	case podwire.StepMirror:
		return fail(types.ErrInvalidNetworkConfig, "ovs", "pod %s: %v", key, err)
	case podwire.StepPort:
		return fail(types.ErrInternal, "ovs", "pod %s: %v", key, err)
	case podwire.StepInstallTimeout:
		return fail(types.ErrTryAgainLater, "ovn_install_timeout",
			"pod %s: timed out after %s waiting for ovn-controller to set external_ids:ovn-installed=true on OVS interface %s (iface-id=%s); check that ovn-controller runs and that logical switch port %s exists in the OVN northbound database",
			key, s.cfg.InstallWait, q.host, lsp, lsp)
	case podwire.StepInstall:
		return fail(types.ErrInternal, "ovs", "pod %s: waiting for ovn-installed on %s: %v", key, q.host, err)
	}
	return fail(types.ErrInternal, "plumbing", "pod %s: %v", key, err)
}

func wireRoutes(rs []podsource.Route) []podwire.Route {
	var out []podwire.Route
	for _, r := range rs {
		out = append(out, podwire.Route{Dst: r.Dst, GW: r.GW})
	}
	return out
}

func addrFromIPNet(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func routeFromCNI(r *types.Route) (podwire.Route, bool) {
	d, ok := addrFromIPNet(r.Dst)
	if !ok {
		return podwire.Route{}, false
	}
	rt := podwire.Route{Dst: d.Masked()}
	if r.GW != nil {
		g, ok := netip.AddrFromSlice(r.GW)
		if ok {
			rt.GW = g.Unmap()
		}
	}
	return rt, true
}

func (s *Server) result(q *request, n *podsource.PodNetwork, res *podwire.Result) ([]byte, error) {
	return encodeResult(s.buildResult(q, n, res), q.conf.CNIVersion)
}

// encodeResult converts r with the CNI library to the request's version
// (what the runtime's libcni will parse) and encodes it.
func encodeResult(r *types100.Result, cniVersion string) ([]byte, error) {
	conv, err := r.GetAsVersion(cniVersion)
	if err != nil {
		return nil, err
	}
	return json.Marshal(conv)
}

func (s *Server) buildResult(q *request, n *podsource.PodNetwork, res *podwire.Result) *types100.Result {
	r := &types100.Result{CNIVersion: types100.ImplementedSpecVersion}
	r.Interfaces = []*types100.Interface{
		{Name: res.HostIfName, Mac: res.HostMAC.String()},
		{Name: q.IfName, Mac: n.MAC.String(), Sandbox: q.Netns, Mtu: s.podMTU(q, n)},
	}
	idx := 1
	for _, a := range n.Addrs {
		ip := &types100.IPConfig{Interface: &idx, Address: net.IPNet{IP: net.IP(a.Addr().AsSlice()), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
		for _, g := range n.Gateways {
			if g.Is4() == a.Addr().Is4() {
				ip.Gateway = net.IP(g.AsSlice())
			}
		}
		r.IPs = append(r.IPs, ip)
	}
	for _, rt := range n.PodRoutes() {
		tr := &types.Route{Dst: net.IPNet{IP: net.IP(rt.Dst.Addr().AsSlice()), Mask: net.CIDRMask(rt.Dst.Bits(), rt.Dst.Addr().BitLen())}}
		if rt.GW.IsValid() {
			tr.GW = net.IP(rt.GW.AsSlice())
		}
		r.Routes = append(r.Routes, tr)
	}
	r.DNS = q.conf.DNS
	return r
}

func (s *Server) del(ctx context.Context, q *request) *cniError {
	a := q.attachment()
	if err := s.wire.Del(ctx, a); err != nil {
		if wiringStep(err) == podwire.StepPlumbing {
			return fail(types.ErrInternal, "plumbing", "DEL %s: %v", q.pod.Key(), err)
		}
		return fail(types.ErrTryAgainLater, "ovs", "DEL %s: %v", q.pod.Key(), err)
	}
	if err := s.src.Release(ctx, q.pod); err != nil {
		return fail(types.ErrTryAgainLater, "pod_network", "DEL %s: %v", q.pod.Key(), err)
	}
	s.wire.Forget(a)
	return nil
}

func (s *Server) check(ctx context.Context, q *request) *cniError {
	if q.conf.RawPrevResult == nil {
		return fail(types.ErrInvalidNetworkConfig, "bad_request", "CHECK needs prevResult in the network configuration")
	}
	prev, err := prevResult(&q.conf.NetConf)
	if err != nil {
		return fail(types.ErrDecodingFailure, "bad_request", "CHECK: prevResult: %v", err)
	}
	want := podwire.Expected{Network: podwire.Network{MTU: s.podMTU(q, nil)},
		// Results before 1.0.0 carry no MTU: the host end was created with
		// the pod end's MTU (the Subnet's may differ from the node's).
		MTUFromHost: !hasMTU(prev, q.IfName)}
	for _, i := range prev.Interfaces {
		if i.Sandbox != "" && i.Name == q.IfName {
			want.MAC, _ = net.ParseMAC(i.Mac)
			if i.Mtu > 0 {
				// ADD reported the MTU it set (the Subnet's may differ from the node's).
				want.MTU = i.Mtu
			}
		}
	}
	for _, ip := range prev.IPs {
		if a, ok := addrFromIPNet(ip.Address); ok {
			want.Addrs = append(want.Addrs, a)
		}
	}
	for _, r := range prev.Routes {
		if rt, ok := routeFromCNI(r); ok {
			want.Routes = append(want.Routes, rt)
		}
	}
	a := q.attachment()
	if q.pod.Provider == "" && s.src.Kubernetes() {
		// A KubeVirt VM's pod is bound to the VM's port: the confirmed
		// network says which (it answers at once for a wired pod).
		actx, cancel := context.WithTimeout(ctx, min(s.cfg.AnnotationWait, 5*time.Second))
		if n, err := s.src.PodNetwork(actx, q.pod); err == nil {
			a.LSP = n.LSP
		}
		cancel()
	}
	if err := s.wire.Check(ctx, a, want); err != nil {
		if wiringStep(err) == podwire.StepPort {
			return fail(types.ErrTryAgainLater, "ovs", "CHECK %s: %v", q.pod.Key(), err)
		}
		return fail(types.ErrInternal, "check", "CHECK %s: %v", q.pod.Key(), err)
	}
	return nil
}

// prevResult parses CHECK's prevResult in the configuration's cniVersion
// (0.4.0, 1.0.0 or 1.1.0 form) with the CNI library and converts it to the
// current result type.
func prevResult(conf *types.NetConf) (*types100.Result, error) {
	if err := version.ParsePrevResult(conf); err != nil {
		return nil, err
	}
	if conf.PrevResult == nil {
		return nil, errors.New("missing")
	}
	return types100.NewResultFromResult(conf.PrevResult)
}

func hasMTU(r *types100.Result, ifName string) bool {
	for _, i := range r.Interfaces {
		if i.Sandbox != "" && i.Name == ifName && i.Mtu > 0 {
			return true
		}
	}
	return false
}

func (s *Server) status(ctx context.Context) *cniError {
	if err := s.wire.Status(ctx); err != nil {
		return fail(types.ErrPluginNotAvailable, "status", "ovnhost: %v", err)
	}
	return nil
}

// gc removes ports this server created whose (container, ifname) is not in
// the runtime's list of valid attachments.
func (s *Server) gc(ctx context.Context, q *request) *cniError {
	var conf struct {
		Valid []struct {
			ContainerID string `json:"containerID"`
			IfName      string `json:"ifname"`
		} `json:"cni.dev/valid-attachments"`
	}
	if err := json.Unmarshal(q.Config, &conf); err != nil {
		return fail(types.ErrDecodingFailure, "bad_request", "GC: %v", err)
	}
	valid := map[string]bool{}
	liveContainer := map[string]bool{}
	for _, a := range conf.Valid {
		valid[a.ContainerID+"/"+a.IfName] = true
		liveContainer[a.ContainerID] = true
	}
	owned, err := s.wire.Owned(ctx)
	if err != nil {
		return fail(types.ErrTryAgainLater, "ovs", "GC: %v", err)
	}
	// An attachment network's interface (net1 ...) is Multus's delegate:
	// the runtime lists the sandbox under its own interface (eth0) only,
	// so a live container keeps its attachment ports.
	isValid := func(a podwire.Attachment) bool {
		return valid[a.ContainerID+"/"+a.IfName] || (a.Provider != "" && liveContainer[a.ContainerID])
	}
	keep := 0
	for _, a := range owned {
		if isValid(a) {
			keep++
		}
	}
	if p := peerOf(ctx); len(owned) > 0 && keep == 0 && (!p.known || p.uid != 0) {
		return fail(types.ErrInvalidNetworkConfig, "gc_refused",
			"GC would remove every pod port on this node (%d, none of them in cni.dev/valid-attachments); refused because the request does not come from root (uid %d): only the container runtime running as root may do that", len(owned), p.uid)
	}
	var errs []string
	for _, a := range owned {
		cid := a.ContainerID
		if isValid(a) {
			continue
		}
		unlock := s.locks.lock(cid)
		ref := podsource.PodRef{Namespace: a.Namespace, Name: a.Name, ContainerID: cid, Provider: a.Provider}
		err := errors.Join(s.wire.Remove(ctx, a.Port), s.src.Release(ctx, ref))
		unlock()
		if err != nil {
			errs = append(errs, a.Port+": "+err.Error())
		} else {
			s.log.Info("GC removed a stale pod port", "port", a.Port, "pod", ref.Key(), "container", cid)
		}
	}
	if len(errs) > 0 {
		return fail(types.ErrInternal, "gc", "GC: %s", strings.Join(errs, "; "))
	}
	return nil
}

// reapplyRates applies the current rate annotations of every pod wired
// before this start.
func (s *Server) reapplyRates(ctx context.Context, rs rateSource) {
	if rs.WaitSynced(ctx) != nil {
		return
	}
	for _, key := range s.wire.Wired() {
		r, ok, err := rs.PodRates(key)
		if !ok {
			continue
		}
		if err != nil {
			// An invalid rate is no limit (podsource.Rates): the limit
			// it replaced does not stay.
			s.log.Warn("pod rate annotation is invalid; its limit is removed until it is valid again", "pod", key, "err", err)
		}
		s.wire.ReapplyRates(ctx, key, r.IngressMbps, r.EgressMbps)
	}
}
