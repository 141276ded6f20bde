package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// schemaVersion reads "version" from an .ovsschema file.
func schemaVersion(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var s struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Version == "" {
		return "", fmt.Errorf("%s: not an OVSDB schema (%v)", path, err)
	}
	return s.Version, nil
}

// dbVersion reads the schema version a standalone database file was made
// with: its first record ("OVSDB JSON <length> <hash>" then the schema).
func dbVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	header, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: reading header: %w", path, err)
	}
	fields := strings.Fields(header)
	if len(fields) != 4 || fields[0] != "OVSDB" {
		return "", fmt.Errorf("%s: not an OVSDB database file", path)
	}
	if fields[1] != "JSON" {
		return "", fmt.Errorf("%s: a %s database; only standalone databases are managed here", path, fields[1])
	}
	n, err := strconv.Atoi(fields[2])
	if err != nil || n <= 0 || n > 64<<20 {
		return "", fmt.Errorf("%s: bad record length %q", path, fields[2])
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", fmt.Errorf("%s: reading schema record: %w", path, err)
	}
	var s struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(buf, &s); err != nil {
		return "", fmt.Errorf("%s: schema record: %w", path, err)
	}
	return s.Version, nil
}

// ensureDB creates db from schema when missing, and converts it in place,
// keeping its rows, when the installed schema's version differs (ovs-ctl's
// upgrade_db). A backup named after the old version is kept.
func ensureDB(ctx context.Context, tool, db, schema string, log *slog.Logger) error {
	want, err := schemaVersion(schema)
	if err != nil {
		return err
	}
	have, err := dbVersion(db)
	if errors.Is(err, os.ErrNotExist) {
		if err := runTool(ctx, tool, "create", db, schema); err != nil {
			return err
		}
		log.Info("created database", "db", db, "schema_version", want)
		return nil
	}
	if err != nil {
		return err
	}
	if ovsdbconn.CompareVersions(have, want) == 0 {
		return nil
	}
	backup := fmt.Sprintf("%s.backup%s-%s", db, have, randHex(4))
	if err := copyFile(db, backup); err != nil {
		return fmt.Errorf("backing up %s before converting it: %w", db, err)
	}
	if err := runTool(ctx, tool, "convert", db, schema); err != nil {
		return fmt.Errorf("converting %s from schema %s to %s (backup kept at %s): %w", db, have, want, backup, err)
	}
	log.Info("converted database to the installed schema", "db", db, "from", have, "to", want, "backup", backup)
	return nil
}

func runTool(ctx context.Context, tool string, args ...string) error {
	out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// loadSystemID returns the node's chassis name: the one kept in file, else
// existing (adopted from a conf.db that ovs-ctl set up), else a new UUID.
// It is written back atomically so it survives restarts and never empties.
func loadSystemID(file, existing string) (string, bool, error) {
	raw, err := os.ReadFile(file)
	if err == nil {
		if id := strings.TrimSpace(string(raw)); id != "" {
			return id, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("reading system-id from %s: %w", file, err)
	}
	id := strings.TrimSpace(existing)
	if id == "" {
		id = newUUID()
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", false, fmt.Errorf("saving system-id: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", false, fmt.Errorf("saving system-id: %w", err)
	}
	return id, true, nil
}
