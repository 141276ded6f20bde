package hostcheck

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// CheckSystemID looks at the stored system-id. Whether another chassis uses
// it can only be told from the SB database: netctl doctor does that.
func CheckSystemID(s nodeconfig.HostSettings, f FileFacts) Check {
	const name = "system-id"
	path := layout.New(s.Paths).SystemIDFile
	b, err := f.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Check{Name: name, Status: Pass, Found: path + " absent: a new host-unique system-id will be generated"}
	case err != nil:
		return Check{Name: name, Status: Fail, Found: "cannot read " + path + ": " + err.Error(), Fix: "make it readable, or remove it to generate a new system-id"}
	}
	id := strings.TrimSpace(string(b))
	if id == "" || strings.ContainsAny(id, " \t\n\"") {
		return Check{Name: name, Status: Fail, Found: path + " holds no valid system-id (" + quoteShort(id) + ")",
			Fix: "remove " + path + " to generate a new one"}
	}
	return Check{Name: name, Status: Pass, Found: "system-id " + id + " (from " + path + "); duplicates in the SB database are checked by netctl doctor"}
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return "\"" + s + "\""
}

// CheckSSL checks that the SSL key, certificate and CA can be read when
// ENABLE_SSL is on (their validity against the clock is netctl doctor's).
func CheckSSL(s nodeconfig.HostSettings, f FileFacts) []Check {
	if !s.EnableSSL {
		return nil
	}
	var out []Check
	for _, file := range []struct{ key, path string }{{"ssl-key", s.SSLKey}, {"ssl-cert", s.SSLCert}, {"ssl-ca-cert", s.SSLCACert}} {
		name := "ssl:" + file.key
		b, err := f.ReadFile(file.path)
		switch {
		case err != nil:
			out = append(out, Check{Name: name, Status: Fail, Found: "ENABLE_SSL=true but " + file.path + " cannot be read: " + err.Error(),
				Fix: "mount the OVN certificates at " + file.path + " (or set --ssl-dir / --" + file.key + ")"})
		case !strings.Contains(string(b), "-----BEGIN "):
			out = append(out, Check{Name: name, Status: Fail, Found: file.path + " holds no PEM data", Fix: "put the PEM-encoded file at " + file.path})
		default:
			out = append(out, Check{Name: name, Status: Pass, Found: file.path + " is readable PEM"})
		}
	}
	return out
}
