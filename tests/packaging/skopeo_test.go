package packaging

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestArchivesReadBySkopeo hands both OCI archives to skopeo (the
// containers/image library that podman and CRI-O use): it copies every blob,
// checking each digest, and reports the platform. A corrupted layer must
// make the copy fail.
func TestArchivesReadBySkopeo(t *testing.T) {
	testenv.RequireCommands(t, "skopeo")
	for _, archive := range []string{imageFile(t), talosFile(t)} {
		name := filepath.Base(archive)
		out, err := exec.Command("skopeo", "inspect", "oci-archive:"+archive).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo inspect %s: %v\n%s", name, err, out)
		}
		var info struct{ Architecture, Os string }
		if err := json.Unmarshal(out, &info); err != nil || info.Os != "linux" || info.Architecture == "" {
			t.Errorf("skopeo inspect %s: %s %v", name, out, err)
		}
		if out, err := exec.Command("skopeo", "copy", "--quiet", "oci-archive:"+archive, "dir:"+t.TempDir()).CombinedOutput(); err != nil {
			t.Errorf("skopeo copy %s: %v\n%s", name, err, out)
		}
	}
	bad := corruptLargestBlob(t, imageFile(t))
	if out, err := exec.Command("skopeo", "copy", "--quiet", "oci-archive:"+bad, "dir:"+t.TempDir()).CombinedOutput(); err == nil {
		t.Errorf("skopeo copied an archive with a corrupted layer:\n%s", out)
	} else if !strings.Contains(strings.ToLower(string(out)), "digest") {
		t.Logf("skopeo refused the corrupted archive: %s", out)
	}
}

// corruptLargestBlob copies the archive with one byte of its largest blob
// (the layer) changed.
func corruptLargestBlob(t *testing.T, archive string) string {
	t.Helper()
	in, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var largest string
	var size int64
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Size > size {
			largest, size = h.Name, h.Size
		}
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(t.TempDir(), "corrupt.tar")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	tr = tar.NewReader(in)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == largest {
			data[len(data)/2] ^= 0xff
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return outPath
}
