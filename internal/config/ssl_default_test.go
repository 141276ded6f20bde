package config

import "testing"

// SSL is the central's default; a node keeps Kube-OVN's (off); all-in-one
// ignores ENABLE_SSL (its databases are unix sockets).
func TestSSLDefaults(t *testing.T) {
	for _, c := range []struct {
		name        string
		args, env   []string
		ssl, unused bool
		key         string
	}{
		{"central default", []string{"--role=central"}, []string{"NODE_NAME=n", "OVN_DB_IPS=10.0.0.1"}, true, false, "/var/lib/ovn/pki/ovn-privkey.pem"},
		{"central ENABLE_SSL=false", []string{"--role=central"}, []string{"NODE_NAME=n", "OVN_DB_IPS=10.0.0.1", "ENABLE_SSL=false"}, false, false, ""},
		{"central --enable-ssl=false", []string{"--role=central", "--enable-ssl=false"}, []string{"NODE_NAME=n", "OVN_DB_IPS=10.0.0.1"}, false, false, ""},
		{"remote node default", nil, []string{"NODE_NAME=n", "OVN_DB_IPS=10.0.0.1"}, false, false, ""},
		{"remote node ENABLE_SSL", nil, []string{"NODE_NAME=n", "OVN_DB_IPS=10.0.0.1", "ENABLE_SSL=true"}, true, false, "/var/lib/ovn/pki/ovn-privkey.pem"},
		{"all-in-one ENABLE_SSL", nil, []string{"NODE_NAME=n", "ENABLE_SSL=true"}, false, true, ""},
		{"all-in-one default", nil, []string{"NODE_NAME=n"}, false, false, ""},
	} {
		cfg, err := load(t, c.args, c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.EnableSSL != c.ssl || cfg.SSLUnused != c.unused || (c.key != "" && cfg.SSLKey != c.key) {
			t.Errorf("%s: EnableSSL %v SSLUnused %v key %q", c.name, cfg.EnableSSL, cfg.SSLUnused, cfg.SSLKey)
		}
		if c.ssl && cfg.NBRemote != "" && cfg.NBRemote[:4] != "ssl:" {
			t.Errorf("%s: NB remote %s", c.name, cfg.NBRemote)
		}
	}
}
