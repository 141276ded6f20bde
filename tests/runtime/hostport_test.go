package runtime_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// Addresses of the link between the node and "another host" (a second
// network namespace on a veth), and the pod's hostPort.
const (
	hpNodeAddr  = "192.168.251.1"
	hpOtherAddr = "192.168.251.2"
	hpHostPort  = "8080"
)

// TestContainerdCRIHostPort: the conflist chains portmap after ovnhost-cni;
// a pod sandbox with port_mappings [{TCP, 80 -> hostPort 8080}] running
// busybox httpd on port 80 is reached from another host (and from the node
// itself) at the node's address on port 8080; rmp removes portmap's rules.
func TestContainerdCRIHostPort(t *testing.T) {
	e := newEnv(t)
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	e.StartNode()

	// --- the installed conflist chains portmap after ovnhost-cni
	confs, _ := filepath.Glob(e.Path("cni-conf", "*.conflist"))
	raw, err := os.ReadFile(confs[0])
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0]["type"] != "ovnhost-cni" || conf.Plugins[1]["type"] != "portmap" {
		t.Fatalf("conflist does not chain portmap after ovnhost-cni:\n%s\n%s", raw, e.Tail("ovnhost.log", 20))
	}
	t.Logf("conflist %s: %s", filepath.Base(confs[0]), strings.Join(strings.Fields(string(raw)), " "))

	// --- another host: a namespace on a veth to the node
	other := e.NS + "h"
	run(t, "ip", "netns", "add", other)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", other).Run() })
	run(t, "ip", "-n", other, "link", "set", "lo", "up")
	run(t, "ip", "link", "add", "ohhp0", "netns", e.NS, "type", "veth", "peer", "name", "eth0", "netns", other)
	run(t, "ip", "-n", e.NS, "addr", "add", hpNodeAddr+"/24", "dev", "ohhp0")
	run(t, "ip", "-n", e.NS, "link", "set", "ohhp0", "up")
	run(t, "ip", "-n", other, "addr", "add", hpOtherAddr+"/24", "dev", "eth0")
	run(t, "ip", "-n", other, "link", "set", "eth0", "up")
	// A Kubernetes node forwards; this namespace is a fresh one.
	run(t, "ip", "netns", "exec", e.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	e.StartContainerd()
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)

	// --- the pod, with a hostPort
	p := e.RunPodWith("web", map[string]any{
		"port_mappings": []map[string]any{{"protocol": 0 /* TCP */, "container_port": 80, "host_port": 8080}},
	}, "sh", "-c", "echo hello-from-hostport > /www/index.html && exec httpd -f -p 80 -h /www")
	t.Logf("pod %s: %s", p.Name, p.IP)
	// httpd is up inside the pod before we go through the node.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := e.Exec(p, "sh", "-c", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 127.0.0.1 80")
		if err == nil && strings.Contains(out, "hello-from-hostport") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("httpd in the pod does not answer on port 80: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	nat := e.natRules()
	if !strings.Contains(nat, p.ID) || !strings.Contains(nat, "--dport "+hpHostPort) {
		t.Fatalf("no portmap DNAT rule for the pod (%s) in the node's nat table:\n%s", p.ID, nat)
	}

	// --- from another host to the node's address (PREROUTING DNAT)
	addr := net.JoinHostPort(hpNodeAddr, hpHostPort)
	get := func(ns, from string) {
		t.Helper()
		out, err := httpGetInNetns(ns, addr, 5*time.Second)
		if err != nil || !strings.Contains(out, "hello-from-hostport") {
			t.Fatalf("GET http://%s/ from %s: %v\n%s\nnat table:\n%s\n%s", addr, from, err, out, e.natRules(), e.Tail("ovnhost.log", 20))
		}
	}
	get(other, "another host")
	// --- from the node itself (OUTPUT DNAT)
	get(e.NS, "the node")

	// --- rmp: portmap's rules for the pod are gone (portmap DEL)
	e.CRI("stopp", p.ID)
	e.CRI("rmp", p.ID)
	nat = e.natRules()
	if strings.Contains(nat, p.ID) || strings.Contains(nat, "--dport "+hpHostPort) || strings.Contains(nat, "CNI-DN-") {
		t.Fatalf("portmap rules left for the pod after rmp:\n%s", nat)
	}
	if out, err := httpGetInNetns(other, addr, 3*time.Second); err == nil {
		t.Fatalf("hostPort still answers after rmp:\n%s", out)
	}
	if l, ports := e.PodIfaces(); len(l) != 0 || len(ports) != 0 {
		t.Fatalf("after rmp: veths %v and OVS ports %v left", l, ports)
	}

	e.TeardownAndCheck(t)
}

// httpGetInNetns sends GET / over TCP to addr from the named network
// namespace (the socket is created there; Go's own client, because the
// host's static busybox crashes in glibc's NSS) and returns the response.
func httpGetInNetns(ns, addr string, timeout time.Duration) (string, error) {
	var conn net.Conn
	err := func() error {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			return err
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			goruntime.UnlockOSThread()
			return err
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			return err
		}
		conn, err = net.DialTimeout("tcp", addr, timeout)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread() // else the thread dies with the goroutine's end
		}
		return err
	}()
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// natRules is the node namespace's iptables nat table (portmap's backend).
func (e *env) natRules() string {
	return run(e.t, "ip", "netns", "exec", e.NS, "iptables-save", "-t", "nat")
}
