package node

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

func TestDBVersionReadsTheSchemaRecord(t *testing.T) {
	schema := `{"name":"Open_vSwitch","version":"8.3.0","tables":{}}`
	p := filepath.Join(t.TempDir(), "conf.db")
	content := "OVSDB JSON " + itoa(len(schema)) + " 0123456789abcdef0123456789abcdef01234567\n" + schema + "\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := dbVersion(p)
	if err != nil || v != "8.3.0" {
		t.Fatalf("dbVersion = %q, %v", v, err)
	}
	if err := os.WriteFile(p, []byte("OVSDB CLUSTER 10 abc\n0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dbVersion(p); err == nil {
		t.Fatal("a clustered database was accepted as standalone")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSystemIDIsStableAndNeverEmpty(t *testing.T) {
	f := filepath.Join(t.TempDir(), "system-id.conf")
	id, created, err := loadSystemID(f, "")
	if err != nil || !created {
		t.Fatalf("first load: %q created=%v err=%v", id, created, err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("generated system-id %q is not a v4 UUID", id)
	}
	again, created, err := loadSystemID(f, "something-else")
	if err != nil || created || again != id {
		t.Fatalf("second load = %q created=%v err=%v, want %q kept", again, created, err, id)
	}
	// An empty file (a crash mid-write by another tool) is regenerated, adopting conf.db's id.
	if err := os.WriteFile(f, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	adopted, _, err := loadSystemID(f, "chassis-7")
	if err != nil || adopted != "chassis-7" {
		t.Fatalf("adopt = %q, %v", adopted, err)
	}
}
