package cniconf

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// NADs of Kube-OVN say "type": "kube-ovn": the installer links that name to
// ovnhost-cni (it runs the same plugin), puts the link back when it is
// removed, and leaves a kube-ovn that is not its own (Kube-OVN's plugin)
// alone, saying what to do.
func TestKubeOVNNameIsALinkToThePlugin(t *testing.T) {
	in := newTestInstaller(t, "0.4.0")
	if err := in.installAll(); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(in.binDir, KubeOVNType)
	if target, err := os.Readlink(alias); err != nil || target != PluginType || !IsOurAlias(alias) {
		t.Fatalf("%s: link to %q (%v), want %s", alias, target, err, PluginType)
	}
	if a, b := mustRead(t, alias), mustRead(t, filepath.Join(in.binDir, PluginType)); !bytes.Equal(a, b) {
		t.Fatal("kube-ovn does not run the installed plugin")
	}

	// Removed while the daemon runs: put back.
	w, err := in.startWatch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.watch(ctx, w); close(done) }()
	defer func() { cancel(); <-done }()
	seen, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	if err := seen.Add(in.binDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(alias); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for !IsOurAlias(alias) {
		select {
		case <-seen.Events:
		case err := <-seen.Errors:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("%s removed: not put back within 10 s", alias)
		}
	}

	// Kube-OVN's own plugin there: left as it is, with a warning.
	var logs bytes.Buffer
	other := newTestInstaller(t, "0.4.0")
	other.log = slog.New(slog.NewTextHandler(&logs, nil))
	foreign := filepath.Join(other.binDir, KubeOVNType)
	if err := os.MkdirAll(other.binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(foreign, []byte("kube-ovn's plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := other.installAll(); err != nil {
		t.Fatal(err)
	}
	if got := string(mustRead(t, foreign)); got != "kube-ovn's plugin" || IsOurAlias(foreign) {
		t.Fatalf("a foreign kube-ovn was replaced: %q", got)
	}
	if !strings.Contains(logs.String(), "not ovnhost's") || !strings.Contains(logs.String(), "ovnhost-cni") {
		t.Fatalf("no warning naming the fix: %s", logs.String())
	}
}
