package kubeapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Server is a running etcd + kube-apiserver.
type Server struct {
	Dir        string
	URL        string       // https://127.0.0.1:PORT
	Config     *rest.Config // system:masters client (high QPS for tests)
	Kubeconfig string       // path of a kubeconfig file with the same credentials
	EtcdURL    string
	procs      []*child
	// serviceCIDRs: --service-cluster-ip-range of the apiserver and kcm.
	serviceCIDRs string
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Options are what differs between the tests' API servers.
type Options struct {
	// ServiceCIDRs is --service-cluster-ip-range of kube-apiserver and
	// kube-controller-manager, one range per family, comma-separated
	// (default DefaultServiceCIDRs; "10.96.0.0/12,fd00:10:96::/112" makes
	// a dual-stack cluster).
	ServiceCIDRs string
}

// DefaultServiceCIDRs is Kube-OVN's (and the tests') IPv4 Service range.
const DefaultServiceCIDRs = "10.96.0.0/12"

// Start builds (if needed) and starts etcd and kube-apiserver on free loopback
// ports, waits for /readyz, and registers their shutdown with t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if o.ServiceCIDRs == "" {
		o.ServiceCIDRs = DefaultServiceCIDRs
	}
	if testing.Short() && !testenv.Strict() { // make test-unit only; make test never passes -short
		t.Skip("real daemons are not started under -short (make test-unit)")
	}
	bin := Binaries(t)
	dir, err := os.MkdirTemp("", "kapi")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Dir: dir, serviceCIDRs: o.ServiceCIDRs}
	t.Cleanup(s.Stop)
	pki, err := genPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatalf("kubeapi: PKI: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.startEtcd(bin); lastErr == nil {
			break
		}
		s.stopAll()
	}
	if lastErr != nil {
		t.Fatalf("kubeapi: %v", lastErr)
	}
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.startAPIServer(bin, pki); lastErr == nil {
			break
		}
		s.stopOne("kube-apiserver")
	}
	if lastErr != nil {
		t.Fatalf("kubeapi: %v", lastErr)
	}
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) spawn(name, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(s.Dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); lf.Close(); close(c.done) }()
	s.procs = append(s.procs, c)
	return c, nil
}

// waitHTTP polls url until it answers 200, the process exits or the deadline passes.
func waitHTTP(c *child, client *http.Client, url, token string, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited before %s answered 200; log:\n%s", c.name, url, logTail(c.log))
		case <-tick.C:
		}
	}
	return fmt.Errorf("%s: %s not 200 after %s (last: %s); log:\n%s", c.name, url, d, last, logTail(c.log))
}

func logTail(p string) string {
	b, _ := os.ReadFile(p)
	return lastLines(string(b), 15)
}

func (s *Server) startEtcd(bin string) error {
	cp, err := freePort()
	if err != nil {
		return err
	}
	pp, err := freePort()
	if err != nil {
		return err
	}
	data := filepath.Join(s.Dir, "etcd-data")
	os.RemoveAll(data)
	cu, pu := "http://127.0.0.1:"+strconv.Itoa(cp), "http://127.0.0.1:"+strconv.Itoa(pp)
	c, err := s.spawn("etcd", filepath.Join(bin, "etcd"), "--name", "kapi", "--data-dir", data,
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "kapi="+pu, "--initial-cluster-state", "new",
		"--unsafe-no-fsync", "--quota-backend-bytes", "8589934592", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := waitHTTP(c, http.DefaultClient, cu+"/health", "", 30*time.Second); err != nil {
		return err
	}
	s.EtcdURL = cu
	return nil
}

type pkiFiles struct {
	dir, caCert, cert, key, clientCert, clientKey, saPub, saKey, token string
	caPEM, clientCertPEM, clientKeyPEM                                 []byte
}

func (s *Server) startAPIServer(bin string, p *pkiFiles) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	c, err := s.spawn("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+s.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(s.Dir, "cert-dir"),
		"--tls-cert-file="+p.cert, "--tls-private-key-file="+p.key,
		"--client-ca-file="+p.caCert, "--token-auth-file="+filepath.Join(p.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range="+s.serviceCIDRs,
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true", "--profiling=false",
		"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
	)
	if err != nil {
		return err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitHTTP(c, hc, url+"/readyz", p.token, 120*time.Second); err != nil {
		return err
	}
	s.URL = url
	s.Config = &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: p.clientCertPEM, KeyData: p.clientKeyPEM},
		QPS: 5000, Burst: 10000}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kapi"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: p.caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.clientCertPEM, ClientKeyData: p.clientKeyPEM}
	kc.Contexts["kapi"] = &clientcmdapi.Context{Cluster: "kapi", AuthInfo: "admin"}
	kc.CurrentContext = "kapi"
	s.Kubeconfig = filepath.Join(s.Dir, "kubeconfig")
	return clientcmd.WriteToFile(*kc, s.Kubeconfig)
}

