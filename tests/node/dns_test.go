package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// startDNS runs a real DNS server (Debian's dnsmasq, package dnsmasq-base)
// in network namespace ns on port (UDP and TCP), answering the records
// "name=addr[,addr]" and nothing else (no upstream, no hosts file), and
// waits until it answers a query for the first. It is killed at cleanup.
func startDNS(t *testing.T, ns string, port int, records ...string) {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		bin = "/usr/sbin/dnsmasq"
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("dnsmasq is not installed (Debian package dnsmasq-base, in the Makefile's DEB_PKGS; run make deps): %v", err)
		}
	}
	args := []string{"netns", "exec", ns, bin, "--keep-in-foreground", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
		"--user=root", "--pid-file=", "--log-facility=-", "--log-queries", fmt.Sprintf("--port=%d", port)}
	for _, r := range records {
		name, addrs, _ := strings.Cut(r, "=")
		args = append(args, "--host-record="+name+","+addrs)
	}
	cmd := exec.Command("ip", args...)
	// A file, not a buffer: exec copies into a buffer from a goroutine
	// while a failure here reads it.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "dnsmasq.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	output := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Ready when it answers (it binds before it reads records; a query
	// is the only proof it serves them).
	first, _, _ := strings.Cut(records[0], "=")
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("dnsmasq in %s exited: %v\n%s", ns, err, output())
		default:
		}
		if _, err := resolveIn(ns, net.JoinHostPort("::1", fmt.Sprint(port)), "udp", first, 500*time.Millisecond); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq in %s did not answer for %s on port %d within 10s\n%s", ns, first, port, output())
		}
	}
}

// resolveIn asks server ("addr:port") from network namespace ns for
// name's addresses, over network ("udp" or "tcp": Go's resolver speaks DNS
// over TCP when the connection it is given is not a packet connection).
func resolveIn(ns, server, network, name string, timeout time.Duration) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (c net.Conn, err error) {
		err = netns.Do(ns, func() error { c, err = net.DialTimeout(network, server, timeout); return err })
		return c, err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return r.LookupHost(ctx, name)
}
