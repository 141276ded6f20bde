// Package ovnpki makes and renews the certificates of the OVN databases
// and their clients (`ovnhost certs`): a CA and one key pair signed by it,
// kept in a directory (the ssl-dir layout: cacert.pem, ovn-cert.pem,
// ovn-privkey.pem, and the CA's key cakey.pem) or in a Kubernetes Secret
// (keys cacert, cert, key as Kube-OVN's kube-ovn-tls, and cakey).
//
// One certificate serves both sides, as in Kube-OVN: ovsdb-server, northd,
// ovn-controller, the node daemon and the controller all present it and
// all trust the CA. Separate server and client certificates would buy
// nothing here: neither OVS's stream-ssl nor ovnhost's clients
// (internal/ovsdbconn) match host names or tell a server certificate from
// a client one beyond the extended key usage, so any certificate of the CA
// is as good as any other to them; the boundary is who holds a key of this
// CA at all (the central, the nodes and the controller), not which one.
// The certificate therefore carries both serverAuth and clientAuth; its
// subject alternative names (--dns, --ip) are for people and for tools
// that do check them.
package ovnpki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Defaults of Options.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	DefaultCommonName   = "ovnhost-ovn"
)

// Material is what a Store holds, PEM encoded. CAKey may be empty (a
// Kube-OVN Secret carries no CA key); CACert may hold more than one
// certificate (the new CA and the one it replaces, while both are valid).
type Material struct {
	CACert, CAKey, Cert, Key []byte
}

// Store is where the material lives.
type Store interface {
	// Load returns nil (and no error) when nothing is there yet.
	Load(ctx context.Context) (*Material, error)
	// Save replaces the material as a whole, and only if nobody changed
	// it since Load.
	Save(ctx context.Context, m *Material) error
	// String names the store in messages.
	String() string
}

