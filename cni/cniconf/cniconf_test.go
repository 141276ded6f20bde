package cniconf

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const (
	ours    = `{"cniVersion":"1.0.0","name":"ovnhost","plugins":[{"type":"ovnhost-cni"},{"type":"portmap"}]}`
	flannel = `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{}},{"type":"portmap"}]}`
	bridge  = `{"cniVersion":"0.4.0","name":"mynet","type":"bridge"}`
	multus  = `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","clusterNetwork":"ovnhost"}`
)

func analyze(files map[string]string) *Report {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	return Analyze("/etc/cni/net.d", names, func(n string) ([]byte, error) {
		s, ok := files[n]
		if !ok {
			return nil, errors.New("gone")
		}
		return []byte(s), nil
	}, "")
}

func TestAnalyze(t *testing.T) {
	cases := []struct {
		name   string
		files  map[string]string
		status string
		found  []string
		fix    string
	}{
		{"only ours", map[string]string{Conflist: ours, "README": "x", "ovnhost.kubeconfig": "x"}, Pass, []string{"only CNI configuration"}, ""},
		{"missing, empty dir", map[string]string{}, Fail, []string{"missing", "no CNI configuration at all"}, "start ovnhost"},
		{"missing, flannel used", map[string]string{"10-flannel.conflist": flannel}, Fail, []string{"runtime uses 10-flannel.conflist (flannel+portmap, network cbr0) instead"}, "rm /etc/cni/net.d/10-flannel.conflist"},
		{"stale flannel after ours", map[string]string{Conflist: ours, "10-flannel.conflist": flannel}, Warn, []string{"10-flannel.conflist (flannel+portmap"}, "rm /etc/cni/net.d/10-flannel.conflist"},
		{"outranked", map[string]string{Conflist: ours, "0-bridge.conf": bridge, "10-flannel.conflist": flannel}, Fail, []string{"0-bridge.conf (bridge, network mynet) sorts before 00-ovnhost.conflist", "uses 0-bridge.conf"}, "rm /etc/cni/net.d/0-bridge.conf"},
		{"unparsable first", map[string]string{Conflist: ours, "00-aaa.json": "{"}, Fail, []string{"containerd stops at the unparsable 00-aaa.json"}, "rm /etc/cni/net.d/00-aaa.json"},
		{"ours broken", map[string]string{Conflist: "{nope"}, Fail, []string{"cannot be parsed"}, "restart ovnhost"},
		{"ours wrong plugin", map[string]string{Conflist: flannel}, Fail, []string{"does not call the ovnhost-cni plugin"}, "restart ovnhost"},
		{"ours without portmap", map[string]string{Conflist: `{"cniVersion":"0.4.0","name":"ovnhost","plugins":[{"type":"ovnhost-cni","socket":"/run/x.sock"}]}`}, Pass, []string{"only CNI configuration"}, ""},
		{"ours chained with portmap", map[string]string{Conflist: `{"cniVersion":"0.4.0","name":"ovnhost","plugins":[{"type":"ovnhost-cni","socket":"/run/x.sock"},{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`}, Pass, []string{"only CNI configuration"}, ""},
		{"ours after portmap", map[string]string{Conflist: `{"cniVersion":"0.4.0","name":"ovnhost","plugins":[{"type":"portmap"},{"type":"ovnhost-cni"}]}`}, Fail, []string{"runs portmap before the ovnhost-cni plugin"}, "restart ovnhost"},
		{"multus first", map[string]string{Conflist: ours, "00-multus.conf": multus}, Warn, []string{"Multus (00-multus.conf)"}, "clusterNetwork"},
		{"conflist without plugins", map[string]string{Conflist: ours, "0-x.conflist": `{"name":"x"}`}, Fail, []string{"0-x.conflist (unparsable: no plugins)"}, "rm"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := analyze(tc.files)
			if r.Status != tc.status {
				t.Fatalf("status %s: %+v", r.Status, r)
			}
			for _, f := range tc.found {
				if !strings.Contains(r.Found, f) {
					t.Errorf("found %q lacks %q", r.Found, f)
				}
			}
			if !strings.Contains(r.Fix, tc.fix) {
				t.Errorf("fix %q lacks %q", r.Fix, tc.fix)
			}
		})
	}
}

