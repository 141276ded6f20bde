package ociimage

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestRoundTrip writes a layer from a directory owned by whoever runs the
// test, with a group-writable file and a symlink, and reads it back from
// the OCI archive: root-owned, write bits for group/others cleared, fixed
// times, parents present, the image named.
func TestRoundTrip(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "usr/bin"), 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "usr/bin/tool"), []byte("x"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(src, "bin")); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	layer, err := Layer(out, []Entry{{Dir: src, Path: "/rootfs/x"}, {Path: "/manifest.yaml", Data: []byte("m"), Mode: 0o644}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(layer, Config{Entrypoint: []string{"/usr/bin/tool"}}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(out, "img.tar")
	if err := WriteOCIArchive(archive, img, "test:1"); err != nil {
		t.Fatal(err)
	}
	back, err := ReadOCIArchive(archive, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := back.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers %v %v", ls, err)
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "root" {
			t.Errorf("%s owned by %d:%d %s", h.Name, h.Uid, h.Gid, h.Uname)
		}
		if h.Typeflag != tar.TypeSymlink && h.Mode&0o022 != 0 {
			t.Errorf("%s mode %o keeps group/other write", h.Name, h.Mode)
		}
		if h.ModTime.Unix() != 1700000000 {
			t.Errorf("%s mtime %v", h.Name, h.ModTime)
		}
	}
	for _, n := range []string{"rootfs/", "rootfs/x/", "rootfs/x/usr/bin/", "rootfs/x/usr/bin/tool", "rootfs/x/bin", "manifest.yaml"} {
		if seen[n] == nil {
			t.Errorf("layer lacks %s", n)
		}
	}
	if h := seen["rootfs/x/bin"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin") {
		t.Errorf("symlink entry %+v", h)
	}
	if h := seen["rootfs/x/usr/bin/tool"]; h != nil && h.Mode != 0o755 {
		t.Errorf("tool mode %o, want 755", h.Mode)
	}
	cf, err := back.ConfigFile()
	if err != nil || cf.Config.Entrypoint[0] != "/usr/bin/tool" || cf.Architecture != "amd64" {
		t.Errorf("config %+v %v", cf, err)
	}
}
