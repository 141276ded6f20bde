package ovnnb

import (
	"crypto/sha256"
	"encoding/hex"
)

// PolicyPortGroup is the port group of the NetworkPolicy namespace/name
// (the controller creates it; netctl trace names the policy behind it).
// OVN names must match [a-zA-Z_.][a-zA-Z_.0-9]*; a hash of the key keeps
// sanitised names apart. Tenants choose both parts ("a-b"/"c" and "a"/"b-c"
// sanitise alike, and only 40 characters are kept), so the hash is what
// separates them: 128 bits, which no tenant can search for a collision
// with another tenant's policy (32 bits could be, in minutes).
func PolicyPortGroup(namespace, name string) string {
	h := sha256.Sum256([]byte(namespace + "/" + name))
	s := SanitizeName(namespace + "_" + name)
	if len(s) > 40 {
		s = s[:40]
	}
	return "np_" + s + "_" + hex.EncodeToString(h[:PolicyHashBytes])
}

// PolicyHashBytes is how much of the key's hash a policy's port group name
// carries (hex-encoded).
const PolicyHashBytes = 16

// SanitizeName replaces what an OVN name may not hold with '_'.
func SanitizeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
