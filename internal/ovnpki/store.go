package ovnpki

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// File names of a directory store: the ssl-dir layout the node daemon and
// the central read (ovn-privkey.pem, ovn-cert.pem, cacert.pem), as
// ovs-pki and ovn-ctl name them, plus the CA's key.
const (
	FileKey    = "ovn-privkey.pem"
	FileCert   = "ovn-cert.pem"
	FileCACert = "cacert.pem"
	FileCAKey  = "cakey.pem"
)

// Keys of a Secret store: Kube-OVN's kube-ovn-tls keys (cacert, cert,
// key), plus cakey, which Kube-OVN does not keep.
const (
	SecretKeyCACert = "cacert"
	SecretKeyCert   = "cert"
	SecretKeyKey    = "key"
	SecretKeyCAKey  = "cakey"
)

// Dir is a directory store. Each file is written to a temporary file in
// the same directory, synced and renamed over the old one, so a reader
// never sees half a file; the CA bundle is written first (it trusts the
// old and the new CA), the key and certificate last.
type Dir string

func (d Dir) String() string { return "directory " + string(d) }

func (d Dir) Load(context.Context) (*Material, error) {
	m := &Material{}
	any := false
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{FileCACert, &m.CACert}, {FileCAKey, &m.CAKey}, {FileCert, &m.Cert}, {FileKey, &m.Key}} {
		b, err := os.ReadFile(filepath.Join(string(d), f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		*f.dst, any = b, true
	}
	if !any {
		return nil, nil
	}
	return m, nil
}

func (d Dir) Save(_ context.Context, m *Material) error {
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{FileCACert, m.CACert, 0o644}, {FileCAKey, m.CAKey, 0o600}, {FileKey, m.Key, 0o600}, {FileCert, m.Cert, 0o644}} {
		if len(f.data) == 0 {
			continue
		}
		if err := writeAtomic(filepath.Join(string(d), f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// Secret is a Kubernetes Secret store. Save creates the Secret when Load
// found none, else updates it with the resourceVersion Load read: a
// concurrent change (another run, an admin's edit) makes it fail rather
// than be overwritten. Keys other than the four it owns are kept.
type Secret struct {
	Client          kubernetes.Interface
	Namespace, Name string

	loaded *corev1.Secret
}

func (s *Secret) String() string { return fmt.Sprintf("Secret %s/%s", s.Namespace, s.Name) }

func (s *Secret) Load(ctx context.Context) (*Material, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.loaded = nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s, err)
	}
	s.loaded = sec
	return &Material{CACert: sec.Data[SecretKeyCACert], CAKey: sec.Data[SecretKeyCAKey], Cert: sec.Data[SecretKeyCert], Key: sec.Data[SecretKeyKey]}, nil
}

func (s *Secret) Save(ctx context.Context, m *Material) error {
	data := map[string][]byte{SecretKeyCACert: m.CACert, SecretKeyCert: m.Cert, SecretKeyKey: m.Key}
	if len(m.CAKey) > 0 {
		data[SecretKeyCAKey] = m.CAKey
	}
	if s.loaded == nil {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name,
				Labels: map[string]string{"app.kubernetes.io/part-of": "ovnhost", "app.kubernetes.io/managed-by": "ovnhost-certs"}},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if _, err := s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s: it was created meanwhile (another run?): %w; run again", s, err)
			}
			return fmt.Errorf("creating %s: %w", s, err)
		}
		return nil
	}
	sec := s.loaded.DeepCopy()
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	for k, v := range data {
		sec.Data[k] = v
	}
	if _, err := s.Client.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("updating %s: it changed since it was read (another run, or an edit): %w; run again", s, err)
		}
		return fmt.Errorf("updating %s: %w", s, err)
	}
	return nil
}
