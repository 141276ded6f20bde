package central_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// With ENABLE_SSL the members speak SSL to each other (Raft on ssl:IP:6643
// and 6644) and to clients (pssl on 6641 and 6642); a client with the CA
// and a certificate of its own writes through the three ssl: addresses,
// and doctor's clock check completes a TLS handshake with every member.
func TestSSLClusterFormsAndServesSSLClients(t *testing.T) {
	c := centralcluster.New(t, 3)
	pki := testenv.NewPKI(t, t.TempDir())
	sslArgs := map[*member][]string{}
	ssl := func(m *member) []string {
		if a, ok := sslArgs[m]; ok {
			return a
		}
		key, cert := pki.Issue(t, m.Name, "ovn-central-"+m.Name)
		sslArgs[m] = []string{"--enable-ssl", "--ssl-key=" + key, "--ssl-cert=" + cert, "--ssl-ca-cert=" + pki.CACert()}
		return sslArgs[m]
	}
	for _, m := range c.Members {
		m.StartNoWait(c.IPs(), ssl(m)...)
	}
	for _, m := range c.Members {
		m.WaitReady(90 * time.Second)
	}
	c.SameCluster(nbName, 3)
	c.SameCluster(sbName, 3)
	st, _ := c.Members[1].Status(nbName)
	if !strings.HasPrefix(st.Address, "ssl:") {
		t.Fatalf("Raft address %s is not ssl:", st.Address)
	}
	key, cert := pki.Issue(t, "client", "ovnhost-controller")
	tf, err := ovsdbconn.LoadTLS(key, cert, pki.CACert(), nil)
	if err != nil {
		t.Fatal(err)
	}
	nbRemote, _ := ovsdbconn.ClusterRemotes(strings.Split(c.IPs(), ","), true)
	m, _ := nbdb.FullDatabaseModel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nb, err := ovsdbconn.Dial(ctx, m, nbRemote, ovsdbconn.Options{TLS: tf.Config(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if err := insertSwitch(ctx, nb, "over-ssl"); err != nil {
		t.Fatal(err)
	}
	for _, mem := range c.Members {
		if !waitSwitch(t, mem, "over-ssl") {
			t.Fatalf("%s lacks the row written over SSL", mem.Name)
		}
	}
	// doctor with the same settings: its TLS handshakes with the members.
	m0 := c.Members[0]
	_, checks := doctorArgs(t, m0, c.IPs(), ssl(m0)...)
	if ck := checks["clock"]; ck.Status == hostcheck.Fail || !strings.Contains(ck.Found, "TLS handshakes with the 3 members pass") {
		t.Fatalf("clock check: %+v", ck)
	}
	if ck := checks["split-brain:OVN_Northbound"]; ck.Status != hostcheck.Pass {
		t.Fatalf("split-brain over ssl: %+v", ck)
	}
}
