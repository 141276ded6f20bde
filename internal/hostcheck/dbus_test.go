package hostcheck

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// A private dbus-daemon: one connection takes firewalld's name, another
// asks whether it is owned.
func TestNameHasOwnerRealBus(t *testing.T) {
	testenv.RequireCommands(t, "dbus-daemon")
	p, _ := testenv.LookPath("dbus-daemon")
	dir := t.TempDir()
	addr := "unix:path=" + filepath.Join(dir, "bus")
	cmd := exec.Command(p, "--config-file=/usr/share/dbus-1/session.conf", "--address="+addr, "--nofork", "--nopidfile", "--print-address=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "unix:") {
		t.Fatalf("dbus-daemon: %q %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if owned, err := nameHasOwner(ctx, addr, FirewalldBusName); err != nil || owned {
		t.Fatalf("before: %v %v", owned, err)
	}
	// The collector asks the bus named by DBUS_SYSTEM_BUS_ADDRESS; a
	// firewalld really running here would be found first by its pid file.
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	realFirewalld, how, err := (&DoctorHost{}).Firewalld()
	if err != nil {
		t.Fatal(err)
	}
	if realFirewalld {
		t.Logf("firewalld runs on this machine (%s): the collector is not checked against the private bus", how)
	}
	owner, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	reply, err := owner.RequestName(FirewalldBusName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName: %v %v", reply, err)
	}
	if owned, err := nameHasOwner(ctx, addr, FirewalldBusName); err != nil || !owned {
		t.Fatalf("after: %v %v", owned, err)
	}
	if !realFirewalld {
		if active, how, err := (&DoctorHost{}).Firewalld(); err != nil || !active || how != FirewalldBusName+" is owned on the system bus" {
			t.Fatalf("Firewalld with the name owned: %v %q %v", active, how, err)
		}
	}
	// A bus that is not there: the error names the address.
	gone := "unix:path=" + filepath.Join(dir, "nobus")
	if _, err := nameHasOwner(ctx, gone, FirewalldBusName); err == nil || !strings.Contains(err.Error(), gone) {
		t.Fatalf("missing bus: %v", err)
	}
}
