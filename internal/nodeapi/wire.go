package nodeapi

import (
	"fmt"
	"net/url"
	"time"
)

// ErrorBody is the JSON body of a failed request.
type ErrorBody struct {
	Error string `json:"error"`
}

// AppctlRequest asks a daemon's control socket one read-only command.
type AppctlRequest struct {
	Target  string   `json:"target"` // ovs-vswitchd, ovn-controller, ovsdb-server
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
}

// AppctlResult is the command's output.
type AppctlResult struct {
	Output string `json:"output"`
}

// OVSDBRequest is an ovs-vsctl/ovn-nbctl/ovn-sbctl-like read.
type OVSDBRequest struct {
	DB   string   `json:"db"`   // Open_vSwitch, OVN_Northbound, OVN_Southbound
	Args []string `json:"args"` // show | list TABLE [RECORD] | get TABLE RECORD COLUMN | find TABLE COL=VAL...
}

// OVSDBResult is a query's text and, for list and find, its rows (values
// formatted as in the text).
type OVSDBResult struct {
	Text string              `json:"output"`
	Rows []map[string]string `json:"rows,omitempty"`
	// Truncated says what was left out when the answer reached the node
	// API's row or byte cap ("" when it is whole); Text then ends with a
	// "# truncated: ..." line too.
	Truncated string `json:"truncated,omitempty"`
}

// TraceRequest traces a packet from a pod on this node.
type TraceRequest struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Dst       string `json:"dst"`      // destination IP
	DstMAC    string `json:"dstMAC"`   // the next hop's MAC (the pod's gateway or a same-subnet peer)
	Protocol  string `json:"protocol"` // tcp, udp, icmp
	Port      int    `json:"port,omitempty"`
	// SrcMAC overrides the pod's MAC (to show a port-security drop).
	SrcMAC string `json:"srcMAC,omitempty"`
	// Provider traces from the pod's attachment network of this provider
	// ("<nad>.<namespace>.ovn": its port <pod>.<namespace>.<provider>)
	// instead of its default interface. A node daemon older than this
	// field ignores it and traces eth0: netctl checks the answer's
	// Microflow names the attachment's port.
	Provider string `json:"provider,omitempty"`
}

// TraceResult holds both traces and where the packet ends.
type TraceResult struct {
	Microflow string       `json:"microflow"`
	Logical   string       `json:"logical"`  // ovn-trace output
	Physical  string       `json:"physical"` // ofproto/trace output
	Verdict   TraceVerdict `json:"verdict"`
}

// TraceVerdict is what the traces say about the packet.
type TraceVerdict struct {
	Delivered bool     `json:"delivered"`
	Output    string   `json:"output,omitempty"` // logical port or "tunnel to CHASSIS"
	DropStage string   `json:"dropStage,omitempty"`
	DropFlow  string   `json:"dropFlow,omitempty"`
	ACLs      []string `json:"acls,omitempty"` // ACLs that matched, with their name/action
	LBs       []string `json:"lbs,omitempty"`  // load balancers that rewrote the destination
	Physical  string   `json:"physicalVerdict,omitempty"`
}

// PodPort is what the node holds for one pod (GET /v1/pod?namespace=&name=).
type PodPort struct {
	Interface    string            `json:"interface"`
	OFPort       int               `json:"ofport"`
	OVNInstalled bool              `json:"ovnInstalled"`
	Ingress      int               `json:"ingressPolicingRate,omitempty"`
	IngressBurst int               `json:"ingressPolicingBurst,omitempty"`
	QoS          map[string]string `json:"qos,omitempty"`
	ExternalIDs  map[string]string `json:"externalIDs,omitempty"`
	BoundChassis string            `json:"boundChassis,omitempty"`
}

// CaptureRequest asks for the packets of a pod's host veth (or another
// OVS interface of the node), sent as the query of GET /v1/capture.
type CaptureRequest struct {
	Namespace, Pod string
	Iface          string
	Count          int           // packets; 0: until Duration
	Duration       time.Duration // default 10s, at most 1h
}

// Query is the request's URL query.
func (c CaptureRequest) Query() url.Values {
	q := url.Values{"namespace": {c.Namespace}, "pod": {c.Pod}, "count": {fmt.Sprint(c.Count)}, "duration": {c.Duration.String()}}
	if c.Iface != "" {
		q.Set("iface", c.Iface)
	}
	return q
}

// ParseCaptureQuery reads a capture request; the error says which value
// is wrong.
func ParseCaptureQuery(q url.Values) (CaptureRequest, error) {
	c := CaptureRequest{Namespace: q.Get("namespace"), Pod: q.Get("pod"), Iface: q.Get("iface"), Duration: 10 * time.Second}
	if v := q.Get("count"); v != "" {
		if _, err := fmt.Sscan(v, &c.Count); err != nil || c.Count < 0 {
			return c, fmt.Errorf("count %q: want a number of packets", v)
		}
	}
	if v := q.Get("duration"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > time.Hour {
			return c, fmt.Errorf("duration %q: want e.g. 30s, at most 1h", v)
		}
		c.Duration = d
	}
	return c, nil
}
