package nodeapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// ServingCert is the node API's certificate and the SHA-256 of its leaf,
// which the node publishes (api.AnnotationNodeAPICert) so netctl can pin it.
type ServingCert struct {
	Cert        tls.Certificate
	Fingerprint string
}

// LoadServingCert reads a PEM certificate and key.
func LoadServingCert(certFile, keyFile string) (*ServingCert, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("node API certificate %s / key %s: %w", certFile, keyFile, err)
	}
	return &ServingCert{Cert: c, Fingerprint: api.Fingerprint(c.Certificate[0])}, nil
}

// SelfSignedCert makes a fresh ECDSA P-256 certificate for hosts (IPs or
// names), valid for a year; it lives in memory only.
func SelfSignedCert(hosts ...string) (*ServingCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "ovnhost node API"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &ServingCert{Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, Fingerprint: api.Fingerprint(der)}, nil
}
