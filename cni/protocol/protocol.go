// Package protocol is what the ovnhost-cni plugin and the node daemon's CNI
// server say to each other: one HTTP POST per CNI invocation over the
// daemon's unix socket. It imports only the CNI library's types, so the
// plugin binary stays small.
package protocol

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
)

// Path is the HTTP path of CNI requests.
const Path = "/cni"

// DefaultSocket is where the daemon listens unless the conflist says otherwise.
const DefaultSocket = "/run/ovnhost/cni.sock"

// PluginType is the plugin's binary name and "type" in the conflist.
const PluginType = "ovnhost-cni"

// Request is one CNI invocation, forwarded as the plugin received it.
type Request struct {
	Command     string          `json:"command"` // ADD, DEL, CHECK, GC, STATUS
	ContainerID string          `json:"containerID,omitempty"`
	Netns       string          `json:"netns,omitempty"`
	IfName      string          `json:"ifName,omitempty"`
	Args        string          `json:"args,omitempty"` // CNI_ARGS
	Path        string          `json:"path,omitempty"` // CNI_PATH
	Config      json.RawMessage `json:"config"`         // the network configuration (stdin)
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
}
