package qemuvm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// cpioWriter writes the "newc" format the kernel unpacks into its rootfs.
// Uncompressed: under emulation the guest decompresses slowly.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

func (c *cpioWriter) header(name string, mode uint32, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	// 110-byte header of 8-hex-digit fields, then the NUL-terminated name,
	// each padded to 4 bytes.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, hdr+name+"\x00")
	c.pad(len(hdr) + len(name) + 1)
}

func (c *cpioWriter) pad(n int) {
	if c.err != nil {
		return
	}
	if r := n % 4; r != 0 {
		_, c.err = c.w.Write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string) { c.header(name, 0o040755, 0) }

func (c *cpioWriter) file(name string, mode uint32, data []byte) {
	c.header(name, 0o100000|mode, len(data))
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	c.pad(len(data))
}

func (c *cpioWriter) symlink(name, target string) {
	c.header(name, 0o120777, len(target))
	if c.err == nil {
		_, c.err = io.WriteString(c.w, target)
	}
	c.pad(len(target))
}

func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 0)
	return c.err
}

// initramfs is what goes into the VM's initrd.
type initramfs struct {
	busybox string   // host path of a static busybox
	agent   []byte   // the vmagent binary
	modules []string // .ko files in load order (host paths)
	init    string   // the /init script
}

func (r *initramfs) build() ([]byte, error) {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	for _, d := range []string{"bin", "dev", "proc", "sys", "lower", "rw", "newroot", "modules"} {
		c.dir(d)
	}
	bb, err := os.ReadFile(r.busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox for the initramfs: %w (Debian package busybox-static)", err)
	}
	c.file("bin/busybox", 0o755, bb)
	c.symlink("bin/sh", "busybox")
	c.file("vmagent", 0o755, r.agent)
	var order []string
	for i, m := range r.modules {
		data, err := os.ReadFile(m)
		if err != nil {
			return nil, fmt.Errorf("module for the initramfs: %w", err)
		}
		name := fmt.Sprintf("%02d-%s", i, path.Base(m))
		c.file("modules/"+name, 0o644, data)
		order = append(order, name)
	}
	c.file("modules/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	c.file("init", 0o755, []byte(r.init))
	if err := c.close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