// Multus sorts before ovnhost's conflist and is what the runtime calls: that
// is right when Multus gives pods ovnhost as their default network, in any of
// the ways Multus finds it.
func TestAnalyzeMultus(t *testing.T) {
	const sock = "/run/ovnhost/cni.sock"
	oursSock := `{"cniVersion":"0.4.0","name":"ovnhost","plugins":[{"type":"ovnhost-cni","socket":"` + sock + `"},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	multusWith := func(fields string) string {
		return `{"cniVersion":"0.4.0","name":"multus-cni-network","type":"multus","kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig",` + fields + `}`
	}
	cases := []struct {
		name   string
		files  map[string]string
		status string
		found  string
		fix    string
	}{
		// What multus-cni's thin entrypoint generates: a copy of the first conflist.
		{"inline copy of ours", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[` + oursSock + `]`)}, Pass,
			"Multus (00-multus.conf) is read first and delegates the default network to ovnhost (its copy of 00-ovnhost.conflist)", ""},
		{"inline single plugin", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[{"cniVersion":"0.4.0","name":"ovnhost","type":"ovnhost-cni","socket":"` + sock + `"}]`)}, Pass,
			"delegates the default network to ovnhost", ""},
		{"inline stale socket", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[{"name":"ovnhost","plugins":[{"type":"ovnhost-cni","socket":"/old/cni.sock"}]}]`)}, Fail,
			`stale copy of 00-ovnhost.conflist: its ovnhost-cni socket is "/old/cni.sock", ovnhost's is "` + sock + `"`, "restart Multus"},
		{"inline flannel", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[` + flannel + `]`)}, Fail,
			"delegates the default network to flannel+portmap (network cbr0), not to ovnhost", `"clusterNetwork": "/etc/cni/net.d/00-ovnhost.conflist"`},
		{"path to ours", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"/etc/cni/net.d/00-ovnhost.conflist"`)}, Pass,
			"delegates the default network to /etc/cni/net.d/00-ovnhost.conflist", ""},
		{"path to another file", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"/etc/cni/net.d/10-flannel.conflist"`)}, Fail,
			"delegates the default network to /etc/cni/net.d/10-flannel.conflist, not to ovnhost's", "clusterNetwork"},
		{"path to the dir", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"/etc/cni/net.d/"`)}, Fail,
			"which is 00-multus.conf itself", "clusterNetwork"},
		{"name with our confDir", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"ovnhost","confDir":"/etc/cni/net.d"`)}, Pass,
			"delegates the default network to network ovnhost (/etc/cni/net.d/00-ovnhost.conflist)", ""},
		{"name, default confDir", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"ovnhost"`)}, Warn,
			"then in /etc/cni/multus/net.d", `"confDir": "/etc/cni/net.d"`},
		{"other name", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"clusterNetwork":"k8s-pod-network"`)}, Warn,
			`"k8s-pod-network"`, "clusterNetwork"},
		{"no delegate", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[]`)}, Fail,
			"neither clusterNetwork nor a usable delegate", "clusterNetwork"},
		{"thick", map[string]string{Conflist: oursSock, "00-multus.conf": `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","socketDir":"/run/multus/"}`}, Warn,
			"thick plugin", "daemon-config.json"},
		{"delegating, flannel left", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[` + oursSock + `]`), "10-flannel.conflist": flannel}, Warn,
			"delegates the default network to ovnhost (its copy of 00-ovnhost.conflist); other plugins' files are also present: 10-flannel.conflist", "rm /etc/cni/net.d/10-flannel.conflist"},
		{"delegating, something between", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[` + oursSock + `]`), "00-n-bridge.conf": bridge}, Warn,
			"other plugins' files are also present: 00-n-bridge.conf", "rm /etc/cni/net.d/00-n-bridge.conf"},
		// Not Multus first: a bridge before Multus is what the runtime uses.
		{"bridge before multus", map[string]string{Conflist: oursSock, "00-multus.conf": multusWith(`"delegates":[` + oursSock + `]`), "0-bridge.conf": bridge}, Fail,
			"the runtime uses 0-bridge.conf instead of ovnhost", "remove them: rm /etc/cni/net.d/0-bridge.conf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := analyze(tc.files)
			if r.Status != tc.status || !strings.Contains(r.Found, tc.found) || !strings.Contains(r.Fix, tc.fix) {
				t.Fatalf("got %s %q (fix %q), want %s with %q (fix with %q)", r.Status, r.Found, r.Fix, tc.status, tc.found, tc.fix)
			}
			if strings.Contains(r.Fix, "rm ") && strings.Contains(r.Fix, "00-multus.conf") {
				t.Fatalf("fix %q removes Multus's configuration", r.Fix)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	r := analyze(map[string]string{"b.conf": bridge, "a.json": bridge, Conflist: ours, "10-flannel.conflist": flannel, "x.txt": "x"})
	var got []string
	for _, f := range r.Files {
		got = append(got, f.Name)
	}
	if strings.Join(got, " ") != "00-ovnhost.conflist 10-flannel.conflist a.json b.conf" {
		t.Fatal(got)
	}
}

func TestScan(t *testing.T) {
	dir := t.TempDir()
	if _, err := Scan(filepath.Join(dir, "nope"), ""); err == nil {
		t.Fatal("missing dir scanned")
	}
	for n, s := range map[string]string{Conflist: ours, "10-flannel.conflist": flannel} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Scan(dir, "")
	if err != nil || r.Status != Warn || len(r.Files) != 2 {
		t.Fatalf("%+v %v", r, err)
	}
}

func goTool(t *testing.T) string {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go tool at %s or on PATH: the test builds programs", filepath.Join(runtime.GOROOT(), "bin", "go"))
		}
	}
	return gobin
}

func build(t *testing.T, dir, name, src string, trimpath bool) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := []string{"build"}
	if trimpath {
		args = append(args, "-trimpath")
	}
	args = append(args, "-ldflags", "-s -w -X "+VersionVar+"=v1.2.3-abc", "-o", out, filepath.Join(dir, name+".go"))
	cmd := exec.Command(goTool(t), args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out
}

func TestBuildStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	// Without -trimpath the linker flags are in the build information
	// (whether or not the program links the version package).
	plain := build(t, dir, "plain", "package main\n\nfunc main() {}\n", false)
	if v, err := BuildStamp(context.Background(), plain); err != nil || v != "v1.2.3-abc" {
		t.Fatalf("%q %v", v, err)
	}
	// With -trimpath (the Makefile) the plugin is asked for its about line.
	about := build(t, dir, "about", "package main\n\nimport \"os\"\n\nfunc main() {\n\tif os.Getenv(\"CNI_COMMAND\") == \"\" {\n\t\tos.Stderr.WriteString(\"ovnhost-cni v9-trim: forwards\\nCNI protocol versions supported: 1.0.0\\n\")\n\t}\n}\n", true)
	if v, err := BuildStamp(context.Background(), about); err != nil || v != "v9-trim" {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := BuildStamp(context.Background(), filepath.Join(dir, "plain.go")); err == nil {
		t.Fatal("source file has a stamp")
	}
}
