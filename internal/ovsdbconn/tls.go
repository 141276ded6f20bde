package ovsdbconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// TLSFiles is an SSL key, certificate and CA for ssl: remotes (Kube-OVN's
// ENABLE_SSL), optionally re-read when the files change: certificates are
// rotated under a running daemon (a Secret update, cert-manager) and new
// connections must use the new ones. The node daemon, the controller and
// netctl doctor all build their client TLS from it.
type TLSFiles struct {
	key, cert, ca string
	log           *slog.Logger

	mu   sync.RWMutex
	pair *tls.Certificate
	pool *x509.CertPool
	// reloaded, when set (tests), receives after each successful reload.
	reloaded chan struct{}
}

// LoadTLS reads the key pair and the CA; log (may be nil) is for Watch.
func LoadTLS(key, cert, ca string, log *slog.Logger) (*TLSFiles, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &TLSFiles{key: key, cert: cert, ca: ca, log: log}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *TLSFiles) load() error {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return fmt.Errorf("loading the SSL key pair %s and %s: %w", t.cert, t.key, err)
	}
	raw, err := os.ReadFile(t.ca)
	if err != nil {
		return fmt.Errorf("reading the SSL CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return fmt.Errorf("the SSL CA %s holds no PEM certificate", t.ca)
	}
	t.mu.Lock()
	t.pair, t.pool = &pair, pool
	t.mu.Unlock()
	return nil
}

// Config returns a client configuration that always presents the current
// certificate and checks the server against the current CA. OVN
// certificates name the chassis or the cluster, not the address dialled,
// so the chain is verified without matching a host name.
func (t *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by VerifyPeerCertificate below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			t.mu.RLock()
			defer t.mu.RUnlock()
			return t.pair, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			t.mu.RLock()
			pool := t.pool
			t.mu.RUnlock()
			return verifyChain(raw, pool)
		},
	}
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("the server presented no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// Watch re-reads the files when anything changes in their directories
// (Kubernetes swaps a Secret's files through a symlink rename), until ctx
// ends. A half-written or invalid set keeps the previous one in use.
func (t *TLSFiles) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range []string{t.key, t.cert, t.ca} {
		dirs[filepath.Dir(f)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return fmt.Errorf("watching %s for certificate rotation: %w", d, err)
		}
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-w.Errors:
				t.log.Warn("certificate watch", "err", err)
			case <-w.Events:
				if err := t.load(); err != nil {
					t.log.Warn("certificates changed but cannot be used yet; keeping the previous ones", "err", err)
					continue
				}
				t.log.Info("reloaded SSL certificates", "cert", t.cert)
				if t.reloaded != nil {
					t.reloaded <- struct{}{}
				}
			}
		}
	}()
	return nil
}
