package qemuvm

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestControlChannel boots one VM and checks what the tests rely on: the
// guest runs Debian's kernel, commands report stdout, stderr and exit
// status, a command past its deadline is killed and says so, background
// processes can be signalled and waited for, and the network is set up.
func TestControlChannel(t *testing.T) {
	vm := Boot(t, Config{Name: "vmtest", Modules: []string{}, NICs: []NIC{UserNIC()}})
	if got := strings.TrimSpace(vm.Run(t, "uname", "-r")); got != vm.Kernel.Release {
		t.Fatalf("uname -r in the guest = %q, want %q", got, vm.Kernel.Release)
	}
	if got := strings.TrimSpace(vm.Run(t, "hostname")); got != "vmtest" {
		t.Errorf("hostname = %q, want vmtest", got)
	}
	r, err := vm.Exec(Cmd{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit != 7 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exit/stdout/stderr = %d %q %q, want 7 \"out\\n\" \"err\\n\"", r.Exit, r.Stdout, r.Stderr)
	}
	r, err = vm.Exec(Cmd{Argv: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut || r.Signal != int(syscall.SIGKILL) {
		t.Errorf("sleep 30 with a 500 ms deadline: timed out %v, signal %d; want killed", r.TimedOut, r.Signal)
	}
	if r.Err() == nil {
		t.Error("a timed-out command has no error")
	}
	vm.WriteFile(t, "/root/hello", []byte("hi\n"), 0o600)
	if got := vm.Run(t, "cat", "/root/hello"); got != "hi\n" {
		t.Errorf("file written into the guest reads %q", got)
	}
	p := vm.Spawn(t, "/var/log/sleeper.log", nil, "sh", "-c", "echo started; exec sleep 300")
	if err := p.Signal(syscall.SIGTERM, false); err != nil {
		t.Fatal(err)
	}
	w, err := p.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Signal != int(syscall.SIGTERM) {
		t.Errorf("spawned sleep after SIGTERM: exit %d signal %d", w.Exit, w.Signal)
	}
	if !strings.Contains(vm.Run(t, "ip", "-4", "addr", "show", "eth0"), "10.0.2.15/24") {
		t.Error("eth0 has no 10.0.2.15/24")
	}
	// The host root is read-only underneath; writes land in the overlay.
	vm.Run(t, "touch", "/usr/qemuvm-overlay-probe")
	if _, err := syscall.Open("/usr/qemuvm-overlay-probe", syscall.O_RDONLY, 0); err == nil {
		t.Error("a file created in the guest appeared on the host")
	}
}
