package hostcheck

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCertValidity(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	nb := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	na := nb.Add(24 * time.Hour)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ovn"}, NotBefore: nb, NotAfter: na}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "cert.pem")
	// A key block first: the certificate is found after it.
	data := append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	gotNB, gotNA, err := (&DoctorHost{}).CertValidity(p)
	if err != nil || !gotNB.Equal(nb) || !gotNA.Equal(na) {
		t.Fatalf("%v %v %v", gotNB, gotNA, err)
	}
	if err := os.WriteFile(p, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (&DoctorHost{}).CertValidity(p); err == nil {
		t.Fatal("no error for a file without a certificate")
	}
}

func TestFirewalldCmdline(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/bin/python3", "-s", "/usr/sbin/firewalld", "--nofork", "--nopid"}, true},
		{[]string{"/usr/sbin/firewalld", "--nofork"}, true},
		{[]string{"grep", "firewalld"}, false},
		{[]string{"systemctl", "is-active", "firewalld"}, false},
		{[]string{"/usr/bin/python3", "/usr/bin/firewall-cmd", "--state"}, false},
		{nil, false},
	} {
		if got := firewalldCmdline(tc.args); got != tc.want {
			t.Errorf("%q: %v", tc.args, got)
		}
	}
}

func TestParseStartTimeTakesField22AfterAParenthesisedName(t *testing.T) {
	// A comm with a space and a parenthesis, as a process may name itself.
	stat := "1234 (ovs-vs) x) S 1 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 420 1000 10 18446744073709551615"
	got, err := parseStartTime(stat)
	if err != nil || got != 4200*time.Millisecond {
		t.Fatalf("parseStartTime = %v, %v; want 4.2s", got, err)
	}
	if _, err := parseStartTime("1234 (x) S 1"); err == nil {
		t.Fatal("a short stat line parsed")
	}
}
