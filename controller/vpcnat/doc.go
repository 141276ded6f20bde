// Package vpcnat is the OVN-native NAT of custom VPCs (Kube-OVN's
// OvnEip, OvnFip, OvnSnatRule, OvnDnatRule and a Vpc's enableExternal):
// Translate, pure, computes each VPC's gateway port on the external
// network of the default VPC's EIP/SNAT (ovn-external), its NAT rows and
// every object's status, a bad object failing alone with its fix; the
// Reconciler (queue vpc-nat, idle without the CRDs) reads the objects,
// applies the plan through ovnnet (EnsureVPCExternal, RemoveVPCExternal)
// and writes the statuses and events (controller/README.md, "OVN-native
// NAT of custom VPCs").
package vpcnat
