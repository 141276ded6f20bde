package main_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The plugin binary as kubelet runs it: environment, stdin, stdout, exit code.

func build(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ovnhost-cni")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	return out
}

type cniErr struct {
	Code uint   `json:"code"`
	Msg  string `json:"msg"`
}

func run(t *testing.T, bin string, env []string, stdin string) (int, []byte) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.Bytes()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.Bytes()
}

func TestNoKubernetesClientLinked(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.Contains(p, "libovsdb") || strings.Contains(p, "vishvananda/netlink") {
			t.Errorf("the plugin depends on %s: it must stay a thin forwarder", p)
		}
	}
}

func TestPlugin(t *testing.T) {
	bin := build(t)
	if st, _ := os.Stat(bin); st.Size() > 20<<20 {
		t.Fatalf("plugin is %d bytes: something heavy (client-go?) got linked in", st.Size())
	}
	code, out := run(t, bin, []string{"CNI_COMMAND=VERSION"}, `{"cniVersion":"1.1.0"}`)
	var v struct {
		Supported []string `json:"supportedVersions"`
	}
	if code != 0 || json.Unmarshal(out, &v) != nil || !strings.Contains(strings.Join(v.Supported, ","), "1.1.0") {
		t.Fatalf("VERSION: exit %d %s", code, out)
	}
	sock := filepath.Join(t.TempDir(), "absent.sock")
	netns := "/proc/self/ns/net"
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=" + netns, "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin"}
	code, out = run(t, bin, env, `{"cniVersion":"1.1.0","name":"ovnhost","type":"ovnhost-cni","socket":"`+sock+`"}`)
	var e cniErr
	_ = json.Unmarshal(out, &e)
	if code == 0 || e.Code != 11 || !strings.Contains(e.Msg, sock) || !strings.Contains(e.Msg, "try again later") {
		t.Fatalf("daemon down: exit %d %s", code, out)
	}
	code, out = run(t, bin, env, `{"cniVersion":"1.1.0","name":"ovnhost","type":"ovnhost-cni","socket":5}`)
	e = cniErr{}
	_ = json.Unmarshal(out, &e)
	if code == 0 || e.Code != 6 || !strings.Contains(e.Msg, "cannot parse the network configuration") {
		t.Fatalf("bad configuration: exit %d %s", code, out)
	}
}
