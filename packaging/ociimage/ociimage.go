// Package ociimage builds OCI images from directory trees without a container
// engine (github.com/google/go-containerregistry) and writes them as OCI
// archives (an OCI image layout in a tar file, what `skopeo copy
// oci-archive:FILE ...`, `podman load` and `ctr images import` read).
//
// Every file in a layer is owned by root (uid/gid 0), carries a fixed
// modification time (SOURCE_DATE_EPOCH or the Unix epoch) so builds are
// reproducible, and loses group and world write bits.
package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry places a host directory tree, or one file with given content, at a
// path inside the layer.
type Entry struct {
	// Dir is a host directory copied recursively under Path.
	Dir string
	// Data is the content of a single file at Path (when Dir is empty).
	Data []byte
	// Mode of the Data file.
	Mode fs.FileMode
	// Path inside the image, e.g. "/" or "/rootfs/usr/local/lib/containers/ovnhost".
	Path string
	// LinkTo, with Dir, packs Dir's regular files as hard links to the
	// same files packed earlier under LinkTo: a second copy of a tree at
	// no extra size (a second Talos service's root file system).
	LinkTo string
}

// BuildTime is the modification time of every file: SOURCE_DATE_EPOCH when
// set (reproducible builds), else the Unix epoch.
func BuildTime() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}

type tarWriter struct {
	tw    *tar.Writer
	mtime time.Time
	dirs  map[string]bool
}

func (w *tarWriter) header(name string, typ byte, mode int64, size int64, link string) error {
	h := &tar.Header{
		Typeflag: typ, Name: name, Linkname: link, Size: size,
		Mode: mode &^ 0o022, Uid: 0, Gid: 0, Uname: "root", Gname: "root",
		ModTime: w.mtime, Format: tar.FormatPAX,
	}
	return w.tw.WriteHeader(h)
}

// parents writes a directory entry for every missing parent of name.
func (w *tarWriter) parents(name string) error {
	dir := filepath.Dir(strings.TrimSuffix(name, "/"))
	if dir == "." || dir == "/" || dir == "" {
		return nil
	}
	if w.dirs[dir] {
		return nil
	}
	if err := w.parents(dir); err != nil {
		return err
	}
	w.dirs[dir] = true
	return w.header(dir+"/", tar.TypeDir, 0o755, 0, "")
}

func (w *tarWriter) addDir(hostDir, prefix string) error { return w.addTree(hostDir, prefix, "") }

// addTree packs hostDir under prefix; with linkTo, regular files are hard
// links to their twins under linkTo.
func (w *tarWriter) addTree(hostDir, prefix, linkTo string) error {
	return filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(hostDir, p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(filepath.Join(prefix, rel), "/")
		if name == "" || name == "." {
			return nil
		}
		if err := w.parents(name); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if w.dirs[name] {
				return nil
			}
			w.dirs[name] = true
			return w.header(name+"/", tar.TypeDir, int64(fi.Mode().Perm()), 0, "")
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return w.header(name, tar.TypeSymlink, 0o777, 0, target)
		case fi.Mode().IsRegular() && linkTo != "":
			return w.header(name, tar.TypeLink, int64(fi.Mode().Perm()), 0, strings.TrimPrefix(filepath.Join(linkTo, rel), "/"))
		case fi.Mode().IsRegular():
			if err := w.header(name, tar.TypeReg, int64(fi.Mode().Perm()), fi.Size(), ""); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(w.tw, f)
			return err
		default:
			return fmt.Errorf("ociimage: %s: special files are not packed", p)
		}
	})
}

// WriteLayerTar writes the entries as one uncompressed tar stream.
func WriteLayerTar(out io.Writer, entries []Entry) error {
	w := &tarWriter{tw: tar.NewWriter(out), mtime: BuildTime(), dirs: map[string]bool{}}
	for _, e := range entries {
		if e.Dir != "" {
			if err := w.addTree(e.Dir, e.Path, e.LinkTo); err != nil {
				return err
			}
			continue
		}
		name := strings.TrimPrefix(e.Path, "/")
		if err := w.parents(name); err != nil {
			return err
		}
		if err := w.header(name, tar.TypeReg, int64(e.Mode.Perm()), int64(len(e.Data)), ""); err != nil {
			return err
		}
		if _, err := w.tw.Write(e.Data); err != nil {
			return err
		}
	}
	return w.tw.Close()
}

// Layer writes the entries to a tar file in tmpDir and returns it as a layer
// (gzip-compressed when written out). The caller removes tmpDir.
func Layer(tmpDir string, entries []Entry) (v1.Layer, error) {
	f, err := os.CreateTemp(tmpDir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	if err := WriteLayerTar(f, entries); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(f.Name(), tarball.WithMediaType(types.OCILayer))
}

// Config is the image configuration that matters here.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
}

// Image is a single-layer OCI image for linux/amd64 (or the given arch).
func Image(layer v1.Layer, cfg Config, arch string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		CreatedBy: "ovnhost packaging (go-containerregistry)", Created: v1.Time{Time: BuildTime()},
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: BuildTime()}
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Cmd = cfg.Cmd
	cf.Config.Env = cfg.Env
	cf.Config.Labels = cfg.Labels
	cf.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cf)
}

// WriteOCIArchive writes img, named ref (org.opencontainers.image.ref.name),
// as an OCI image layout packed in a tar file at path.
func WriteOCIArchive(path string, img v1.Image, ref string) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	var names []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err == nil {
		sort.Strings(names)
		for _, p := range names {
			rel, _ := filepath.Rel(dir, p)
			fi, err2 := os.Stat(p)
			if err2 != nil {
				err = err2
				break
			}
			h := &tar.Header{Name: rel, Mode: 0o644, ModTime: BuildTime(), Uname: "root", Gname: "root", Format: tar.FormatPAX}
			if fi.IsDir() {
				h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
			} else {
				h.Typeflag, h.Size = tar.TypeReg, fi.Size()
			}
			if err = tw.WriteHeader(h); err != nil {
				break
			}
			if !fi.IsDir() {
				var in *os.File
				if in, err = os.Open(p); err != nil {
					break
				}
				_, err = io.Copy(tw, in)
				in.Close()
				if err != nil {
					break
				}
			}
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// ReadOCIArchive unpacks an archive written by WriteOCIArchive into dir and
// returns its only image (for tests and for inspection).
func ReadOCIArchive(path, dir string) (v1.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		dst := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			out, err := os.Create(dst)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("ociimage: unexpected entry %s in an OCI layout", h.Name)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	man, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(man.Manifests) != 1 {
		return nil, fmt.Errorf("ociimage: %s holds %d manifests, want 1", path, len(man.Manifests))
	}
	return idx.Image(man.Manifests[0].Digest)
}
