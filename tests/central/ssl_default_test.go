package central_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/nodedaemon"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestCentralDefaultSSLWithOvnhostCerts is issue 23 item 3 end to end on
// real daemons: `ovnhost certs --dir` makes the CA and the one key pair; a
// central member started without any ENABLE_SSL setting serves SSL only
// (its default) with them; a node (ENABLE_SSL=true, as the manifests' ConfigMap
// says) reaches READY through the SSL southbound, and the controller's
// northbound library writes through ssl: with the same files; while a
// client as a pod would be, without the certificate, gets nothing: plain
// TCP to 6641 and 6642 is answered by no OVSDB, and an SSL connection
// that trusts the CA but presents no certificate is refused by the server.
func TestCentralDefaultSSLWithOvnhostCerts(t *testing.T) {
	c := centralcluster.New(t, 1)
	m := c.Members[0]
	pki := filepath.Join(t.TempDir(), "pki")
	certs := func() string {
		t.Helper()
		out, err := exec.Command(testenv.Binary(t, "ovnhost"), "certs", "--dir="+pki, "--ip="+c.IPs(), "--dns=ovn-central.test").CombinedOutput()
		if err != nil {
			t.Fatalf("ovnhost certs: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := certs(); !strings.Contains(out, "created a CA") {
		t.Fatalf("first run: %s", out)
	}
	if out := certs(); !strings.Contains(out, "nothing to do: certificate valid until") {
		t.Fatalf("second run is not a no-op: %s", out)
	}

	// The central: no ENABLE_SSL anywhere, only where the files are.
	m.DefaultSSL = true
	m.StartNoWait(c.IPs(), "--ssl-dir="+pki)
	m.WaitReady(90 * time.Second)
	if st, err := m.Status(nbName); err != nil || !strings.HasPrefix(st.Address, "ssl:") {
		t.Fatalf("Raft address %v (%v), want ssl: by default", st, err)
	}

	// A node, as the DaemonSet runs it with the manifests' ConfigMap.
	dir, err := os.MkdirTemp("", "ovnhost-cnode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := nodedaemon.New(t, nodedaemon.Options{NS: c.LAN.AddHost().NS, Dir: dir, Name: "n1", StartTimeout: "60s", ReadyTimeout: 90 * time.Second})
	n.Env = []string{"OVN_DB_IPS=" + c.IPs(), "IFACE=eth0", "ENABLE_SSL=true"}
	n.Start("--ssl-dir=" + pki) // returns at READY=1: chassis in the SB over SSL, flows installed
	if log, _ := os.ReadFile(n.Log()); !strings.Contains(string(log), "sb=ssl:"+m.IP+":6642") {
		t.Fatalf("the node did not use ssl: to the SB:\n%s", n.LogTail())
	}

	// The controller, as its pod runs it: ENABLE_SSL and OVN_DB_IPS from
	// the ConfigMap, the Secret's key, cert and cacert in --ovn-tls-dir
	// (here links to the files ovnhost certs wrote), a real API server.
	key, cert, ca := filepath.Join(pki, "ovn-privkey.pem"), filepath.Join(pki, "ovn-cert.pem"), filepath.Join(pki, "cacert.pem")
	tlsDir := t.TempDir()
	for name, target := range map[string]string{"key": key, "cert": cert, "cacert": ca} {
		if err := os.Symlink(target, filepath.Join(tlsDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	api := kubeapi.Start(t)
	for _, crd := range []string{"crd-subnets.yaml", "crd-ips.yaml"} {
		api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", crd))
	}
	ctl, err := proc.Start(proc.Spec{Name: "ovnhost-controller", Path: testenv.Binary(t, "ovnhost-controller"),
		Args: []string{"--kubeconfig=" + api.Kubeconfig, "--health-addr=", "--leader-elect=false", "--ovn-tls-dir=" + tlsDir},
		Env:  []string{"PATH=" + os.Getenv("PATH"), "OVN_DB_IPS=" + c.IPs(), "ENABLE_SSL=true"}, Pdeathsig: true, Lines: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Kill)
	if l, err := ctl.WaitLine("connected to OVN northbound", time.Minute); err != nil || !strings.Contains(l, "ssl:"+m.IP+":6641") {
		t.Fatalf("controller: %q %v", l, err)
	}
	if _, err := ctl.WaitLine("controller ready", time.Minute); err != nil {
		t.Fatal(err)
	}
	if !waitSwitch(t, m, "ovn-default") {
		t.Fatal("the controller did not create ovn-default over SSL")
	}
	nbRemote, sbRemote := ovsdbconn.ClusterRemotes(strings.Split(c.IPs(), ","), true)
	if !strings.HasPrefix(nbRemote, "ssl:") || !strings.HasPrefix(sbRemote, "ssl:") {
		t.Fatalf("remotes %s %s", nbRemote, sbRemote)
	}

	// A pod's view: no certificate of the CA.
	caPEM, _ := os.ReadFile(ca)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, port := range []string{"6641", "6642"} {
		addr := net.JoinHostPort(m.IP, port)
		if reply, err := plainListDBs(addr); err == nil {
			t.Errorf("tcp:%s answered list_dbs without SSL: %q", addr, reply)
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, errNoJSON) {
			t.Errorf("tcp:%s: %v, want the connection closed or reset by the SSL server", addr, err)
		} else {
			t.Logf("tcp:%s: %v", addr, err)
		}
		err := sslNoCertListDBs(addr, roots, m.IP)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("ssl:%s without a client certificate: %v, want the server's refusal naming the certificate", addr, err)
		} else {
			t.Logf("ssl:%s without a client certificate: %v", addr, err)
		}
	}
}

const listDBs = `{"id":1,"method":"list_dbs","params":[]}`

var errNoJSON = errors.New("no OVSDB reply")

// plainListDBs asks for the databases in plain TCP: the error says why
// no OVSDB answer came (closed, reset, or TLS bytes).
func plainListDBs(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(listDBs)); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	k, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(strings.TrimSpace(string(buf[:k])), "{") {
		return "", errNoJSON
	}
	return string(buf[:k]), nil
}

// sslNoCertListDBs connects over TLS trusting the CA (and checking the
// server's IP name) but with no certificate of its own.
func sslNoCertListDBs(addr string, roots *x509.CertPool, ip string) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: ip, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The server's refusal is an alert after the handshake (TLS 1.3): it
	// may close before the request is written; the alert is still there
	// to read.
	_, werr := conn.Write([]byte(listDBs))
	buf := make([]byte, 4096)
	k, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return errors.New("the server answered: " + string(buf[:k]))
}
