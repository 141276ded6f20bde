package health

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestJournalHandlerPrefixesPriorities(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(JournalHandler(&b, func(w io.Writer) slog.Handler {
		return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})
	})).With("child", "ovs-vswitchd")
	log.Error("e")
	log.Warn("w")
	log.Info("i")
	log.Debug("d")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{"<3>", "<4>", "<6>", "<7>"}
	if len(lines) != 4 {
		t.Fatalf("%q", lines)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, want[i]) || !strings.Contains(l, "child=ovs-vswitchd") {
			t.Errorf("line %d %q: want prefix %s and the attributes", i, l, want[i])
		}
	}
}

func TestUnderJournalMatchesTheStream(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "j")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	_ = syscall.Fstat(int(f.Fd()), &st)
	if !UnderJournal(f, fmtStream(uint64(st.Dev), st.Ino)) {
		t.Fatal("own device:inode not recognised")
	}
	if UnderJournal(f, fmtStream(uint64(st.Dev), st.Ino+1)) || UnderJournal(f, "") || UnderJournal(f, "x") {
		t.Fatal("another stream taken for the journal")
	}
}

func fmtStream(dev, ino uint64) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}
