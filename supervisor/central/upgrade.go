package central

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// upgrade converts the clustered database online when the installed
// schema is newer than the one it runs (after an OVN upgrade), the way
// ovn-ctl's upgrade_cluster does, with a backup first: ovsdb-client backup
// writes the current contents as a standalone database file. Conversion
// keeps every row and is replicated to all members through the leader. An
// installed schema older than the database's (this member's OVN is behind
// the cluster's in a rolling upgrade) is left alone with a warning.
func (db *database) upgrade(ctx context.Context) error {
	want, err := schemaFileVersion(db.schemaFile)
	if err != nil {
		return err
	}
	have, err := serverSchemaVersion(ctx, db.sock, db.schemaName)
	if err != nil {
		return fmt.Errorf("reading the schema version %s runs: %w", db.schemaName, err)
	}
	switch cmp := ovsdbconn.CompareVersions(have, want); {
	case cmp == 0:
		return nil
	case cmp > 0:
		db.c.log.Warn("the cluster runs a newer schema than this member's OVN; not converting (upgrade OVN here)", "db", db.schemaName, "cluster", have, "installed", want)
		return nil
	}
	db.c.health.Waiting(db.child.Name(), fmt.Sprintf("%s to convert from schema %s to %s", db.schemaName, have, want))
	backup := fmt.Sprintf("%s.backup-%s-%s", db.file, have, time.Now().UTC().Format("20060102T150405Z"))
	if err := db.client(ctx, backup, "backup", "unix:"+db.sock, db.schemaName); err != nil {
		return fmt.Errorf("backing up %s before converting it from %s to %s: %w", db.schemaName, have, want, err)
	}
	if err := db.client(ctx, "", "convert", "unix:"+db.sock, db.schemaFile); err != nil {
		// Another member may have converted it meanwhile.
		if now, verr := serverSchemaVersion(ctx, db.sock, db.schemaName); verr == nil && ovsdbconn.CompareVersions(now, want) == 0 {
			return nil
		}
		return fmt.Errorf("converting %s from schema %s to %s (backup kept at %s): %w", db.schemaName, have, want, backup, err)
	}
	db.c.log.Info("converted the clustered database to the installed schema", "db", db.schemaName, "from", have, "to", want, "backup", backup)
	return nil
}

// client runs ovsdb-client; out, when set, receives its standard output.
func (db *database) client(ctx context.Context, out string, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, db.c.bins["ovsdb-client"], append([]string{"--timeout=60"}, args...)...)
	var f *os.File
	if out != "" {
		var err error
		f, err = os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			return err
		}
		cmd.Stdout = f
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		if out != "" {
			_ = os.Remove(out)
		}
		return fmt.Errorf("ovsdb-client %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// serverSchemaVersion asks the server for the database's schema
// (get_schema over its unix socket) and returns its version.
func serverSchemaVersion(ctx context.Context, sock, name string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := map[string]any{"method": "get_schema", "params": []string{name}, "id": 1}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return "", err
	}
	dec := json.NewDecoder(bufio.NewReader(conn))
	for {
		var resp struct {
			ID     any             `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := dec.Decode(&resp); err != nil {
			return "", err
		}
		if resp.Method != "" {
			continue // an echo or notification, not our reply
		}
		if len(resp.Error) > 0 && string(resp.Error) != "null" {
			return "", fmt.Errorf("get_schema %s: %s", name, resp.Error)
		}
		var s struct {
			Version string `json:"version"`
		}
		if err := json.Unmarshal(resp.Result, &s); err != nil || s.Version == "" {
			return "", fmt.Errorf("get_schema %s: no version in the reply", name)
		}
		return s.Version, nil
	}
}

// schemaFileVersion reads "version" from an .ovsschema file.
func schemaFileVersion(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the installed schema: %w; set --ovn-schema-dir to the directory of ovn-nb.ovsschema and ovn-sb.ovsschema", err)
	}
	var s struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Version == "" {
		return "", fmt.Errorf("%s: not an OVSDB schema", path)
	}
	return s.Version, nil
}
