// Package kubeclient finds a program's Kubernetes client configuration: the
// kubeconfig file when one is given, else the pod's in-cluster
// configuration. Every program of the module reads it the same way.
package kubeclient

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns the client configuration: the kubeconfig file at path
// when given, else the in-cluster configuration, else nil and no error (a
// standalone host, outside any cluster).
func Config(path string) (*rest.Config, error) {
	if path != "" {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, nil
	}
	return c, err
}

// Required is Config for a program that cannot run without Kubernetes:
// outside a cluster and without a kubeconfig it is rest.ErrNotInCluster.
func Required(path string) (*rest.Config, error) {
	c, err := Config(path)
	if err == nil && c == nil {
		err = rest.ErrNotInCluster
	}
	return c, err
}
