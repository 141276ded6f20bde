package cli

import (
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/netctl/cluster"
)

// podFromNode adds what the pod's node holds for it (filled in with the node API).
func (a *app) podFromNode(cmd *cobra.Command, k *kube, n *corev1.Node, info *cluster.PodInfo) {
	info.NodeError = "the node API is not implemented yet"
}
