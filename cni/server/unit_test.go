package server

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/protocol"
)

func TestKeyedMutexSerialisesPerKey(t *testing.T) {
	var k keyedMutex
	var inA, maxA atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			un := k.lock("a")
			if v := inA.Add(1); v > maxA.Load() {
				maxA.Store(v)
			}
			time.Sleep(time.Millisecond) // hold the lock: overlap would show
			inA.Add(-1)
			un()
		}()
	}
	// A different key is not blocked by "a".
	un := k.lock("b")
	un()
	wg.Wait()
	if maxA.Load() != 1 {
		t.Fatalf("%d requests for the same container ran at once", maxA.Load())
	}
	if len(k.m) != 0 {
		t.Fatalf("lock entries leaked: %d", len(k.m))
	}
}

func TestParseArgs(t *testing.T) {
	a, err := parseArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p")
	if err != nil || a["K8S_POD_NAME"] != "p" || a["K8S_POD_NAMESPACE"] != "ns" {
		t.Fatal(a, err)
	}
	if _, err := parseArgs("novalue"); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Fatal(err)
	}
}

// TestPodMTUPrecedence: the pod interface's MTU is the Subnet's, else for
// an underlay pod its provider network's on this node, else the
// conflist's, else the node's.
func TestPodMTUPrecedence(t *testing.T) {
	s := &Server{cfg: Config{PodMTU: 1400, UnderlayMTU: func(pn string) int {
		return map[string]int{"physnet1": 1500, "jumbo": 9000}[pn]
	}}}
	withConf := func(mtu int) *request { return &request{conf: protocol.NetConf{MTU: mtu}} }
	for _, c := range []struct {
		name string
		q    *request
		n    *podsource.PodNetwork
		want int
	}{
		{"subnet wins over conflist and node", withConf(1450), &podsource.PodNetwork{MTU: 1300}, 1300},
		{"subnet wins over node", withConf(0), &podsource.PodNetwork{MTU: 9000}, 9000},
		{"conflist without subnet mtu", withConf(1450), &podsource.PodNetwork{}, 1450},
		{"conflist with no pod network (DEL/CHECK)", withConf(1450), nil, 1450},
		{"node when neither", withConf(0), &podsource.PodNetwork{}, 1400},
		{"node with no pod network", withConf(0), nil, 1400},
		{"underlay pod: its provider network's", withConf(1450), &podsource.PodNetwork{ProviderNetwork: "jumbo"}, 9000},
		{"underlay pod: the subnet's mtu still wins", withConf(0), &podsource.PodNetwork{MTU: 1300, ProviderNetwork: "jumbo"}, 1300},
		{"underlay pod on a node without that network bridged", withConf(0), &podsource.PodNetwork{ProviderNetwork: "elsewhere"}, 1400},
	} {
		if got := s.podMTU(c.q, c.n); got != c.want {
			t.Errorf("%s: podMTU %d, want %d", c.name, got, c.want)
		}
	}
}
