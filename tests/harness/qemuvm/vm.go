// Package qemuvm boots throwaway Linux VMs for tests that need a real
// kernel feature this machine's kernel lacks (the openvswitch and geneve
// modules): Debian's own kernel under qemu's software emulation, the
// host's root file system shared read-only over 9p with a tmpfs overlay on
// top, so the host's OVS/OVN packages and ovnhost's binaries run unchanged
// inside, and nothing a guest writes reaches the host.
//
//	k := qemuvm.DebianKernel(t, qemuvm.Bookworm)   // cached in ~/.cache/ovnhost/vm
//	vm := qemuvm.Boot(t, qemuvm.Config{Name: "node1", Kernel: k, NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
//	out := vm.Run(t, "ovs-vsctl", "show")          // through the control channel
//
// How it boots: the kernel package is fetched with apt-get download and
// unpacked with dpkg-deb, depmod is run on its tree and modprobe
// --show-depends orders the modules to load. The initramfs (built here, a
// newc cpio) holds a static busybox, those modules, vmagent and an /init
// that loads the modules, mounts the host root over 9p, lays the overlay
// on it, mounts proc/sys/dev/run/tmp and fresh tmpfs over OVS/OVN/CNI state
// directories, and switches root to vmagent (or systemd, which then starts
// vmagent). vmagent answers on a virtio-serial port: the host sends
// commands and reads exit status and output (package wire).
//
// Traps: -enable-kvm hangs at "Booting from ROM" on these machines, so it
// is plain TCG with -cpu max; /tmp inside is a fresh tmpfs (the host's /tmp
// is at /.host/tmp); the guest has no udev, so interfaces are found by MAC.
// Each VM is killed and its files removed by t.Cleanup.
package qemuvm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm/wire"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// BootModules are always loaded by /init: what the VM needs to mount its
// root, talk to the host and have a network.
var BootModules = []string{"virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay", "virtio_net"}

// DatapathModules are the default Config.Modules: the OVS kernel datapath,
// its tunnel devices and the veth pairs pods use.
var DatapathModules = []string{"openvswitch", "geneve", "vxlan", "veth"}

// StateDirs get a fresh tmpfs in every VM, so state the host keeps there
// (a conf.db, a conflist) does not leak into the guest through the overlay.
var StateDirs = []string{"/var/lib/openvswitch", "/var/lib/ovn", "/var/log/openvswitch", "/var/log/ovn",
	"/etc/openvswitch", "/etc/ovn", "/etc/cni", "/opt/cni", "/var/lib/cni", "/var/log/ovnhost"}

// Config describes one VM.
type Config struct {
	Name   string  // hostname inside (NODE_NAME); required
	Kernel *Kernel // DebianKernel(t, Bookworm) when nil
	CPUs   int     // default 2
	Memory int     // MiB, default 1024
	// Modules are loaded (with their dependencies) by /init; nil means
	// DatapathModules, an empty non-nil slice none beyond BootModules.
	Modules []string
	// NoModuleTree hides the kernel's module tree from the guest: nothing
	// can be loaded after boot (module loading impossible, as on Talos or
	// in a container without /lib/modules).
	NoModuleTree bool
	NICs         []NIC
	// Systemd boots Debian's systemd (from the host root) as PID 1;
	// vmagent then runs as a service. Otherwise vmagent is PID 1.
	Systemd bool
	// Mask are systemd units masked in the guest before boot (the host
	// root's enabled services that must not run there, e.g. Debian's own
	// OVS/OVN units).
	Mask []string
	// BootTimeout bounds qemu start to the agent's hello (default 4 min:
	// software emulation on a loaded machine).
	BootTimeout time.Duration
}

// NIC is one network interface of the VM.
type NIC struct {
	Name    string // interface name inside; default eth<N>
	MAC     string // default 52:54:00:00:<vm>:<N>
	Addr    string // CIDR given to it inside, optional (IPv6: without DAD)
	Gateway string // default route through it, optional
	MTU     int    // optional
	user    bool
	link    *Link
	side    int
}

// UserNIC is qemu's user-mode network (10.0.2.15/24 via 10.0.2.2): the
// guest reaches the host and the outside world through qemu's NAT.
func UserNIC() NIC { return NIC{user: true, Addr: "10.0.2.15/24", Gateway: "10.0.2.2"} }

