package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority for SSL tests, written in the
// file names OVN uses (cacert.pem, <name>-privkey.pem, <name>-cert.pem).
type PKI struct {
	Dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewPKI creates the CA in dir.
func NewPKI(t testing.TB, dir string) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ovnhost test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &PKI{Dir: dir, caCert: ca, caKey: key, serial: 1}
	writePEM(t, filepath.Join(dir, "cacert.pem"), "CERTIFICATE", der)
	return p
}

// Issue writes <name>-privkey.pem and <name>-cert.pem for cn, valid for
// both client and server use on 127.0.0.1, and returns their paths.
func (p *PKI) Issue(t testing.TB, name, cn string) (key, cert string) {
	t.Helper()
	key, cert = filepath.Join(p.Dir, name+"-privkey.pem"), filepath.Join(p.Dir, name+"-cert.pem")
	p.IssueTo(t, key, cert, cn)
	return key, cert
}

// IssueTo writes a key and certificate for cn at the given paths (Kube-OVN
// mounts them as key, cert and cacert).
func (p *PKI) IssueTo(t testing.TB, key, cert, cn string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, key, "PRIVATE KEY", kder)
	writePEM(t, cert, "CERTIFICATE", der)
}

// CACert is the path of the CA certificate.
func (p *PKI) CACert() string { return filepath.Join(p.Dir, "cacert.pem") }

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	// Write then rename, as a Secret update would: readers never see half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
