package nodeapi

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
)

// Fingerprint is the lower-case hex SHA-256 of a DER certificate: what the
// node publishes in AnnotationNodeAPICert.
func Fingerprint(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

// PinnedTLS is a client configuration that accepts exactly the server
// certificate with that fingerprint (whatever its issuer or names): the
// fingerprint comes from the API server, which the caller trusts.
func PinnedTLS(fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin check below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return fmt.Errorf("the node API sent no certificate")
			}
			if got := Fingerprint(raw[0]); got != fingerprint {
				return fmt.Errorf("the node API's certificate (sha256 %s) is not the one its Node annotation %s names (%s): the daemon restarted since, or this is not the node", got[:16], AnnotationNodeAPICert, fingerprint[:min(16, len(fingerprint))])
			}
			return nil
		},
	}
}
