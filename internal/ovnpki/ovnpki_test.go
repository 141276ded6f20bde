package ovnpki

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var ctx = context.Background()

func clock(t time.Time) func() time.Time { return func() time.Time { return t } }

func loadDir(t *testing.T, d string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range []string{FileCACert, FileCAKey, FileCert, FileKey} {
		b, err := os.ReadFile(filepath.Join(d, f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = b
	}
	return out
}

func leafOf(t *testing.T, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateIsValidAndIdempotent(t *testing.T) {
	d := filepath.Join(t.TempDir(), "pki")
	o := Options{DNS: []string{"ovn-central.example"}, IPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")}}
	res, err := Ensure(ctx, Dir(d), o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CreatedCA || !res.IssuedCert {
		t.Fatalf("%+v", res)
	}
	files := loadDir(t, d)
	for f, mode := range map[string]os.FileMode{FileKey: 0o600, FileCAKey: 0o600, FileCert: 0o644, FileCACert: 0o644} {
		st, _ := os.Stat(filepath.Join(d, f))
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", f, st.Mode().Perm(), mode)
		}
	}
	leaf := leafOf(t, files[FileCert], files[FileKey])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(files[FileCACert])
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "ovn-central.example", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "fd00::1"}); err != nil {
		t.Error(err)
	}
	if leaf.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm %v, want ECDSA", leaf.PublicKeyAlgorithm)
	}
	if d := time.Until(leaf.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("certificate valid for %v", d)
	}

	// A second run: nothing written, same validity reported.
	st0, _ := os.Stat(filepath.Join(d, FileCert))
	res2, err := Ensure(ctx, Dir(d), o)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Changed() || !res2.CertNotAfter.Equal(leaf.NotAfter) {
		t.Fatalf("second run: %+v", res2)
	}
	after := loadDir(t, d)
	for f := range files {
		if !bytes.Equal(files[f], after[f]) {
			t.Errorf("second run rewrote %s", f)
		}
	}
	st1, _ := os.Stat(filepath.Join(d, FileCert))
	if !st0.ModTime().Equal(st1.ModTime()) {
		t.Error("second run touched the certificate")
	}
	ents, _ := os.ReadDir(d)
	if len(ents) != 4 {
		t.Errorf("left behind: %v", ents)
	}
}

func TestRenewsANearExpiryLeafUnderTheSameCA(t *testing.T) {
	d := t.TempDir()
	start := time.Now()
	if _, err := Ensure(ctx, Dir(d), Options{Now: clock(start)}); err != nil {
		t.Fatal(err)
	}
	before := loadDir(t, d)
	old := leafOf(t, before[FileCert], before[FileKey])
	// Just before the last third: nothing; just after: renewed.
	life := old.NotAfter.Sub(old.NotBefore)
	if res, err := Ensure(ctx, Dir(d), Options{Now: clock(old.NotAfter.Add(-life/3 - time.Hour))}); err != nil || res.Changed() {
		t.Fatalf("%+v %v", res, err)
	}
	later := old.NotAfter.Add(-life/3 + time.Hour)
	res, err := Ensure(ctx, Dir(d), Options{Now: clock(later)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IssuedCert || res.RenewedCA || res.CreatedCA || !strings.Contains(res.Reason, "third") {
		t.Fatalf("%+v", res)
	}
	after := loadDir(t, d)
	if !bytes.Equal(before[FileCACert], after[FileCACert]) || !bytes.Equal(before[FileCAKey], after[FileCAKey]) {
		t.Error("the CA changed for a leaf renewal")
	}
	n := leafOf(t, after[FileCert], after[FileKey])
	if !n.NotAfter.After(old.NotAfter) || bytes.Equal(before[FileKey], after[FileKey]) {
		t.Errorf("new certificate until %v (old %v), key changed %v", n.NotAfter, old.NotAfter, !bytes.Equal(before[FileKey], after[FileKey]))
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(after[FileCACert])
	if _, err := n.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: later}); err != nil {
		t.Error(err)
	}
}

func TestRenewsANearExpiryCAKeepingTheOldTrusted(t *testing.T) {
	d := t.TempDir()
	day := 24 * time.Hour
	start := time.Now()
	o := Options{Now: clock(start), CAValidity: 90 * day, CertValidity: 10 * day}
	if _, err := Ensure(ctx, Dir(d), o); err != nil {
		t.Fatal(err)
	}
	first := loadDir(t, d)
	oldCA, _ := parseCerts(first[FileCACert])
	// Day 55: the certificate is renewed under the old CA.
	o.Now = clock(start.Add(55 * day))
	if res, err := Ensure(ctx, Dir(d), o); err != nil || !res.IssuedCert || res.RenewedCA {
		t.Fatalf("day 55: %+v %v", res, err)
	}
	before := loadDir(t, d)
	// Day 61: the CA is in its last third (it began after day 60 minus
	// the hour of back-dating): a new CA joins cacert first, the old one
	// stays trusted, the certificate is left alone.
	o.Now = clock(start.Add(61 * day))
	res, err := Ensure(ctx, Dir(d), o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.RenewedCA || res.IssuedCert {
		t.Fatalf("day 61: %+v", res)
	}
	after := loadDir(t, d)
	cas, err := parseCerts(after[FileCACert])
	if err != nil || len(cas) != 2 || !cas[1].Equal(oldCA[0]) || cas[0].Equal(oldCA[0]) {
		t.Fatalf("cacert holds %d certificates (%v), want the new CA then the old", len(cas), err)
	}
	if !bytes.Equal(before[FileCert], after[FileCert]) || !bytes.Equal(before[FileKey], after[FileKey]) {
		t.Fatal("the certificate changed with the CA: peers with the old cacert would refuse it")
	}
	// Day 63: the certificate's renewal signs with the new CA.
	o.Now = clock(start.Add(63 * day))
	if res, err := Ensure(ctx, Dir(d), o); err != nil || !res.IssuedCert || res.RenewedCA {
		t.Fatalf("day 63: %+v %v", res, err)
	}
	final := loadDir(t, d)
	n := leafOf(t, final[FileCert], final[FileKey])
	only := x509.NewCertPool()
	only.AddCert(cas[0])
	if _, err := n.Verify(x509.VerifyOptions{Roots: only, CurrentTime: start.Add(63 * day)}); err != nil {
		t.Fatalf("the renewed certificate is not the new CA's: %v", err)
	}
}

func TestRefusesMismatchedOrBrokenMaterial(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if _, err := Ensure(ctx, Dir(d), Options{}); err != nil {
			t.Fatal(err)
		}
	}
	ma, mb := loadDir(t, a), loadDir(t, b)
	for name, c := range map[string]struct {
		file  string
		data  []byte
		input string
	}{
		"key of another pair":  {FileKey, mb[FileKey], "cert and key"},
		"cert of another CA":   {FileCert, mb[FileCert], "cert"},
		"CA key of another CA": {FileCAKey, mb[FileCAKey], "cakey"},
		"garbage CA":           {FileCACert, []byte("garbage"), "cacert"},
		"leaf as CA":           {FileCACert, ma[FileCert], "cacert"},
		"empty key":            {FileKey, nil, "[key]"},
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			for f, v := range ma {
				if f == c.file {
					v = c.data
				}
				if c.input == "cert" && f == FileKey {
					v = mb[FileKey] // the other CA's pair, whole
				}
				if v != nil {
					if err := os.WriteFile(filepath.Join(d, f), v, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := loadDirLoose(d)
			_, err := Ensure(ctx, Dir(d), Options{})
			var ie *InputError
			if !errors.As(err, &ie) || ie.Input != c.input || !strings.Contains(err.Error(), "fix: remove it") || !strings.Contains(err.Error(), d) {
				t.Fatalf("%v (input %q)", err, c.input)
			}
			if after := loadDirLoose(d); !mapsEqual(before, after) {
				t.Error("refused material was changed")
			}
		})
	}
}

func loadDirLoose(d string) map[string][]byte {
	out := map[string][]byte{}
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(d, e.Name()))
		out[e.Name()] = b
	}
	return out
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestNewSANReissues(t *testing.T) {
	d := t.TempDir()
	if _, err := Ensure(ctx, Dir(d), Options{IPs: []net.IP{net.ParseIP("10.0.0.1")}}); err != nil {
		t.Fatal(err)
	}
	res, err := Ensure(ctx, Dir(d), Options{IPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")}})
	if err != nil || !res.IssuedCert || res.RenewedCA || !strings.Contains(res.Reason, "10.0.0.2") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestSecretStore(t *testing.T) {
	cs := fake.NewClientset()
	s := &Secret{Client: cs, Namespace: "ovnhost", Name: "ovnhost-ovn-tls"}
	res, err := Ensure(ctx, s, Options{})
	if err != nil || !res.CreatedCA {
		t.Fatalf("%+v %v", res, err)
	}
	sec, err := cs.CoreV1().Secrets("ovnhost").Get(ctx, "ovnhost-ovn-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cacert", "cert", "key", "cakey"} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("no %s in the Secret", k)
		}
	}
	leafOf(t, sec.Data["cert"], sec.Data["key"])
	// Idempotent: no write at all on a second run.
	cs.ClearActions()
	if res, err := Ensure(ctx, &Secret{Client: cs, Namespace: "ovnhost", Name: "ovnhost-ovn-tls"}, Options{}); err != nil || res.Changed() {
		t.Fatalf("%+v %v", res, err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("second run did %s", a.GetVerb())
		}
	}
	// An update carries the resourceVersion that was read: a concurrent
	// change in between is a conflict, not an overwrite.
	cs.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction).GetObject().(*corev1.Secret)
		if u.ResourceVersion != sec.ResourceVersion {
			t.Errorf("update with resourceVersion %q, read %q", u.ResourceVersion, sec.ResourceVersion)
		}
		return false, nil, nil
	})
	later := time.Now().Add(300 * 24 * time.Hour)
	if res, err := Ensure(ctx, &Secret{Client: cs, Namespace: "ovnhost", Name: "ovnhost-ovn-tls"}, Options{Now: clock(later)}); err != nil || !res.IssuedCert || res.RenewedCA {
		t.Fatalf("%+v %v", res, err)
	}
}

