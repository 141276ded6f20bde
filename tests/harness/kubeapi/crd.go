package kubeapi

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CustomResourceDefinition in a YAML file (the same
// file the packaging ships) and waits until the API server reports it
// Established, so its resources can be used right away.
func (s *Server) InstallCRD(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubeapi: CRD file: %v", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatalf("kubeapi: CRD file %s: %v", path, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	dc := dynamic.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dc.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubeapi: creating CRD from %s: %v", path, err)
	}
	w, err := dc.Resource(crdGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + u.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("kubeapi: CRD %s not Established within 30s", u.GetName())
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("kubeapi: watch of CRD %s closed before it was Established", u.GetName())
			}
			if ev.Type == watch.Error {
				t.Fatalf("kubeapi: watch of CRD %s: %v", u.GetName(), ev.Object)
			}
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return
				}
				if m["type"] == "NamesAccepted" && m["status"] == "False" {
					t.Fatalf("kubeapi: CRD %s names not accepted: %v", u.GetName(), fmt.Sprint(m["message"]))
				}
			}
		}
	}
}
