package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCertsCommand(t *testing.T) {
	d := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	if rc := run([]string{"certs", "--dir=" + d, "--ip=10.0.0.1", "--dns=ovn.example"}, nil, &out, &errb); rc != exitOK || !strings.Contains(out.String(), "created a CA") {
		t.Fatalf("rc %d\n%s%s", rc, out.String(), errb.String())
	}
	out.Reset()
	if rc := run([]string{"certs", "--dir=" + d, "--ip=10.0.0.1", "--dns=ovn.example"}, nil, &out, &errb); rc != exitOK || !strings.Contains(out.String(), "nothing to do: certificate valid until") {
		t.Fatalf("second run: rc %d\n%s%s", rc, out.String(), errb.String())
	}
	// A key that is not the certificate's: refused, exit 2, naming it.
	other := filepath.Join(t.TempDir(), "pki")
	run([]string{"certs", "--dir=" + other}, nil, &out, &errb)
	k, _ := os.ReadFile(filepath.Join(other, "ovn-privkey.pem"))
	if err := os.WriteFile(filepath.Join(d, "ovn-privkey.pem"), k, 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if rc := run([]string{"certs", "--dir=" + d}, nil, &out, &errb); rc != exitConfig || !strings.Contains(errb.String(), "cert and key") || !strings.Contains(errb.String(), "fix:") {
		t.Fatalf("mismatched key: rc %d: %s", rc, errb.String())
	}
	for _, bad := range [][]string{
		{"certs"},
		{"certs", "--dir=" + d, "--secret=a/b"},
		{"certs", "--secret=nonamespace"},
		{"certs", "--dir=" + d, "--ip=10.0.0.300"},
	} {
		errb.Reset()
		if rc := run(bad, nil, &out, &errb); rc != exitConfig || !strings.Contains(errb.String(), "fix") {
			t.Errorf("%v: rc %d: %s", bad, rc, errb.String())
		}
	}
	// OVN_DB_IPS is the default of --ip.
	errb.Reset()
	if rc := run([]string{"certs", "--dir=" + t.TempDir()}, []string{"OVN_DB_IPS=10.0.0.1,bogus"}, &out, &errb); rc != exitConfig || !strings.Contains(errb.String(), `OVN_DB_IPS) "bogus"`) {
		t.Errorf("rc %d: %s", rc, errb.String())
	}
}
