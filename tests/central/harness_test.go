package central_test

import (
	"context"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
)

// The members of these tests are real bin/ovnhost processes (role=central)
// running Debian's ovsdb-server and ovn-northd, each in its own network
// namespace on a bridge of the test's (tests/harness/centralcluster).

// cluster is a set of central members on one LAN.
type cluster = centralcluster.Cluster

// member is one `ovnhost run --role=central`.
type member = centralcluster.Member

// httpGet fetches path from the health endpoint inside ns.
func httpGet(ns, path string) (int, string, error) {
	return netns.HTTPGet(ns, centralcluster.HealthAddr, path)
}

// dial opens a libovsdb connection (the controller's and the node's
// access layer) to endpoint.
func dial(t testing.TB, dbModel func() (model.ClientDBModel, error), endpoint string) *ovsdbconn.Conn {
	t.Helper()
	m, err := dbModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ovsdbconn.Dial(ctx, m, endpoint, ovsdbconn.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitLog returns once file contains sub, re-reading it on every write.
func waitLog(file, sub string, timeout time.Duration) error {
	return proc.WaitFileContains(file, sub, timeout)
}
