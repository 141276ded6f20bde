// Command ovnhost-package builds the release artefacts from the programs of
// `make build` (the Makefile's package targets call it):
//
//	ovnhost-package bundle          --bin bin --out _out/bundle
//	ovnhost-package image           --bin bin --out _out/ovnhost-image.tar
//	ovnhost-package talos-extension --bin bin --out _out/ovnhost-talos-extension.tar
//	ovnhost-package rpm             --bin bin --out _out
//
// image and talos-extension build the bundle in a temporary directory unless
// --bundle names one already built.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ovnhost/ovnhost/packaging/build"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ovnhost-package bundle|image|talos-extension|rpm --bin DIR --out PATH [--bundle DIR] [--ref NAME] [--version V]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	bin := fs.String("bin", filepath.Join(build.RepoRoot(), "bin"), "directory with the programs of `make build`")
	out := fs.String("out", "", "output file or directory")
	bundleDir := fs.String("bundle", "", "an already built bundle (image, talos-extension)")
	version := fs.String("version", build.Version(), "product version")
	ref := fs.String("ref", "", "image name stored in the archive (default ovnhost:<version> or ovnhost-talos-extension:<version>)")
	_ = fs.Parse(os.Args[2:])
	if *out == "" {
		usage()
	}
	if err := run(cmd, *bin, *out, *bundleDir, *version, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "ovnhost-package:", err)
		os.Exit(1)
	}
}

func run(cmd, bin, out, bundleDir, version, ref string) error {
	withBundle := func(f func(dir string) error) error {
		if bundleDir != "" {
			return f(bundleDir)
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		tmp, err := os.MkdirTemp(filepath.Dir(out), ".bundle-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if _, err := build.Bundle(bin, tmp, version); err != nil {
			return err
		}
		return f(tmp)
	}
	switch cmd {
	case "bundle":
		if err := os.RemoveAll(out); err != nil {
			return err
		}
		m, err := build.Bundle(bin, out, version)
		if err != nil {
			return err
		}
		fmt.Printf("bundle %s: %d programs, %d libraries\n", out, len(m.Programs), len(m.Libraries))
	case "image":
		if ref == "" {
			ref = "ovnhost:" + build.Tag(version)
		}
		if err := withBundle(func(dir string) error { return build.Image(dir, out, ref, version) }); err != nil {
			return err
		}
		fmt.Printf("image %s (%s)\n", out, ref)
	case "talos-extension":
		if ref == "" {
			ref = "ovnhost-talos-extension:" + build.Tag(version)
		}
		if err := withBundle(func(dir string) error { return build.TalosExtension(dir, out, ref, version) }); err != nil {
			return err
		}
		fmt.Printf("Talos extension %s (%s)\n", out, ref)
	case "rpm":
		p, err := build.RPM(bin, out, version)
		if err != nil {
			return err
		}
		fmt.Println("rpm", p)
	default:
		usage()
	}
	return nil
}
