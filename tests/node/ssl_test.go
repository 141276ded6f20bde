package node_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// An OVN central whose SB database listens on SSL, in the node's network
// namespace: the node joins it with ENABLE_SSL=true and the certificates
// in its ssl-dir, as Kube-OVN nodes do.
func TestSSLJoinsACentralOverSSL(t *testing.T) {
	n := newNode(t)
	pkiDir := n.Path("pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	pki := testenv.NewPKI(t, pkiDir)
	pki.Issue(t, "ovn", "node-chassis") // ovn-privkey.pem, ovn-cert.pem: the node's defaults
	sbKey, sbCert := pki.Issue(t, "sb", "ovn-sb")

	c := n.Path("central")
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "ovsdb-tool", "create", c+"/nb.db", "/usr/share/ovn/ovn-nb.ovsschema")
	run(t, "ovsdb-tool", "create", c+"/sb.db", "/usr/share/ovn/ovn-sb.ovsschema")
	daemon := func(args ...string) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	daemon("ovsdb-server", c+"/nb.db", "--remote=punix:"+c+"/nb.sock", "--unixctl="+c+"/nb.ctl", "--no-chdir", "-vconsole:off", "--log-file="+c+"/nb.log")
	daemon("ovsdb-server", c+"/sb.db", "--remote=punix:"+c+"/sb.sock", "--remote=pssl:16642:127.0.0.1",
		"--private-key="+sbKey, "--certificate="+sbCert, "--ca-cert="+pkiDir+"/cacert.pem",
		"--unixctl="+c+"/sb.ctl", "--no-chdir", "-vconsole:off", "--log-file="+c+"/sb.log")
	daemon("ovn-northd", "--ovnnb-db=unix:"+c+"/nb.sock", "--ovnsb-db=unix:"+c+"/sb.sock", "--unixctl="+c+"/northd.ctl", "--no-chdir", "-vconsole:off", "--log-file="+c+"/northd.log")

	n.Env = []string{"ENABLE_SSL=true", "OVN_SB_ADDR=ssl:127.0.0.1:16642"}
	n.Start("--ssl-dir=" + pkiDir)
	if log := string(must(os.ReadFile(n.Path("ovnhost.log")))); !strings.Contains(log, "sb=ssl:127.0.0.1:16642") {
		t.Fatalf("the node did not use the SSL remote:\n%s", n.LogTail())
	}
	id := strings.TrimSpace(string(must(os.ReadFile(n.Path("ovs-db", "system-id.conf")))))
	sb := dial(t, sbdb.FullDatabaseModel, "unix:"+c+"/sb.sock")
	if err := sb.Get(context.Background(), &sbdb.Chassis{Name: id}); err != nil {
		t.Fatalf("chassis %q did not register over SSL: %v", id, err)
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
}

func TestSSLWithAMissingCertificateNamesTheFile(t *testing.T) {
	n := newNode(t)
	n.Env = []string{"ENABLE_SSL=true", "OVN_SB_ADDR=ssl:127.0.0.1:16642"}
	if err := n.StartNoWait("--ssl-dir=" + n.Path("no-pki")); err != nil {
		t.Fatal(err)
	}
	<-n.Exited()
	log := n.LogTail()
	if code := n.ExitCode(); code == 0 || !strings.Contains(log, n.Path("no-pki", "ovn-cert.pem")) {
		t.Fatalf("exit %d; want a failure naming the missing certificate:\n%s", code, log)
	}
}

// All-in-one (no OVN_DB_IPS, as `make run` and the base manifests'
// ConfigMap with its empty OVN_DB_IPS) reaches READY with ENABLE_SSL=true
// and no certificates: its databases are unix sockets, and it says so.
func TestAllInOneIgnoresEnableSSL(t *testing.T) {
	n := newNode(t)
	n.Env = []string{"ENABLE_SSL=true"}
	n.Start("--ssl-dir=" + n.Path("no-pki"))
	if log := string(must(os.ReadFile(n.Path("ovnhost.log")))); !strings.Contains(log, "ENABLE_SSL does not apply all-in-one") {
		t.Fatalf("no word about ENABLE_SSL:\n%s", n.LogTail())
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
}