// A Kube-OVN kube-ovn-tls Secret: cacert, cert and key, no CA key; other
// keys are kept. While valid it is left alone; when the certificate must
// be renewed, a new CA signs it and the old CA stays trusted.
func TestKubeOVNSecretWithoutCAKey(t *testing.T) {
	d := t.TempDir()
	if _, err := Ensure(ctx, Dir(d), Options{}); err != nil {
		t.Fatal(err)
	}
	m := loadDir(t, d)
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-ovn-tls", ResourceVersion: "7"},
		Data: map[string][]byte{"cacert": m[FileCACert], "cert": m[FileCert], "key": m[FileKey], "other": []byte("x")}})
	s := &Secret{Client: cs, Namespace: "kube-system", Name: "kube-ovn-tls"}
	if res, err := Ensure(ctx, s, Options{}); err != nil || res.Changed() {
		t.Fatalf("%+v %v", res, err)
	}
	res, err := Ensure(ctx, s, Options{Now: clock(time.Now().Add(300 * 24 * time.Hour))})
	if err != nil || !res.RenewedCA || !strings.Contains(res.Reason, "no CA key") {
		t.Fatalf("%+v %v", res, err)
	}
	sec, _ := cs.CoreV1().Secrets("kube-system").Get(ctx, "kube-ovn-tls", metav1.GetOptions{})
	if string(sec.Data["other"]) != "x" || len(sec.Data["cakey"]) == 0 {
		t.Errorf("keys after renewal: %v", sec.Data)
	}
	if cas, _ := parseCerts(sec.Data["cacert"]); len(cas) != 2 {
		t.Errorf("cacert holds %d CAs", len(cas))
	}
}

// Kube-OVN's ovs-pki material is RSA (PKCS#1 keys): accepted as it is.
func TestRSAMaterialIsAccepted(t *testing.T) {
	caKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	now := time.Now()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "OVS switchca"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(3650 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	lT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ovn"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(3650 * 24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	lDER, _ := x509.CreateCertificate(rand.Reader, lT, ca, &k.PublicKey, caKey)
	d := t.TempDir()
	for f, v := range map[string][]byte{
		FileCACert: pemCert(caDER), FileCert: pemCert(lDER),
		FileKey: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}),
	} {
		if err := os.WriteFile(filepath.Join(d, f), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := Ensure(ctx, Dir(d), Options{}); err != nil || res.Changed() {
		t.Fatalf("%+v %v", res, err)
	}
}