// Link is a point-to-point Ethernet cable between two VMs: a stream
// socket pair whose ends become each VM's `-netdev socket,fd=`. (The same
// socket backend as listen=/connect=, without choosing a free TCP port and
// ordering the two qemu starts.)
type Link struct {
	mu    sync.Mutex
	ends  [2]*os.File
	taken [2]bool
}

// NewLink makes a cable; its ends are closed when the test ends.
func NewLink(t testing.TB) *Link {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair for a VM link: %v", err)
	}
	l := &Link{ends: [2]*os.File{os.NewFile(uintptr(fds[0]), "vmlink0"), os.NewFile(uintptr(fds[1]), "vmlink1")}}
	t.Cleanup(func() { l.ends[0].Close(); l.ends[1].Close() })
	return l
}

// End returns a NIC plugged into one end (0 or 1) of the cable.
func (l *Link) End(side int, addr string) NIC { return NIC{link: l, side: side, Addr: addr} }

func (l *Link) take(side int) (*os.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if side != 0 && side != 1 {
		return nil, fmt.Errorf("link end %d: a link has ends 0 and 1", side)
	}
	if l.taken[side] {
		return nil, fmt.Errorf("link end %d is already plugged into a VM", side)
	}
	l.taken[side] = true
	return l.ends[side], nil
}

// VM is a running guest.
type VM struct {
	Name   string
	Kernel *Kernel
	// Booted is how long qemu took from start to the agent's hello.
	Booted time.Duration

	cfg     Config
	dir     string
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	exited  chan struct{}
	exitErr error

	conn    net.Conn
	wmu     sync.Mutex
	enc     *json.Encoder
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan wire.Response
	closed  chan struct{}
	readErr error
}

var vmSeq struct {
	sync.Mutex
	n int
}

// Boot starts a VM and waits for its agent; the VM is killed and its files
// removed when the test ends.
func Boot(t testing.TB, cfg Config) *VM {
	t.Helper()
	vm, err := boot(t, cfg)
	if err != nil {
		t.Fatalf("boot VM %s: %v", cfg.Name, err)
	}
	return vm
}

// BootAll boots several VMs at once (they are independent until their
// agents answer) and returns them in the order given.
func BootAll(t testing.TB, cfgs ...Config) []*VM {
	t.Helper()
	vms := make([]*VM, len(cfgs))
	errs := make([]error, len(cfgs))
	// What may Fatal or Skip happens here, not in the boot goroutines
	// (FailNow from another goroutine would leave a nil VM behind).
	for i := range cfgs {
		if cfgs[i].Kernel == nil {
			cfgs[i].Kernel = DebianKernel(t, Bookworm)
		}
	}
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vms[i], errs[i] = boot(t, cfgs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("boot VM %s: %v", cfgs[i].Name, err)
		}
		if vms[i] == nil {
			t.Fatalf("boot VM %s: no VM (the boot stopped the test from its goroutine; see the log above)", cfgs[i].Name)
		}
	}
	return vms
}

// cpuModel is the emulated CPU: $OVNHOST_VM_CPU, else max.
func cpuModel() string {
	if m := os.Getenv("OVNHOST_VM_CPU"); m != "" {
		return m
	}
	return "max"
}

func qemuBinary() (string, error) {
	p, err := testenv.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", errors.New("qemu-system-x86_64 not found (Debian package qemu-system-x86, in the Makefile's DEB_PKGS)")
	}
	return p, nil
}

func boot(t testing.TB, cfg Config) (*VM, error) {
	qemu, err := bootPreflight(t, cfg)
	if err != nil {
		return nil, err
	}
	cfg.fillDefaults(t)
	seq := nextVMSeq()
	cpio, err := buildInitrd(cfg)
	if err != nil {
		return nil, err
	}
	vm, err := newVM(t, cfg)
	if err != nil {
		return nil, err
	}
	initrd, err := vm.writeInitrd(cpio)
	if err != nil {
		return nil, err
	}
	ln, ctlPath, err := vm.listenControl()
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	args, extra, err := qemuArgs(cfg, vm.dir, initrd, ctlPath, seq)
	if err != nil {
		return nil, err
	}
	t0, err := vm.startQemu(qemu, args, extra)
	if err != nil {
		return nil, err
	}
	// One deadline from qemu start to the agent's hello.
	timer := time.NewTimer(cfg.BootTimeout)
	defer timer.Stop()
	if err := vm.waitControlChannel(ln, timer.C); err != nil {
		return nil, err
	}
	if err := vm.waitAgentHello(t0, timer.C); err != nil {
		return nil, err
	}
	t.Logf("VM %s: kernel %s up, agent answering after %s", cfg.Name, cfg.Kernel.Release, vm.Booted.Round(100*time.Millisecond))
	if err := vm.setupNet(); err != nil {
		return nil, err
	}
	return vm, nil
}

