package health

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Under systemd, stderr goes to journald, which reads a "<N>" prefix on each
// line as its syslog priority: errors are then err (3), warnings warning
// (4), info info (6), debug debug (7), so `journalctl -p warning -u
// ovnhost` shows what matters. systemd announces the stream in
// JOURNAL_STREAM (device:inode of the journal socket).

// UnderJournal reports whether f is the stream JOURNAL_STREAM names.
func UnderJournal(f *os.File, journalStream string) bool {
	if journalStream == "" {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(journalStream, "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// JournalPriority is the syslog priority of a log level.
func JournalPriority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// prefixWriter puts the pending record's priority before each line.
type prefixWriter struct {
	mu   sync.Mutex
	w    io.Writer
	prio int
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprintf(&sb, "<%d>%s", p.prio, line)
		}
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// JournalHandler wraps the handler that newInner makes (writing to the
// given writer) so that each record carries its journald priority.
func JournalHandler(w io.Writer, newInner func(io.Writer) slog.Handler) slog.Handler {
	pw := &prefixWriter{w: w, prio: 6}
	return journalHandler{inner: newInner(pw), pw: pw}
}

type journalHandler struct {
	inner slog.Handler
	pw    *prefixWriter
}

func (h journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.prio = JournalPriority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h journalHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return journalHandler{inner: h.inner.WithAttrs(a), pw: h.pw}
}

func (h journalHandler) WithGroup(g string) slog.Handler {
	return journalHandler{inner: h.inner.WithGroup(g), pw: h.pw}
}
