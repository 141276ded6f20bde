package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzProtocolRoundTrip: what the plugin encodes, the server decodes to
// the same request (make fuzz runs it longer; go test runs the seeds).
func FuzzProtocolRoundTrip(f *testing.F) {
	f.Add("ADD", "0123456789abcdef", "/var/run/netns/cni-1", "eth0", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p", "/opt/cni/bin", []byte(`{"cniVersion":"1.0.0","name":"ovnhost","type":"ovnhost-cni"}`))
	f.Add("GC", "", "", "", "", "", []byte(`{"cniVersion":"1.1.0","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`))
	f.Add("DEL", "\u2028", "\x00", "\"", "=;=", "", []byte(`[]`))
	f.Fuzz(func(t *testing.T, cmd, cid, netns, ifname, args, path string, config []byte) {
		if !json.Valid(config) || cmd == "" {
			return
		}
		in := Request{Command: cmd, ContainerID: cid, Netns: netns, IfName: ifname, Args: args, Path: path, Config: config}
		body, err := json.Marshal(in)
		if err != nil {
			return // invalid UTF-8 cannot be carried; the plugin reports that itself
		}
		var out Request
		if err := DecodeRequest(bytes.NewReader(body), &out); err != nil {
			t.Fatalf("the server refuses what the plugin sent: %v\n%s", err, body)
		}
		var a, b any
		_ = json.Unmarshal(in.Config, &a)
		_ = json.Unmarshal(out.Config, &b)
		in.Config, out.Config = nil, nil
		// Strings with invalid UTF-8 are replaced by the encoder.
		valid := true
		for _, f := range []string{cmd, cid, netns, ifname, args, path} {
			valid = valid && utf8.ValidString(f)
		}
		if valid && !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip changed the request: %+v -> %+v", in, out)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the configuration")
		}
	})
}

// FuzzResponse: whatever comes back on the socket, the plugin's decoding
// of it never panics.
func FuzzResponse(f *testing.F) {
	f.Add([]byte(`{"result":{"cniVersion":"1.0.0","ips":[]}}`))
	f.Add([]byte(`{"error":{"code":11,"msg":"try again","details":""}}`))
	f.Add([]byte(`{"error":null,"result":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Response
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		if r.Error != nil {
			_ = r.Error.Error()
		}
	})
}
