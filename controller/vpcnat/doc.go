// Package vpcnat is the OVN-native NAT of custom VPCs (Kube-OVN's
// OvnEip, OvnFip, OvnSnatRule, OvnDnatRule and a Vpc's enableExternal):
// Translate, pure, computes each VPC's gateway port on the external
// network of the default VPC's EIP/SNAT (ovn-external), its NAT rows and
// every object's status, a bad object failing alone with its fix. The
// reconciler that applies it is not written yet (issue 26): the CRDs are
// not installed and nothing calls Translate.
package vpcnat
