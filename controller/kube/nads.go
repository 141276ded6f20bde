package kube

import (
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/controller/attachments"
)

// nadLister reads NetworkAttachmentDefinitions from the dynamic informer.
type nadLister struct{ inf cache.SharedIndexInformer }

func (l nadLister) Config(namespace, name string) (string, bool, error) {
	obj, found, err := l.inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !found {
		return "", false, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", false, nil
	}
	cfg, _, _ := unstructured.NestedString(u.Object, "spec", "config")
	return cfg, true, nil
}

// hasNADs: the NetworkAttachmentDefinition CRD is installed (Multus).
// Checked once at start: a CRD installed later is seen after a restart.
func hasNADs(d discovery.DiscoveryInterface) bool {
	gv := attachments.NADGVR.GroupVersion().String()
	rl, err := d.ServerResourcesForGroupVersion(gv)
	if err != nil && !apierrors.IsNotFound(err) {
		return false
	}
	return err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == attachments.NADGVR.Resource })
}

// watchNADs registers the NAD informer and wakes the pods that name a NAD
// when it changes; nil when the CRD is not installed.
func watchNADs(d discovery.DiscoveryInterface, f dynamicinformer.DynamicSharedInformerFactory, wake func(namespace, name string)) (*nadLister, error) {
	if !hasNADs(d) {
		return nil, nil
	}
	inf := f.ForResource(attachments.NADGVR).Informer()
	poke := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			wake(u.GetNamespace(), u.GetName())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke}); err != nil {
		return nil, err
	}
	return &nadLister{inf: inf}, nil
}
