// Package netctl_test runs the built netctl (and the other programs' version
// commands) as a user would: completion scripts, the kubectl plugin name,
// exit codes, and the cluster commands against a real kube-apiserver.
package netctl_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// netctl runs bin/netctl (or a link to it named name) and returns stdout,
// stderr and the exit code.
func runAs(t *testing.T, path string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", path, args, err)
	}
	return out.String(), errb.String(), code
}

func TestCompletionScriptsGenerate(t *testing.T) {
	bin := testenv.Binary(t, "netctl")
	for shell, marker := range map[string]string{
		"bash": "__start_netctl",
		"zsh":  "#compdef netctl",
		"fish": "complete -c netctl",
	} {
		out, errb, code := runAs(t, bin, nil, "completion", shell)
		if code != 0 || !strings.Contains(out, marker) {
			t.Errorf("netctl completion %s: exit %d, %q not in the script\n%s", shell, code, marker, errb)
		}
		if shell == "bash" {
			if _, err := exec.LookPath("bash"); err == nil {
				// The script must at least parse in bash.
				f := filepath.Join(t.TempDir(), "netctl.bash")
				_ = os.WriteFile(f, []byte(out), 0o644)
				if o, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
					t.Errorf("bash -n on the completion script: %v\n%s", err, o)
				}
			}
		}
	}
	// The completion engine itself: subcommands and -o values.
	out, _, code := runAs(t, bin, nil, "__complete", "sub")
	if code != 0 || !strings.Contains(out, "subnet") {
		t.Errorf("__complete sub: exit %d\n%s", code, out)
	}
	out, _, _ = runAs(t, bin, nil, "__complete", "subnet", "list", "-o", "")
	for _, f := range []string{"table", "wide", "json", "yaml"} {
		if !strings.Contains(out, f+"\n") {
			t.Errorf("-o completion lacks %s:\n%s", f, out)
		}
	}
}

// TestKubectlPluginName runs the program through the names kubectl looks
// for: kubectl-netctl (plugin) and kubectl_complete-netctl (its completion).
func TestKubectlPluginName(t *testing.T) {
	bin := testenv.Binary(t, "netctl")
	dir := t.TempDir()
	for _, n := range []string{"kubectl-netctl", "kubectl_complete-netctl"} {
		if err := os.Symlink(bin, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code := runAs(t, filepath.Join(dir, "kubectl-netctl"), nil, "--help")
	if code != 0 || !strings.Contains(out, "kubectl netctl [command]") {
		t.Fatalf("kubectl-netctl --help: exit %d, no \"kubectl netctl [command]\":\n%s", code, out)
	}
	out, _, _ = runAs(t, filepath.Join(dir, "kubectl-netctl"), nil, "subnet", "--help")
	if !strings.Contains(out, "kubectl netctl subnet [command]") {
		t.Errorf("kubectl-netctl subnet --help names the wrong program:\n%s", out)
	}
	out, _, code = runAs(t, filepath.Join(dir, "kubectl_complete-netctl"), nil, "subn")
	if code != 0 || !strings.Contains(out, "subnet") {
		t.Errorf("kubectl_complete-netctl subn: exit %d, no subnet:\n%s", code, out)
	}
	// The Makefile ships the links next to netctl.
	for _, n := range []string{"kubectl-netctl", "kubectl_complete-netctl"} {
		if target, err := os.Readlink(filepath.Join(filepath.Dir(bin), n)); err != nil || target != "netctl" {
			t.Errorf("%s beside netctl: %q, %v (make build links it to netctl)", n, target, err)
		}
	}
}

func TestVersionOnEveryProgram(t *testing.T) {
	for _, p := range []string{"netctl", "ovnhost", "ovnhost-controller", "ovnhost-cni"} {
		out, errb, code := runAs(t, testenv.Binary(t, p), nil, "version")
		if p == "ovnhost-cni" {
			out = errb // the CNI library's "about" text goes to stderr
		}
		if code != 0 || !strings.HasPrefix(out, p+" ") {
			t.Errorf("%s version: exit %d, stdout %q, stderr %q", p, code, out, errb)
		}
	}
	out, _, code := runAs(t, testenv.Binary(t, "netctl"), nil, "version", "-o", "json")
	if code != 0 || !strings.Contains(out, `"program": "netctl"`) {
		t.Errorf("netctl version -o json: exit %d: %s", code, out)
	}
}

func TestExitCodesAndErrors(t *testing.T) {
	bin := testenv.Binary(t, "netctl")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"no-such-command"}, 2, `unknown command "no-such-command"`},
		{[]string{"subnet", "list", "-o", "xml"}, 2, `-o/--output "xml": use table, wide, json or yaml`},
		{[]string{"subnet", "list", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"subnet", "show"}, 2, "accepts 1 arg"},
		{[]string{"doctor", "--output", "xml"}, 2, "use table, wide, json or yaml"},
		// No kubeconfig anywhere (HOME is empty, not in a pod).
		{[]string{"subnet", "list"}, 1, "no Kubernetes configuration"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig", "ip", "list"}, 1, "/nonexistent/kubeconfig"},
	}
	for _, c := range cases {
		_, errb, code := runAs(t, bin, []string{"KUBERNETES_SERVICE_HOST="}, c.args...)
		if code != c.code || !strings.Contains(errb, c.want) {
			t.Errorf("netctl %v: exit %d (want %d), stderr %q (want %q)", c.args, code, c.code, errb, c.want)
		}
	}
	out, _, code := runAs(t, bin, nil, "doctor", "--help")
	if code != 0 || !strings.Contains(out, "Exit status: 0 every check passed") {
		t.Errorf("doctor --help: exit %d\n%s", code, out)
	}
}
