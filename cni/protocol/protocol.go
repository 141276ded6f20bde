// Package protocol is what the ovnhost-cni plugin and the node daemon's CNI
// server say to each other: one HTTP POST per CNI invocation over the
// daemon's unix socket. It imports only the CNI library's types, so the
// plugin binary stays small.
package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Path is the HTTP path of CNI requests.
const Path = "/cni"

// DefaultSocket is where the daemon listens unless the conflist says otherwise.
const DefaultSocket = "/run/ovnhost/cni.sock"

// PluginType is the plugin's binary name and "type" in the conflist.
const PluginType = "ovnhost-cni"

// ConfVersions are the cniVersion values the installed conflist may carry
// (node setting cni-version). The plugin itself answers every version from
// 0.1.0 to 1.1.0; these are the ones worth installing.
var ConfVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// DefaultConfVersion is the conflist's cniVersion unless the node sets
// cni-version: the highest version every supported runtime accepts.
// libcni 0.8.x (Kubernetes up to 1.23 with dockershim) stops at 0.4.0,
// libcni 1.0/1.1 (containerd 1.6/1.7, CRI-O up to 1.29, podman 4 with its
// CNI backend, nerdctl 1.x) at 1.0.0; only libcni 1.2+ knows 1.1.0 (GC,
// STATUS). 0.4.0 has CHECK; the runtimes that know newer versions call
// the plugin at 0.4.0 and simply never send GC or STATUS.
// See docs/cni-versions.md.
const DefaultConfVersion = "0.4.0"

// ValidConfVersion says whether v is one of ConfVersions.
func ValidConfVersion(v string) bool {
	for _, c := range ConfVersions {
		if v == c {
			return true
		}
	}
	return false
}

// Request is one CNI invocation, forwarded as the plugin received it.
type Request struct {
	Command     string          `json:"command"` // ADD, DEL, CHECK, GC, STATUS
	ContainerID string          `json:"containerID,omitempty"`
	Netns       string          `json:"netns,omitempty"`
	IfName      string          `json:"ifName,omitempty"`
	Args        string          `json:"args,omitempty"` // CNI_ARGS
	Path        string          `json:"path,omitempty"` // CNI_PATH
	Config      json.RawMessage `json:"config"`         // the network configuration (stdin)
	// Provider repeats an attachment network's provider (NetConf.Provider
	// when it is neither empty nor "ovn"); empty for the default network,
	// so those requests are what they always were. A server older than
	// attachment networks refuses the unknown field (DecodeRequest)
	// instead of wiring the interface on the pod's default network, where
	// it would replace eth0's port. The server reads the provider from
	// Config and refuses a request where the two differ.
	Provider string `json:"provider,omitempty"`
}

// AttachmentProvider is the provider of an attachment network that conf
// names, "" for the default network (no provider, or "ovn").
func AttachmentProvider(conf NetConf) string {
	if p := strings.TrimSpace(conf.Provider); p != "" && p != "ovn" {
		return p
	}
	return ""
}

// Response carries either the result (already encoded in the cniVersion of
// the request's configuration) or a CNI error.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *types.Error    `json:"error,omitempty"`
}

// NetConf is the plugin's part of the network configuration.
type NetConf struct {
	types.NetConf
	// Socket is the daemon's CNI socket (default DefaultSocket).
	Socket string `json:"socket,omitempty"`
	// TimeoutSeconds bounds one request (default 300, kubelet's own limit
	// is longer).
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// MTU overrides the pod interface MTU chosen by the daemon.
	MTU int `json:"mtu,omitempty"`
	// Provider is the network this interface attaches the pod to: empty
	// (or "ovn") for the pod's default network, "<nad>.<namespace>.ovn"
	// for an OVN attachment network (Kube-OVN's NetworkAttachmentDefinition
	// config, which Multus passes as the delegate's configuration). The
	// plugin forwards the configuration as it is (Request.Config) and
	// names an attachment provider in Request.Provider too.
	Provider string `json:"provider,omitempty"`
}

// MaxRequestBytes bounds one request (the network configuration with a
// prevResult is a few kilobytes).
const MaxRequestBytes = 4 << 20

// DecodeRequest reads exactly one Request from r: unknown fields and
// trailing data are refused (the plugin and the server ship together, so
// a field the server does not know is a mismatch, not an extension).
func DecodeRequest(r io.Reader, req *Request) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the request")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("data after the request")
	}
	if req.Command == "" {
		return errors.New("no command")
	}
	return nil
}
