package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The filesystem under conf.db fills up (issue 14, chaos; an 8 MiB tmpfs
// stands in for the disk): the node turns not ready naming the directory
// and what it needs, nothing is restarted and the pods keep their traffic;
// once space is freed it is ready again and a new pod is wired.
func TestConfDBDiskFullIsReportedAndRecovered(t *testing.T) {
	n := newNode(t)
	dbDir := n.Path("ovs-db")
	if err := os.MkdirAll(dbDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dbDir, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatalf("tmpfs on %s: %v", dbDir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dbDir, unix.MNT_DETACH) })
	n.Start("--child-probe-interval=1s")
	pods := []pod{
		{hostIf: "veth-d1", lsp: "d1.default", mac: "0a:58:0a:10:00:31", ip: "10.16.0.31"},
		{hostIf: "veth-d2", lsp: "d2.default", mac: "0a:58:0a:10:00:32", ip: "10.16.0.32"},
		{hostIf: "veth-d3", lsp: "d3.default", mac: "0a:58:0a:10:00:33", ip: "10.16.0.33"},
	}
	createSwitch(t, "unix:"+n.Path("ovn-run", "ovnnb_db.sock"), pods)
	plugPods(t, "unix:"+n.Path("ovs-run", "db.sock"), n.NS, n.LogTail, pods[:2])
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatal(err)
	}
	dbPid := n.ReadPid(n.Path("ovs-run", "ovsdb-server.pid"))

	mark := n.Notify.Mark()
	filler := filepath.Join(dbDir, "filler")
	fillUp(t, filler)
	if _, err := n.Notify.WaitFor(mark, "STATUS=ovsdb-server is not ready; waiting for free space under "+dbDir, 15*time.Second, n.Exited()); err != nil {
		t.Fatalf("conf.db's filesystem full: %v\n%s", err, n.LogTail())
	}
	code, body, err := n.HTTPGet("/readyz")
	if err != nil || code == 200 || !strings.Contains(body, "free space under "+dbDir) {
		t.Errorf("/readyz with conf.db's filesystem full: %d %v %q, want 503 naming %s", code, err, body, dbDir)
	}
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Errorf("pods while the disk is full: %v", err)
	}

	mark = n.Notify.Mark()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "STATUS=ready", 15*time.Second, n.Exited()); err != nil {
		t.Fatalf("space freed: %v\n%s", err, n.LogTail())
	}
	if now := n.ReadPid(n.Path("ovs-run", "ovsdb-server.pid")); now != dbPid {
		t.Errorf("ovsdb-server was restarted (pid %d, before %d): a full disk is not a reason to", now, dbPid)
	}
	plugPods(t, "unix:"+n.Path("ovs-run", "db.sock"), n.NS, n.LogTail, pods[2:])
	if err := ping(pods[2].ns, pods[0].ip, 3); err != nil {
		t.Fatalf("a pod wired after the disk was freed: %v", err)
	}
}

// fillUp writes path until its filesystem has no space left.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("filling %s: %v", path, err)
		}
	}
}
