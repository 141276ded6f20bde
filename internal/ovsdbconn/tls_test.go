package ovsdbconn

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

func TestCertificatesAreReloadedWhenRotated(t *testing.T) {
	dir := t.TempDir()
	pki := testenv.NewPKI(t, dir)
	key, cert := pki.Issue(t, "ovn", "node-a")
	tf, err := LoadTLS(key, cert, dir+"/cacert.pem", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tf.reloaded = make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tf.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, err := tf.Config().GetClientCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := x509.ParseCertificate(c.Certificate[0])
		return x.Subject.CommonName
	}
	if got := cn(); got != "node-a" {
		t.Fatalf("CN %q", got)
	}
	pki.Issue(t, "ovn", "node-a-rotated")
	deadline := time.After(10 * time.Second)
	for cn() != "node-a-rotated" {
		select {
		case <-tf.reloaded:
		case <-deadline:
			t.Fatal("the rotated certificate was not picked up")
		}
	}
}

func TestBadCertificateFilesAreNamed(t *testing.T) {
	dir := t.TempDir()
	testenv.NewPKI(t, dir)
	_, err := LoadTLS(dir+"/missing-key.pem", dir+"/missing-cert.pem", dir+"/cacert.pem", nil)
	if err == nil || !strings.Contains(err.Error(), "missing-cert.pem") || !strings.Contains(err.Error(), "SSL key pair") {
		t.Fatalf("err = %v", err)
	}
}