// Options of Ensure.
type Options struct {
	DNS          []string
	IPs          []net.IP
	CommonName   string
	CAValidity   time.Duration
	CertValidity time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.CommonName == "" {
		o.CommonName = DefaultCommonName
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Result says what Ensure found and did.
type Result struct {
	// CreatedCA, RenewedCA, IssuedCert: what changed (none: nothing was
	// written).
	CreatedCA, RenewedCA, IssuedCert bool
	// Why the certificate was issued (empty when it was not).
	Reason string
	// CANotAfter, CertNotAfter: validity of what the store holds now;
	// RenewAfter: when the certificate's last third begins (a run after
	// it renews).
	CANotAfter, CertNotAfter, RenewAfter time.Time
}

// Changed reports whether anything was written.
func (r Result) Changed() bool { return r.CreatedCA || r.RenewedCA || r.IssuedCert }

// InputError is material in the store that ovnhost cannot use; it names
// the input and the fix.
type InputError struct {
	Store, Input, Problem, Fix string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("%s: %s: %s; fix: %s", e.Store, e.Input, e.Problem, e.Fix)
}

// needsRenewal: less than a third of the certificate's life is left.
func needsRenewal(c *x509.Certificate, now time.Time) bool {
	return now.After(renewAfter(c))
}

func renewAfter(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Add(-life / 3)
}

// Ensure creates what is missing in s and renews what has less than a
// third of its life left; otherwise it writes nothing.
func Ensure(ctx context.Context, s Store, o Options) (Result, error) {
	o.defaults()
	now := o.Now()
	var res Result
	m, err := s.Load(ctx)
	if err != nil {
		return res, err
	}
	bad := func(input, problem, fix string) error {
		return &InputError{Store: s.String(), Input: input, Problem: problem, Fix: fix}
	}
	const wipe = "remove it (and the rest of the set) to have a new CA and certificate made, or put back the matching file"
	if m == nil || (len(m.CACert) == 0 && len(m.Cert) == 0 && len(m.Key) == 0 && len(m.CAKey) == 0) {
		m = &Material{}
	} else if len(m.CACert) == 0 || len(m.Cert) == 0 || len(m.Key) == 0 {
		var missing []string
		for _, f := range []struct {
			n string
			v []byte
		}{{"cacert", m.CACert}, {"cert", m.Cert}, {"key", m.Key}} {
			if len(f.v) == 0 {
				missing = append(missing, f.n)
			}
		}
		return res, bad(fmt.Sprint(missing), "missing while the rest of the set is there", wipe)
	}

	// The CA: every certificate of the bundle; the first is the signer.
	var cas []*x509.Certificate
	var caKey crypto.Signer
	if len(m.CACert) > 0 {
		cas, err = parseCerts(m.CACert)
		if err != nil {
			return res, bad("cacert", err.Error(), wipe)
		}
		for _, c := range cas {
			if !c.IsCA {
				return res, bad("cacert", fmt.Sprintf("%q is not a CA certificate", c.Subject.CommonName), wipe)
			}
		}
		if len(m.CAKey) > 0 {
			caKey, err = parseKey(m.CAKey)
			if err != nil {
				return res, bad("cakey", err.Error(), wipe)
			}
			if !publicKeyEqual(caKey.Public(), cas[0].PublicKey) {
				return res, bad("cakey", "does not match the first certificate of cacert", wipe)
			}
		}
	}
	// The certificate: must match its key and chain to the CA.
	var leaf *x509.Certificate
	if len(m.Cert) > 0 {
		pair, err := tls.X509KeyPair(m.Cert, m.Key)
		if err != nil {
			return res, bad("cert and key", err.Error(), wipe)
		}
		leaf, _ = x509.ParseCertificate(pair.Certificate[0])
		pool := x509.NewCertPool()
		for _, c := range cas {
			pool.AddCert(c)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return res, bad("cert", "not signed by cacert: "+err.Error(), wipe)
		}
	}

	// A CA is made when there is none, renewed when it has less than a
	// third of its life left, and also when a certificate must be issued
	// but the CA's key is not in the store (a Kube-OVN Secret). A renewed
	// CA goes first in cacert, with the CAs it replaces after it while
	// they are valid; the certificate stays as it is (its old CA is still
	// trusted) and is signed by the new CA at its own renewal. So every
	// daemon trusts the new CA, through the same files, long before any
	// peer presents a certificate it signed.
	issue, reason := false, ""
	switch {
	case leaf == nil:
		issue, reason = true, "no certificate"
	case needsRenewal(leaf, now):
		issue, reason = true, fmt.Sprintf("less than a third of its life left (valid until %s)", leaf.NotAfter.UTC().Format(time.RFC3339))
	default:
		if miss := missingSANs(leaf, o); len(miss) > 0 {
			issue, reason = true, fmt.Sprintf("it does not name %v", miss)
		}
	}
	newCA := false
	switch {
	case len(cas) == 0:
		newCA, res.CreatedCA = true, true
	case needsRenewal(cas[0], now):
		newCA, res.RenewedCA = true, true
	case issue && caKey == nil:
		newCA, res.RenewedCA = true, true
		reason += "; the store has no CA key (cakey), so a new CA signs it"
	}
	if newCA {
		cert, key, err := makeCA(o, now)
		if err != nil {
			return res, err
		}
		bundle := pemCert(cert.Raw)
		for _, old := range cas {
			if old.NotAfter.After(now) {
				bundle = append(bundle, pemCert(old.Raw)...)
			}
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return res, err
		}
		m.CACert, m.CAKey = bundle, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
		cas, caKey = append([]*x509.Certificate{cert}, cas...), key
		if res.CreatedCA {
			issue, reason = true, "new CA"
		}
	}
	if issue {
		cert, key, err := makeLeaf(o, now, cas[0], caKey)
		if err != nil {
			return res, err
		}
		m.Cert, m.Key = cert, key
		leaf, _ = x509.ParseCertificate(mustDER(cert))
		res.IssuedCert, res.Reason = true, reason
	}
	if newCA || issue {
		if err := s.Save(ctx, m); err != nil {
			return res, err
		}
	}
	res.CANotAfter, res.CertNotAfter, res.RenewAfter = cas[0].NotAfter, leaf.NotAfter, renewAfter(leaf)
	return res, nil
}

func missingSANs(c *x509.Certificate, o Options) []string {
	var miss []string
	for _, d := range o.DNS {
		if !slices.Contains(c.DNSNames, d) {
			miss = append(miss, d)
		}
	}
	for _, ip := range o.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			miss = append(miss, ip.String())
		}
	}
	return miss
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func makeCA(o Options, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: o.CommonName + " CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func makeLeaf(o Options, now time.Time, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(o.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNS,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func mustDER(p []byte) []byte {
	b, _ := pem.Decode(p)
	return b.Bytes
}

func parseCerts(p []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, p = pem.Decode(p)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return out, nil
}

func parseKey(p []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("holds no PEM key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("unsupported key type %T", k)
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%q block is not a PKCS#8, EC or PKCS#1 private key", b.Type)
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	switch k := a.(type) {
	case *ecdsa.PublicKey:
		return k.Equal(b)
	case *rsa.PublicKey:
		return k.Equal(b)
	}
	ab, err1 := x509.MarshalPKIXPublicKey(a)
	bb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}