// bootPreflight checks what a boot needs before it starts anything: a
// name, root, and qemu (returned). Without root or qemu the test is
// skipped, or fails under OVNHOST_TEST_STRICT.
func bootPreflight(t testing.TB, cfg Config) (string, error) {
	if cfg.Name == "" {
		return "", errors.New("Config.Name is required (it is the guest's hostname)")
	}
	if os.Geteuid() != 0 {
		// The 9p export with security_model=passthrough needs root to
		// read every file as its owner.
		if testenv.Strict() {
			t.Fatalf("qemuvm needs root")
		}
		t.Skip("qemuvm needs root")
	}
	qemu, err := qemuBinary()
	if err != nil {
		if testenv.Strict() {
			return "", err
		}
		t.Skip(err.Error())
	}
	return qemu, nil
}

// fillDefaults sets the Config's unset fields to their defaults.
func (cfg *Config) fillDefaults(t testing.TB) {
	if cfg.Kernel == nil {
		cfg.Kernel = DebianKernel(t, Bookworm)
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.Memory == 0 {
		cfg.Memory = 1024
	}
	if cfg.Modules == nil {
		cfg.Modules = DatapathModules
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 4 * time.Minute
	}
}

// nextVMSeq numbers the VMs of this test binary (their default MACs).
func nextVMSeq() int {
	vmSeq.Lock()
	vmSeq.n++
	seq := vmSeq.n
	vmSeq.Unlock()
	return seq
}

// buildInitrd builds the initramfs (a newc cpio): busybox, the kernel
// modules to load in dependency order, vmagent and /init.
func buildInitrd(cfg Config) ([]byte, error) {
	k := cfg.Kernel
	mods, err := k.ModuleOrder(append(append([]string{}, BootModules...), cfg.Modules...)...)
	if err != nil {
		return nil, err
	}
	agent, err := agentBinary()
	if err != nil {
		return nil, err
	}
	busybox, err := testenv.LookPath("busybox")
	if err != nil {
		return nil, errors.New("busybox not found (Debian package busybox-static)")
	}
	ir := &initramfs{busybox: busybox, agent: agent, modules: mods, init: initScript(cfg)}
	return ir.build()
}

// newVM makes the VM's directory and the VM, killed and removed when the
// test ends.
func newVM(t testing.TB, cfg Config) (*VM, error) {
	// A short directory: the control socket path must fit sun_path.
	dir, err := os.MkdirTemp("", "qemuvm-"+cfg.Name+"-")
	if err != nil {
		return nil, err
	}
	vm := &VM{Name: cfg.Name, Kernel: cfg.Kernel, cfg: cfg, dir: dir, exited: make(chan struct{}),
		pending: map[uint64]chan wire.Response{}, closed: make(chan struct{})}
	t.Cleanup(func() { vm.close(t) })
	return vm, nil
}

// writeInitrd writes the initramfs into the VM's directory and returns its
// path.
func (vm *VM) writeInitrd(cpio []byte) (string, error) {
	initrd := filepath.Join(vm.dir, "initrd.cpio")
	if err := os.WriteFile(initrd, cpio, 0o644); err != nil {
		return "", err
	}
	return initrd, nil
}

// listenControl listens on the control socket qemu connects its
// virtio-serial port to; it returns the listener and its path.
func (vm *VM) listenControl() (*net.UnixListener, string, error) {
	ctlPath := filepath.Join(vm.dir, "ctl.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: ctlPath, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	return ln, ctlPath, nil
}

// kernelCmdline is the guest kernel's command line: serial console, no
// reboot on panic, the systemd options and $OVNHOST_VM_APPEND.
func kernelCmdline(cfg Config) string {
	return "console=ttyS0 panic=-1 quiet mitigations=off cryptomgr.notests " + systemdArgs(cfg) + os.Getenv("OVNHOST_VM_APPEND")
}

// qemuArgs is qemu's command line for cfg (the VM's files in dir), and the
// link ends it inherits as extra files. It fills in the NICs' default
// names and MACs (seq numbers the VM).
func qemuArgs(cfg Config, dir, initrd, ctlPath string, seq int) ([]string, []*os.File, error) {
	args := []string{
		"-name", cfg.Name, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// qboot and the PVH entry: no SeaBIOS, no in-guest decompression.
		"-machine", "pc", "-bios", "qboot.rom", "-accel", "tcg,thread=multi", "-cpu", cpuModel(),
		"-smp", fmt.Sprint(cfg.CPUs), "-m", fmt.Sprint(cfg.Memory),
		"-kernel", cfg.Kernel.Vmlinux, "-initrd", initrd,
		"-append", kernelCmdline(cfg),
		"-chardev", "file,id=con,path=" + filepath.Join(dir, "console.log"), "-serial", "chardev:con",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=ctl,path=" + ctlPath,
		"-device", "virtserialport,chardev=ctl,name=" + wire.PortName,
		"-fsdev", "local,id=hostroot,path=/,security_model=passthrough,readonly=on,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
	}
	nics, extra, err := nicArgs(cfg.NICs, seq)
	if err != nil {
		return nil, nil, err
	}
	return append(args, nics...), extra, nil
}

// nicArgs is the -netdev/-device pairs of the NICs (defaults filled in
// place) and the link ends qemu inherits, fd 3 onwards.
func nicArgs(nics []NIC, seq int) ([]string, []*os.File, error) {
	var args []string
	var extra []*os.File
	for i := range nics {
		n := &nics[i]
		if n.MAC == "" {
			n.MAC = fmt.Sprintf("52:54:00:%02x:%02x:%02x", (seq>>8)&0xff, seq&0xff, i)
		}
		if n.Name == "" {
			n.Name = fmt.Sprintf("eth%d", i)
		}
		id := fmt.Sprintf("n%d", i)
		switch {
		case n.user:
			args = append(args, "-netdev", "user,id="+id)
		case n.link != nil:
			f, err := n.link.take(n.side)
			if err != nil {
				return nil, nil, err
			}
			extra = append(extra, f)
			args = append(args, "-netdev", fmt.Sprintf("socket,id=%s,fd=%d", id, 2+len(extra)))
		default:
			return nil, nil, fmt.Errorf("NIC %d: neither UserNIC nor a Link end", i)
		}
		args = append(args, "-device", fmt.Sprintf("virtio-net-pci,netdev=%s,mac=%s", id, n.MAC))
	}
	return args, extra, nil
}

// startQemu starts qemu and a goroutine that records its exit; it returns
// when qemu was started.
func (vm *VM) startQemu(qemu string, args []string, extra []*os.File) (time.Time, error) {
	vm.cmd = exec.Command(qemu, args...)
	vm.cmd.ExtraFiles = extra
	vm.cmd.Stdout = &vm.stderr
	vm.cmd.Stderr = &vm.stderr
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	t0 := time.Now()
	if err := startFromLockedThread(vm.cmd); err != nil {
		return t0, fmt.Errorf("start %s: %w", qemu, err)
	}
	go func() {
		vm.exitErr = vm.cmd.Wait()
		close(vm.exited)
	}()
	return t0, nil
}

// waitControlChannel waits until qemu connects the control socket (it
// does while it starts), qemu exits or deadline fires.
func (vm *VM) waitControlChannel(ln *net.UnixListener, deadline <-chan time.Time) error {
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	select {
	case vm.conn = <-accepted:
	case <-vm.exited:
		return fmt.Errorf("qemu exited before connecting its control channel: %v\n%s", vm.exitErr, vm.diag())
	case <-deadline:
		return fmt.Errorf("qemu did not connect its control channel within %s\n%s", vm.cfg.BootTimeout, vm.diag())
	}
	return nil
}

// waitAgentHello starts reading the control channel and waits for the
// agent's hello (it names the kernel it runs), recording the boot time
// since t0.
func (vm *VM) waitAgentHello(t0 time.Time, deadline <-chan time.Time) error {
	k := vm.Kernel
	vm.enc = json.NewEncoder(vm.conn)
	hello := make(chan wire.Response, 1)
	go vm.readLoop(hello)
	select {
	case h := <-hello:
		vm.Booted = time.Since(t0)
		if h.Hello != k.Release {
			return fmt.Errorf("agent runs kernel %q, want %q", h.Hello, k.Release)
		}
	case <-vm.closed:
		return fmt.Errorf("control channel closed before the agent said hello: %v\n%s", vm.readErr, vm.diag())
	case <-deadline:
		return fmt.Errorf("the agent did not say hello within %s of qemu start (boot stuck?)\n%s", vm.cfg.BootTimeout, vm.diag())
	}
	return nil
}

// forker is one goroutine locked to its thread for the life of the test
// binary: qemu's Pdeathsig follows the thread that forked it, and a thread
// that exits (a goroutine that locked it and returned) would kill qemu.
var forker struct {
	once sync.Once
	reqs chan forkReq
}

type forkReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startFromLockedThread(cmd *exec.Cmd) error {
	forker.once.Do(func() {
		forker.reqs = make(chan forkReq)
		go func() {
			runtime.LockOSThread()
			for r := range forker.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	forker.reqs <- forkReq{cmd: cmd, done: done}
	return <-done
}

func (vm *VM) readLoop(hello chan<- wire.Response) {
	dec := json.NewDecoder(bufio.NewReaderSize(vm.conn, 1<<20))
	first := true
	for {
		var r wire.Response
		if err := dec.Decode(&r); err != nil {
			vm.mu.Lock()
			vm.readErr = err
			vm.mu.Unlock()
			close(vm.closed)
			return
		}
		if first && r.ID == 0 {
			first = false
			hello <- r
			continue
		}
		vm.mu.Lock()
		ch := vm.pending[r.ID]
		delete(vm.pending, r.ID)
		vm.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// call sends req and waits for its answer, at most wait.
func (vm *VM) call(req wire.Request, wait time.Duration) (wire.Response, error) {
	ch := make(chan wire.Response, 1)
	vm.mu.Lock()
	vm.nextID++
	req.ID = vm.nextID
	vm.pending[req.ID] = ch
	vm.mu.Unlock()
	vm.wmu.Lock()
	err := vm.enc.Encode(req)
	vm.wmu.Unlock()
	if err != nil {
		return wire.Response{}, fmt.Errorf("VM %s: sending %s %q: %w", vm.Name, req.Op, req.Argv, err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-vm.closed:
		return wire.Response{}, fmt.Errorf("VM %s: control channel closed while waiting for %s %q: %v\n%s", vm.Name, req.Op, req.Argv, vm.readErr, vm.diag())
	case <-timer.C:
		vm.mu.Lock()
		delete(vm.pending, req.ID)
		vm.mu.Unlock()
		return wire.Response{}, fmt.Errorf("VM %s: no answer to %s %q within %s (agent stuck?)\n%s", vm.Name, req.Op, req.Argv, wait, vm.diag())
	}
}

// Cmd is a command to run in the guest.
type Cmd struct {
	Argv    []string
	Env     []string // added to the agent's environment (PATH has the sbin dirs)
	Stdin   []byte
	Dir     string
	Timeout time.Duration // default 2 minutes; the process group is killed after it
}

// Result is how a command ended.
type Result struct {
	Argv     []string
	Exit     int // -1 when killed by Signal
	Signal   int
	TimedOut bool
	Stdout   string
	Stderr   string
}

// Err is nil when the command exited 0, else an error naming it with its
// status and output.
func (r *Result) Err() error {
	if r.Exit == 0 && !r.TimedOut {
		return nil
	}
	how := fmt.Sprintf("exit status %d", r.Exit)
	if r.Signal != 0 {
		how = fmt.Sprintf("killed by signal %d", r.Signal)
	}
	if r.TimedOut {
		how += " (timed out)"
	}
	return fmt.Errorf("%q: %s\nstdout:\n%s\nstderr:\n%s", r.Argv, how, tail(r.Stdout, 60), tail(r.Stderr, 60))
}

// Exec runs a command to completion. The error is about the channel or
// the agent (could not start it); the command's own failure is in Result.
func (vm *VM) Exec(c Cmd) (*Result, error) {
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	resp, err := vm.call(wire.Request{Op: wire.OpRun, Argv: c.Argv, Env: c.Env, Stdin: c.Stdin, Dir: c.Dir,
		TimeoutMS: c.Timeout.Milliseconds()}, c.Timeout+30*time.Second)
	if err != nil {
		return nil, err
	}
	r := &Result{Argv: c.Argv, Exit: resp.Exit, Signal: resp.Signal, TimedOut: resp.TimedOut,
		Stdout: string(resp.Stdout), Stderr: string(resp.Stderr)}
	if resp.Err != "" {
		return r, fmt.Errorf("VM %s: %q: %s", vm.Name, c.Argv, resp.Err)
	}
	return r, nil
}

// Run runs argv, fails the test unless it exits 0, and returns its stdout.
func (vm *VM) Run(t testing.TB, argv ...string) string {
	t.Helper()
	return vm.MustExec(t, Cmd{Argv: argv})
}

// MustExec is Exec that fails the test unless the command exits 0.
func (vm *VM) MustExec(t testing.TB, c Cmd) string {
	t.Helper()
	r, err := vm.Exec(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("VM %s: %v", vm.Name, err)
	}
	return r.Stdout
}

// Sh runs a shell script (sh -e) and fails the test unless it exits 0.
func (vm *VM) Sh(t testing.TB, script string) string {
	t.Helper()
	return vm.MustExec(t, Cmd{Argv: []string{"sh", "-ec", script}})
}

// ShResult runs a shell script and returns how it ended.
func (vm *VM) ShResult(script string, timeout time.Duration) (*Result, error) {
	return vm.Exec(Cmd{Argv: []string{"sh", "-ec", script}, Timeout: timeout})
}

// WriteFile writes data to a file inside the guest (its overlay).
func (vm *VM) WriteFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	vm.MustExec(t, Cmd{Argv: []string{"sh", "-ec", `mkdir -p "$(dirname "$1")"; cat > "$1"; chmod "$2" "$1"`, "sh", path, fmt.Sprintf("%o", mode)}, Stdin: data})
}

// Proc is a background process in the guest.
type Proc struct {
	vm   *VM
	Pid  int
	Log  string // its output file in the guest
	Argv []string
}

// Spawn starts argv in the background (own process group), its output
// appended to logFile in the guest.
func (vm *VM) Spawn(t testing.TB, logFile string, env []string, argv ...string) *Proc {
	t.Helper()
	resp, err := vm.call(wire.Request{Op: wire.OpSpawn, Argv: argv, Env: env, LogFile: logFile}, time.Minute)
	if err == nil && resp.Err != "" {
		err = fmt.Errorf("VM %s: spawn %q: %s", vm.Name, argv, resp.Err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &Proc{vm: vm, Pid: resp.Pid, Log: logFile, Argv: argv}
}

// Signal sends sig to the process (its whole group when group is true).
func (p *Proc) Signal(sig syscall.Signal, group bool) error {
	resp, err := p.vm.call(wire.Request{Op: wire.OpSignal, Pid: p.Pid, Signal: int(sig), Group: group}, time.Minute)
	if err == nil && resp.Err != "" {
		err = errors.New(resp.Err)
	}
	return err
}

// Wait waits for the process to exit, at most timeout.
func (p *Proc) Wait(timeout time.Duration) (*Result, error) {
	resp, err := p.vm.call(wire.Request{Op: wire.OpWait, Pid: p.Pid, TimeoutMS: timeout.Milliseconds()}, timeout+30*time.Second)
	if err != nil {
		return nil, err
	}
	r := &Result{Argv: p.Argv, Exit: resp.Exit, Signal: resp.Signal, TimedOut: resp.TimedOut}
	if resp.Err != "" {
		return r, fmt.Errorf("VM %s: wait for %q (pid %d): %s", p.vm.Name, p.Argv, p.Pid, resp.Err)
	}
	return r, nil
}

// WaitLog waits until the guest file contains pattern (woken by inotify
// in the guest), failing early with the file's tail when the process
// exits first.
func (p *Proc) WaitLog(pattern string, timeout time.Duration) error {
	return p.vm.watch(p.Log, pattern, 1, p.Pid, timeout)
}

// WaitLogCount is WaitLog for count occurrences of pattern.
func (p *Proc) WaitLogCount(pattern string, count int, timeout time.Duration) error {
	return p.vm.watch(p.Log, pattern, count, p.Pid, timeout)
}

// WaitFile waits until a guest file contains pattern.
func (vm *VM) WaitFile(path, pattern string, timeout time.Duration) error {
	return vm.watch(path, pattern, 1, 0, timeout)
}

func (vm *VM) watch(path, pattern string, count, pid int, timeout time.Duration) error {
	resp, err := vm.call(wire.Request{Op: wire.OpWatch, LogFile: path, Pattern: pattern, Count: count, Pid: pid, TimeoutMS: timeout.Milliseconds()}, timeout+30*time.Second)
	if err != nil {
		return err
	}
	if resp.Err != "" {
		return fmt.Errorf("VM %s: %s\n--- %s (tail) ---\n%s", vm.Name, resp.Err, path, tail(string(resp.Stdout), 60))
	}
	return nil
}

// setupNet names, addresses and brings up each NIC, found by its MAC
// (there is no udev in the guest).
func (vm *VM) setupNet() error {
	var sb strings.Builder
	sb.WriteString("ip link set lo up\n")
	for _, n := range vm.cfg.NICs {
		fmt.Fprintf(&sb, "dev=$(grep -l -i '^%s$' /sys/class/net/*/address | head -n1 | cut -d/ -f5)\n", n.MAC)
		fmt.Fprintf(&sb, "[ -n \"$dev\" ] || { echo 'no interface with MAC %s' >&2; ip -o link >&2; exit 1; }\n", n.MAC)
		fmt.Fprintf(&sb, "[ \"$dev\" = %s ] || ip link set \"$dev\" name %s\n", n.Name, n.Name)
		if n.MTU != 0 {
			fmt.Fprintf(&sb, "ip link set %s mtu %d\n", n.Name, n.MTU)
		}
		fmt.Fprintf(&sb, "ip link set %s up\n", n.Name)
		if n.Addr != "" {
			// An IPv6 address skips duplicate address detection: it is
			// usable at once instead of tentative for a second or more
			// (a daemon binding to it would fail), and a VM link has no
			// other host that could hold it.
			nodad := ""
			if strings.Contains(n.Addr, ":") {
				nodad = " nodad"
			}
			fmt.Fprintf(&sb, "ip addr add %s dev %s%s\n", n.Addr, n.Name, nodad)
		}
		if n.Gateway != "" {
			fmt.Fprintf(&sb, "ip route add default via %s dev %s\n", n.Gateway, n.Name)
		}
	}
	r, err := vm.ShResult(sb.String(), time.Minute)
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return fmt.Errorf("VM %s: network set-up: %w", vm.Name, err)
	}
	return nil
}

// Console returns what the guest printed on its serial console.
func (vm *VM) Console() string {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "console.log"))
	return string(b)
}

func (vm *VM) diag() string {
	return fmt.Sprintf("qemu output:\n%s\nserial console (last lines):\n%s", tail(vm.stderr.String(), 20), tail(vm.Console(), 40))
}

func (vm *VM) close(t testing.TB) {
	if t.Failed() {
		t.Logf("VM %s serial console (last lines):\n%s", vm.Name, tail(vm.Console(), 40))
	}
	if vm.cmd != nil && vm.cmd.Process != nil {
		_ = vm.cmd.Process.Kill()
		select {
		case <-vm.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("VM %s: qemu pid %d did not exit 30 s after SIGKILL", vm.Name, vm.cmd.Process.Pid)
		}
	}
	if vm.conn != nil {
		vm.conn.Close()
	}
	os.RemoveAll(vm.dir)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// GuestPath is where a host path is seen inside the guest: the same path,
// except under the directories the guest mounts afresh (/tmp, /run, /dev,
// /proc, /sys and StateDirs), which are at /.host/<path>.
func GuestPath(hostPath string) string {
	p := filepath.Clean(hostPath)
	for _, d := range append([]string{"/tmp", "/run", "/var/run", "/dev", "/proc", "/sys"}, StateDirs...) {
		if p == d || strings.HasPrefix(p, d+"/") {
			return "/.host" + p
		}
	}
	return p
}

// systemdArgs: a guest booting systemd goes to multi-user.target (not the
// host's default target) and prints no unit status lines on the console.
func systemdArgs(cfg Config) string {
	if !cfg.Systemd {
		return ""
	}
	return "systemd.unit=multi-user.target systemd.show_status=false "
}