func (s *Server) stopOne(name string) {
	for i, c := range s.procs {
		if c.name != name {
			continue
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		s.procs = append(s.procs[:i], s.procs[i+1:]...)
		return
	}
}

func (s *Server) stopAll() {
	// apiserver first, then its storage
	for len(s.procs) > 0 {
		s.stopOne(s.procs[len(s.procs)-1].name)
	}
}

// Stop stops both processes and removes the directory. Idempotent.
func (s *Server) Stop() {
	s.stopAll()
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

func genPKI(dir string) (*pkiFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pkiFiles{dir: dir}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ovnhost-test-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now, now.Add(10*365*24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), nil
	}
	servCert, servKey, err := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return nil, err
	}
	cliCert, cliKey, err := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "ovnhost-test-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, err
	}
	saKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	saPubDER, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	p.token = hex.EncodeToString(tok)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.clientCertPEM, p.clientKeyPEM = cliCert, cliKey
	files := map[string][]byte{
		"ca.crt": p.caPEM, "apiserver.crt": servCert, "apiserver.key": servKey,
		"admin.crt": cliCert, "admin.key": cliKey,
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		"tokens.csv": []byte(p.token + ",ovnhost-test-admin,ovnhost-test-admin-uid,\"system:masters\"\n"),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			return nil, err
		}
	}
	p.caCert, p.cert, p.key = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	p.clientCert, p.clientKey = filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	p.saPub, p.saKey = filepath.Join(dir, "sa.pub"), filepath.Join(dir, "sa.key")
	return p, nil
}

// StartControllerManager runs a real kube-controller-manager against the
// server with the endpointslice, namespace and garbage-collector controllers
// (what a cluster runs to turn Services and ready Pods into EndpointSlices,
// and to empty deleted namespaces), and waits until it is healthy. It stops
// with the server. It authenticates with the admin kubeconfig
// (--use-service-account-credentials=false), so no service-account tokens
// are needed; the signing key is passed anyway for the token controllers
// that a caller might enable through extra.
func (s *Server) StartControllerManager(t testing.TB, extra ...string) {
	t.Helper()
	bin := ControllerManager(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.startKCM(bin, extra); lastErr == nil {
			return
		}
		s.stopOne("kube-controller-manager")
	}
	t.Fatalf("kubeapi: %v", lastErr)
}

func (s *Server) startKCM(bin string, extra []string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + s.Kubeconfig,
		"--authentication-kubeconfig=" + s.Kubeconfig, "--authorization-kubeconfig=" + s.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(s.Dir, "kcm-cert"),
		"--leader-elect=false",
		"--controllers=endpointslice,namespace,garbagecollector",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + filepath.Join(s.Dir, "pki", "sa.key"),
		"--root-ca-file=" + filepath.Join(s.Dir, "pki", "ca.crt"),
		"--service-cluster-ip-range=" + s.serviceCIDRs,
		// The endpointslice controller batches changes for this long: 0 =
		// every pod change becomes a slice update at once, as tests expect.
		"--endpointslice-updates-batch-period=0s",
		"--concurrent-service-endpoint-syncs=10",
	}, extra...)
	c, err := s.spawn("kube-controller-manager", bin, args...)
	if err != nil {
		return err
	}
	// Its serving certificate is self-signed (cert-dir).
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return waitHTTP(c, hc, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "", 120*time.Second)
}
