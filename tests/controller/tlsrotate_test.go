package controller_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestNBCertificateRotationAndHealth (issue 14.3): the controller talks to
// an ssl: NB with Kube-OVN's key/cert/cacert files. The whole PKI is
// rotated: the NB restarts with a new CA and server certificate, so the
// controller's reconnects fail; /readyz says the NB is not connected and,
// once that lasted --nb-unhealthy-after, /healthz fails too (so the
// liveness probe would restart it). Then its files are replaced (written
// and renamed, as a Secret update does): it reconnects with the new
// certificates without a restart, both endpoints are 200 again and pods
// get addresses and ports.
func TestNBCertificateRotationAndHealth(t *testing.T) {
	testenv.RequireCommands(t, "ovsdb-server", "ovn-northd")
	central := ovncentral.StartSSL(t)
	e := newEnvWith(t, central)
	e.createNode("node-a", "192.168.10.11")

	clientDir := t.TempDir()
	for _, f := range []string{"key", "cert", "cacert"} {
		b, err := os.ReadFile(filepath.Join(central.TLSDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clientDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tlsCfg, err := ovnnb.WatchTLS(ctx, filepath.Join(clientDir, "key"), filepath.Join(clientDir, "cert"), filepath.Join(clientDir, "cacert"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e.startController(func(o *kube.Options) {
		o.NBEndpoints, o.NBTLS, o.HealthAddr, o.NBUnhealthyAfter = central.NBSSL(), tlsCfg, addr, 2*time.Second
	})
	probe := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// HTTP endpoints have no watch: each check is a probe, as kubelet's; the
	// deadline bounds it and the NB/pod events re-trigger it.
	waitProbe := func(path string, code int, contains string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			c, body := probe(path)
			if c == code && strings.Contains(body, contains) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %q, want %d containing %q", path, c, body, code, contains)
			}
			time.Sleep(200 * time.Millisecond) // a probe period, as kubelet's
		}
	}
	waitProbe("/readyz", 200, "ok")
	waitProbe("/healthz", 200, "ok")
	e.createPod("default", "before", "node-a", nil)
	e.waitFor(30*time.Second, "pod before annotated", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/before")
		return ok && annotated(o.(*corev1.Pod)), "not annotated"
	})

	// Rotate the server side: new CA, new server certificate, NB restarted.
	central.StopNB()
	pkiDir := t.TempDir()
	pki := testenv.NewPKI(t, pkiDir)
	pki.IssueTo(t, filepath.Join(central.TLSDir, "server.key"), filepath.Join(central.TLSDir, "server.crt"), "ovnnb")
	copyAtomic(t, pki.CACert(), filepath.Join(central.TLSDir, "cacert"))
	central.StartNB(t)
	waitProbe("/readyz", 503, "northbound")
	waitProbe("/healthz", 503, "OVN northbound database: connection lost")

	// Rotate the client's files: it reconnects by itself.
	pki.IssueTo(t, filepath.Join(clientDir, "key"), filepath.Join(clientDir, "cert"), "ovn-controller")
	copyAtomic(t, pki.CACert(), filepath.Join(clientDir, "cacert"))
	waitProbe("/readyz", 200, "ok")
	waitProbe("/healthz", 200, "ok")
	e.createPod("default", "after", "node-a", nil)
	e.waitFor(60*time.Second, "pod after annotated with its port", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/after")
		if !ok || !annotated(o.(*corev1.Pod)) {
			return false, "not annotated"
		}
		return e.podPortMatches(o.(*corev1.Pod))
	})
}

func copyAtomic(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(fmt.Errorf("rename: %w", err))
	}
}
