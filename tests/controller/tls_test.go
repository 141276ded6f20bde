package controller_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
)

// TestNBOverSSLWithKubeOVNFileLayout: with ENABLE_SSL the controller reaches
// the NB on ssl: using key, cert and cacert as Kube-OVN mounts them; without
// them, or with a foreign CA, it refuses with an error that says so.
func TestNBOverSSLWithKubeOVNFileLayout(t *testing.T) {
	c := ovncentral.StartSSL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NBSSL(), Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "no TLS configuration") {
		t.Fatalf("ssl: without TLS: %v", err)
	}
	tlsCfg, err := ovnnb.LoadTLS(filepath.Join(c.TLSDir, "key"), filepath.Join(c.TLSDir, "cert"), filepath.Join(c.TLSDir, "cacert"))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NBSSL(), Logger: quiet, TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if err := nb.EnsureRouter(ctx, "ovn-cluster"); err != nil {
		t.Fatal(err)
	}
	// A CA that did not sign the server: the handshake must fail.
	other := ovncentral.StartSSL(t)
	bad, err := ovnnb.LoadTLS(filepath.Join(c.TLSDir, "key"), filepath.Join(c.TLSDir, "cert"), filepath.Join(other.TLSDir, "cacert"))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	if nb2, err := ovnnb.Connect(sctx, ovnnb.Options{Endpoints: c.NBSSL(), Logger: quiet, TLS: bad, ConnectTimeout: time.Second}); err == nil {
		nb2.Close()
		t.Fatal("connected with a CA that did not sign the server certificate")
	}
}
