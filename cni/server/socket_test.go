package server

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

func TestSocketModeAndGroup(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		group string
		mode  os.FileMode
		gid   uint32
	}{{"", 0o600, 0}, {"4242", 0o660, 4242}} {
		sock := filepath.Join(t.TempDir(), "cni.sock")
		s := &Server{cfg: Config{Socket: sock, SocketGroup: c.group}, log: slog.Default()}
		if err := os.WriteFile(sock, []byte("stale"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := s.listen(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != c.mode || st.Mode()&os.ModeSocket == 0 || st.Sys().(*syscall.Stat_t).Gid != c.gid {
			t.Errorf("group %q: socket mode %v gid %d, want %v gid %d", c.group, st.Mode(), st.Sys().(*syscall.Stat_t).Gid, c.mode, c.gid)
		}
		s.http.Close()
		<-s.served
	}
}
