package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// requestBeforeAttachments is Request as servers before attachment
// networks decode it (same fields, unknown ones refused).
type requestBeforeAttachments struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID,omitempty"`
	Netns       string          `json:"netns,omitempty"`
	IfName      string          `json:"ifName,omitempty"`
	Args        string          `json:"args,omitempty"`
	Path        string          `json:"path,omitempty"`
	Config      json.RawMessage `json:"config"`
}

func decodeOld(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var r requestBeforeAttachments
	return dec.Decode(&r)
}

// A default-network request is what it always was (an older server takes
// it); an attachment request names its provider, which an older server
// refuses instead of wiring net1 as the pod's default network.
func TestAttachmentRequestsAreRefusedByOlderServers(t *testing.T) {
	for _, tc := range []struct {
		config   string
		provider string
	}{
		{`{"cniVersion":"1.0.0","name":"ovnhost","type":"ovnhost-cni"}`, ""},
		{`{"cniVersion":"1.0.0","name":"ovnhost","type":"ovnhost-cni","provider":"ovn"}`, ""},
		{`{"cniVersion":"0.3.1","name":"attachnet","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":"attachnet.default.ovn"}`, "attachnet.default.ovn"},
	} {
		var conf NetConf
		if err := json.Unmarshal([]byte(tc.config), &conf); err != nil {
			t.Fatal(err)
		}
		if got := AttachmentProvider(conf); got != tc.provider {
			t.Fatalf("AttachmentProvider(%s) = %q, want %q", tc.config, got, tc.provider)
		}
		body, err := json.Marshal(Request{Command: "ADD", ContainerID: "c", Netns: "/var/run/netns/x", IfName: "net1", Config: json.RawMessage(tc.config), Provider: AttachmentProvider(conf)})
		if err != nil {
			t.Fatal(err)
		}
		var now Request
		if err := DecodeRequest(bytes.NewReader(body), &now); err != nil || now.Provider != tc.provider {
			t.Fatalf("this server: %v, provider %q", err, now.Provider)
		}
		err = decodeOld(body)
		switch {
		case tc.provider == "" && err != nil:
			t.Fatalf("an older server refuses a default-network request: %v\n%s", err, body)
		case tc.provider != "" && (err == nil || !strings.Contains(err.Error(), `unknown field "provider"`)):
			t.Fatalf("an older server takes an attachment request (%v); it would wire it as the default network\n%s", err, body)
		}
	}
}
