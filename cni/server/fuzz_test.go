package server

import (
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/cni/protocol"
)

// Fuzz target: `go test` (make test) runs its seeds; `make fuzz` runs it
// for FUZZTIME. Whatever a socket-group member can send reaches this
// decoder (cni/podsource fuzzes the annotations a pod's author writes).

// FuzzCNIRequest: a request as a socket-group member may send it, through
// the protocol decoder and the server's request decoding.
func FuzzCNIRequest(f *testing.F) {
	f.Add([]byte(`{"command":"ADD","containerID":"abc","netns":"/var/run/netns/x","ifName":"eth0","args":"K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;IP=10.16.0.9","config":{"cniVersion":"1.0.0","name":"n","type":"ovnhost-cni"}}`))
	f.Add([]byte(`{"command":"GC","config":{"cniVersion":"1.1.0","cni.dev/valid-attachments":[]}}`))
	f.Add([]byte(`{"command":"DEL","containerID":"Über-ctr_ID.with.dots","ifName":"eth0","args":"a=b;;c","config":{}}`))
	f.Add([]byte(`{"command":"ADD","config":{"cniVersion":7}}`))
	s := &Server{src: &blockingSource{}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req protocol.Request
		if err := protocol.DecodeRequest(strings.NewReader(string(body)), &req); err != nil {
			return
		}
		q, cerr := s.decode(&req)
		if cerr != nil {
			if cerr.msg == "" || cerr.code == 0 {
				t.Fatalf("an error without code or message: %+v", cerr)
			}
			return
		}
		if q.pod.Name == "" || q.pod.Namespace == "" || q.host == "" {
			t.Fatalf("decoded request without pod or host interface: %+v", q.pod)
		}
		if len(q.host) > 15 {
			t.Fatalf("host interface name %q longer than IFNAMSIZ-1", q.host)
		}
		if req.Args == "" || !strings.Contains(req.Args, "K8S_POD_NAME=") {
			if name := containerPodName(req.ContainerID); len(name) > 31 || !isLabel(name) {
				t.Fatalf("container %q gave pod name %q", req.ContainerID, name)
			}
		}
	})
}
