// Package nodeapi is the node API's contract, shared by the server in the
// node daemon (supervisor/nodeapi) and its client in netctl
// (netctl/nodeclient): the paths, the RBAC names a request is authorized
// against, the Node annotations that publish the API, and the JSON bodies.
//
// The node API is the node daemon's authenticated HTTPS endpoint for
// cluster-wide operations (netctl diagnose, trace, nbctl/sbctl/vsctl,
// appctl, tcpdump) and for an in-cluster Prometheus (/metrics). Every
// request carries a bearer token or a client certificate; the API server
// says who it is (TokenReview) and whether they may (SubjectAccessReview),
// as kube-rbac-proxy does:
//
//	GET  /metrics                  non-resource URL /metrics, verb get
//	GET  /v1/{doctor,status,pinger,pod}
//	                               ovnhost.io nodes/diagnostics NODE, verb get
//	POST /v1/{appctl,ovsdb,trace}  ovnhost.io nodes/diagnostics NODE, verb create
//	GET  /v1/capture?pod=          ovnhost.io nodes/capture NODE, verb capture
//	GET  /v1/capture?iface=        ovnhost.io nodes/hostcapture NODE, verb capture
//
// (ovnhost.io is no served API group: RBAC rules may name it all the same.)
// Nothing changes the node: appctl and ovsdb accept read operations only.
// A token for the /v1 paths must be bound to the node (NodeAudience).
package nodeapi

import "time"

// API paths.
const (
	PathDoctor  = "/v1/doctor"
	PathStatus  = "/v1/status"
	PathPinger  = "/v1/pinger"
	PathPod     = "/v1/pod"
	PathAppctl  = "/v1/appctl"
	PathOVSDB   = "/v1/ovsdb"
	PathTrace   = "/v1/trace"
	PathCapture = "/v1/capture"
)

// HeaderDoctorExitCode carries doctor's exit code (0, 1, 2) beside its report.
const HeaderDoctorExitCode = "X-Doctor-Exit-Code"

// RBAC names of the node API's SubjectAccessReview.
const (
	APIGroup        = "ovnhost.io"
	ResourceNodes   = "nodes"
	SubresourceDiag = "diagnostics"
	// SubresourceCapture is capture on a pod's host veth;
	// SubresourceHostCapture on any other interface of the node (uplinks,
	// br-int, ovn0), which carries every pod's and the node's traffic.
	SubresourceCapture     = "capture"
	SubresourceHostCapture = "hostcapture"
	// VerbCapture is the verb of both: a custom verb, so that no
	// read-only role grants it, whatever its wildcards (get, list, watch
	// on "*"); only a rule naming it or verbs ["*"] does.
	VerbCapture = "capture"
)

// Operators' tokens never reach a node: netctl exchanges the kubeconfig's
// credentials (TokenRequest, authorized by the API server as the operator)
// for a token of the ServiceAccount DefaultNetctlAccount whose only
// audience is the one node it calls, good for TokenLifetime. Root on a
// node can replay such a token at that node alone, for minutes, and never
// at the API server. A client certificate is sent as it is: TLS never
// hands the node its key.
const (
	NodeAudiencePrefix   = "ovnhost.io/node-api:"
	DefaultNetctlAccount = "ovnhost/ovnhost-netctl"
	// TokenLifetime is the shortest the API server issues.
	TokenLifetime = 10 * time.Minute
)

// NodeAudience is the audience of tokens for node's API.
func NodeAudience(node string) string { return NodeAudiencePrefix + node }

// Node annotations through which netctl finds a node's API and pins its
// certificate (the node writes them with its own credentials).
const (
	AnnotationNodeAPIAddr = "ovnhost.io/node-api-address"     // "192.168.1.5:10666"
	AnnotationNodeAPICert = "ovnhost.io/node-api-cert-sha256" // hex SHA-256 of the serving leaf certificate
)

// The pinger DaemonSet (netctl pinger, packaging/kubernetes/base/pinger.yaml)
// whose pods' /matrix a node daemon relays on /v1/pinger: only pods of this
// DaemonSet in the node daemon's own namespace, running under this
// ServiceAccount, are asked; a pod a tenant labels app=ovnhost-pinger is not.
const (
	PingerDaemonSet      = "ovnhost-pinger"
	PingerServiceAccount = "ovnhost-pinger"
	PingerSelector       = "app=ovnhost-pinger"
	PingerPortName       = "metrics"
	PingerPath           = "/matrix"
)
