package node

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

// tlsFiles is the SSL key, certificate and CA of ENABLE_SSL, re-read when
// the files change: certificates are rotated under a running daemon (a
// Secret update, cert-manager) and new connections must use the new ones.
// ovn-controller re-reads the same files by itself.
type tlsFiles struct {
	key, cert, ca string
	log           *slog.Logger

	mu   sync.RWMutex
	pair *tls.Certificate
	pool *x509.CertPool
	// reloaded, when set (tests), receives after each successful reload.
	reloaded chan struct{}
}

func newTLSFiles(key, cert, ca string, log *slog.Logger) (*tlsFiles, error) {
	t := &tlsFiles{key: key, cert: cert, ca: ca, log: log}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tlsFiles) load() error {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return fmt.Errorf("ENABLE_SSL: loading %s and %s: %w; check --ssl-cert/--ssl-key (default <ssl-dir>/ovn-cert.pem, ovn-privkey.pem)", t.cert, t.key, err)
	}
	raw, err := os.ReadFile(t.ca)
	if err != nil {
		return fmt.Errorf("ENABLE_SSL: %w; check --ssl-ca-cert (default <ssl-dir>/cacert.pem)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return fmt.Errorf("ENABLE_SSL: %s holds no PEM certificate", t.ca)
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
func (t *tlsFiles) Config() *tls.Config {
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
func (t *tlsFiles) Watch(ctx context.Context) error {
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
