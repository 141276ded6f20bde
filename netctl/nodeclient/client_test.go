package nodeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// Each node gets its own token, bound to it alone, asked once and kept
// until shortly before it expires.
func TestAccountTokensAreBoundToOneNodeAndCached(t *testing.T) {
	kc := fake.NewClientset()
	var asked []string
	kc.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateAction)
		if ca.GetSubresource() != "token" || ca.GetNamespace() != "ovnhost" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authnv1.TokenRequest).DeepCopy()
		asked = append(asked, strings.Join(tr.Spec.Audiences, ","))
		if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 600 {
			t.Errorf("token lifetime %v, want 600 s", tr.Spec.ExpirationSeconds)
		}
		tr.Status = authnv1.TokenRequestStatus{Token: "tok-for-" + tr.Spec.Audiences[0], ExpirationTimestamp: metav1.NewTime(time.Now().Add(10 * time.Minute))}
		return true, tr, nil
	})
	src := &AccountTokens{Client: kc, Namespace: "ovnhost", Name: "ovnhost-netctl"}
	for _, n := range []string{"a", "b", "a"} {
		tok, err := src.Token(context.Background(), n)
		if err != nil || tok != "tok-for-"+api.NodeAudience(n) {
			t.Fatalf("token for %s: %q %v", n, tok, err)
		}
	}
	if want := []string{api.NodeAudience("a"), api.NodeAudience("b")}; strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Fatalf("asked the API server for %q, want %q", asked, want)
	}
}

// A refused TokenRequest says what netctl was doing and what to grant.
func TestAccountTokensRefusedNamesTheAccountAndTheFix(t *testing.T) {
	kc := fake.NewClientset()
	kc.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, "ovnhost-netctl", nil)
	})
	_, err := (&AccountTokens{Client: kc, Namespace: "ovnhost", Name: "ovnhost-netctl"}).Token(context.Background(), "a")
	if err == nil || !strings.Contains(err.Error(), "ServiceAccount ovnhost/ovnhost-netctl") || !strings.Contains(err.Error(), "bind the ClusterRole ovnhost-netctl") {
		t.Fatalf("err %v", err)
	}
}

// With a client certificate the node gets the certificate and no token.
func TestClientCertificateMeansNoToken(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
		api.AnnotationNodeAPIAddr: "10.0.0.1:10666", api.AnnotationNodeAPICert: strings.Repeat("ab", 32)}}}
	src := &AccountTokens{}
	testCert, testKey := certPEM(t)
	c, err := For(&rest.Config{BearerToken: "operators-own", TLSClientConfig: rest.TLSClientConfig{CertData: testCert, KeyData: testKey}}, n, time.Second, src)
	if err != nil {
		t.Fatal(err)
	}
	if c.tokens != nil {
		t.Fatal("a client with a certificate also sends a token")
	}
	if c, err = For(&rest.Config{BearerToken: "operators-own"}, n, time.Second, src); err != nil || c.tokens != src {
		t.Fatalf("a token kubeconfig does not use the node-bound tokens: %v", err)
	}
	if tr, ok := c.http.Transport.(*http.Transport); !ok || tr.TLSClientConfig.Certificates != nil {
		t.Fatal("a token client presents a certificate")
	}
}

func certPEM(t *testing.T) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}
