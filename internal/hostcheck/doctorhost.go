package hostcheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// DoctorFacts is everything doctor reads, on top of the preflight facts.
type DoctorFacts interface {
	Facts
	Stat(path string) (fs.FileInfo, error)
	// PluginStamp is the build stamp of the CNI plugin at path.
	PluginStamp(ctx context.Context, path string) (string, error)
	// DaemonStamp is the build of the running ovnhost ("" when not found).
	DaemonStamp() (string, error)
	ScanCNIConf(dir, ours string) (*cniconf.Report, error)
	// Firewalld reports whether firewalld runs, and how that was found.
	Firewalld() (bool, string, error)
	// IptablesSave is the output of iptables-{legacy,nft}-save (ip6tables
	// when v6).
	IptablesSave(backend string, v6 bool) (string, error)
	ClockSync() (synced bool, maxError time.Duration, err error)
	Now() time.Time
	CertValidity(path string) (notBefore, notAfter time.Time, err error)
	Hostname() (string, error)
	// OVSDB and unixctl questions.
	// ListDBs returns the databases the OVSDB server at remote serves.
	ListDBs(ctx context.Context, remote string) ([]string, error)
	// OpenvSwitch reads the Open_vSwitch table of the conf.db at remote.
	OpenvSwitch(ctx context.Context, remote string) ([]vswitch.OpenvSwitch, error)
	// SBChassis reads the Chassis and Encap tables of the SB database.
	SBChassis(ctx context.Context, remote string) ([]sbdb.Chassis, []sbdb.Encap, error)
	// NorthdVersion is SB_Global options:northd_internal_version.
	NorthdVersion(ctx context.Context, remote string) (string, error)
	// Statfs is the space available to unprivileged users and the size of
	// the filesystem holding path.
	Statfs(path string) (avail, total uint64, err error)
	// Owner is the uid and gid of path.
	Owner(path string) (uid, gid int, err error)
	// KernelLog is the kernel's log records (/dev/kmsg), read without waiting.
	KernelLog() ([]string, error)
	// Unixctl runs command on a daemon's control socket.
	Unixctl(ctx context.Context, sock, command string) (string, error)
	// ControllerSocket finds the control socket of a live ovn-controller.
	ControllerSocket(dirs []string) (string, error)
	// Pidfile returns the pid in pidfile and whether that process is alive
	// and named name (pids are reused: the command line is checked).
	Pidfile(pidfile, name string) (int, bool)
	// ProcessStarted is when process pid started, as time since boot.
	ProcessStarted(pid int) (time.Duration, error)
	// DialUnix connects to a unix stream socket and closes it.
	DialUnix(path string, timeout time.Duration) error
	// ARPProbe returns the MACs of other hosts answering ARP for ip on iface.
	ARPProbe(iface string, ip netip.Addr, wait time.Duration) ([]string, error)
	// UnderlayNICs are the NICs underlay networks bridged here, with what
	// the host's network managers do about them.
	UnderlayNICs(journalDir string) ([]UnderlayNIC, error)
}

// DoctorHost is the real machine, read without changing it.
type DoctorHost struct {
	Host
	// healthAddr is where the running daemon serves /metrics; binDirs
	// hold iptables-save.
	healthAddr string
	binDirs    []string
	ssl        sslFiles
}

// NewDoctorHost returns the real collector for a node with these settings.
func NewDoctorHost(s nodeconfig.HostSettings) *DoctorHost {
	return &DoctorHost{healthAddr: s.HealthAddr, binDirs: s.BinDirs, ssl: sslFiles{s.SSLKey, s.SSLCert, s.SSLCACert}}
}

var _ DoctorFacts = (*DoctorHost)(nil)

// Stat stats a file.
func (*DoctorHost) Stat(path string) (fs.FileInfo, error) { return os.Stat(path) }

// PluginStamp asks the plugin for its build (see cniconf.BuildStamp).
func (*DoctorHost) PluginStamp(ctx context.Context, path string) (string, error) {
	return cniconf.BuildStamp(ctx, path)
}

var buildInfoRe = regexp.MustCompile(`^ovnhost_build_info\{[^}]*version="([^"]*)"`)

// DaemonStamp reads ovnhost_build_info{version="..."} from the running
// daemon's /metrics; "" when the daemon does not answer.
func (h *DoctorHost) DaemonStamp() (string, error) {
	if h.healthAddr == "" {
		return "", nil
	}
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + h.healthAddr + "/metrics")
	if err != nil {
		return "", nil // not running
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if m := buildInfoRe.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", sc.Err()
}

// ScanCNIConf reads the CNI conf dir.
func (*DoctorHost) ScanCNIConf(dir, ours string) (*cniconf.Report, error) {
	return cniconf.Scan(dir, ours)
}

// Firewalld looks for firewalld through its pid file, then its D-Bus name
// on the system bus, then among the processes.
func (*DoctorHost) Firewalld() (bool, string, error) {
	for _, pf := range []string{"/run/firewalld/firewalld.pid", "/var/run/firewalld/firewalld.pid"} {
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if isFirewalld(pid) {
			return true, fmt.Sprintf("pid %d from %s", pid, pf), nil
		}
	}
	addr := SystemBusAddress()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	owned, berr := nameHasOwner(ctx, addr, FirewalldBusName)
	cancel()
	if berr == nil && owned {
		return true, FirewalldBusName + " is owned on the system bus", nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, "", err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if isFirewalld(pid) {
			return true, fmt.Sprintf("process %d", pid), nil
		}
	}
	return false, "", nil
}

// isFirewalld checks the command line, not just the pid (pids are reused).
func isFirewalld(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return firewalldCmdline(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"))
}

// firewalldCmdline recognises firewalld itself ("/usr/sbin/firewalld ..."
// or "python3 -s /usr/sbin/firewalld ..."), not a command that merely
// names it (grep firewalld, systemctl status firewalld).
func firewalldCmdline(args []string) bool {
	if len(args) == 0 {
		return false
	}
	if filepath.Base(args[0]) == "firewalld" {
		return true
	}
	if !strings.HasPrefix(filepath.Base(args[0]), "python") {
		return false
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		return filepath.Base(a) == "firewalld"
	}
	return false
}

// IptablesSave runs iptables-legacy-save or iptables-nft-save, or plain
// iptables-save when backend is "" (iptables before 1.8 has only that).
// These only READ the kernel's rules; doctor never runs a command that
// changes them.
func (h *DoctorHost) IptablesSave(backend string, v6 bool) (string, error) {
	prefix := "iptables-"
	if v6 {
		prefix = "ip6tables-"
	}
	name := prefix + backend + "-save"
	if backend == "" {
		name = prefix + "save"
	}
	// Not Host.LookPath: the xtables multi-call binaries dispatch on the
	// name they are run by, so the symlink must not be resolved.
	p := ""
	for _, d := range h.binDirs {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
			p = filepath.Join(d, name)
			break
		}
	}
	if p == "" {
		return "", fmt.Errorf("%s not found in %s", name, strings.Join(h.binDirs, ":"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// ClockSync reads the kernel's NTP state (adjtimex without changing it).
func (*DoctorHost) ClockSync() (bool, time.Duration, error) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return false, 0, err
	}
	maxErr := time.Duration(tx.Maxerror) * time.Microsecond
	return state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0, maxErr, nil
}

// Now is the current time.
func (*DoctorHost) Now() time.Time { return time.Now() }

// CertValidity reads the first certificate of a PEM file.
func (*DoctorHost) CertValidity(path string) (time.Time, time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return time.Time{}, time.Time{}, errors.New("no certificate in the file")
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		return c.NotBefore, c.NotAfter, nil
	}
}

// Hostname is the kernel's host name.
func (*DoctorHost) Hostname() (string, error) { return os.Hostname() }

// ControllerSocket finds ovn-controller's control socket: ovn-controller
// 23.03 has no --unixctl flag and names it ovn-controller.<pid>.ctl in its
// run dir. The pid is trusted only if /proc/<pid>/cmdline is ovn-controller.
func (*DoctorHost) ControllerSocket(dirs []string) (string, error) {
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "ovn-controller.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isProcess(pid, "ovn-controller") {
				s := filepath.Join(d, fmt.Sprintf("ovn-controller.%d.ctl", pid))
				if _, err := os.Stat(s); err == nil {
					return s, nil
				}
			}
		}
		socks, _ := filepath.Glob(filepath.Join(d, "ovn-controller.*.ctl"))
		for _, s := range socks {
			mid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s), "ovn-controller."), ".ctl")
			if pid, err := strconv.Atoi(mid); err == nil && isProcess(pid, "ovn-controller") {
				return s, nil
			}
		}
	}
	return "", fs.ErrNotExist
}

func isProcess(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	arg0, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(arg0)) == name
}

// Pidfile reads a pidfile and checks the process behind it.
func (*DoctorHost) Pidfile(pidfile, name string) (int, bool) {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return pid, isProcess(pid, name)
}

// ARPProbe sends one ARP probe in the current network namespace.
func (*DoctorHost) ARPProbe(iface string, ip netip.Addr, wait time.Duration) ([]string, error) {
	return ARPProbeIn(netns.None(), iface, ip, wait)
}

// DialUnix checks that something accepts connections on a unix socket.
func (*DoctorHost) DialUnix(path string, timeout time.Duration) error {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// Statfs reads the filesystem of path.
func (*DoctorHost) Statfs(path string) (uint64, uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// Owner stats path without following a final symlink.
func (*DoctorHost) Owner(path string) (int, int, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, err
	}
	return int(st.Uid), int(st.Gid), nil
}

// KernelLog reads every record /dev/kmsg holds now: one record per read,
// non-blocking, so the end of the buffer is EAGAIN instead of a wait.
func (*DoctorHost) KernelLog() ([]string, error) {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []string
	buf := make([]byte, 8192)
	for len(out) < 100000 {
		n, err := unix.Read(fd, buf)
		switch {
		case err == unix.EAGAIN:
			return out, nil
		case err == unix.EPIPE:
			continue // records overwritten while reading: go on with the next
		case err != nil:
			return out, err
		case n == 0:
			return out, nil
		}
		out = append(out, strings.TrimRight(string(buf[:n]), "\n"))
	}
	return out, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcessStarted reads field 22 (starttime) of /proc/<pid>/stat.
func (*DoctorHost) ProcessStarted(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStartTime(string(b))
}

// parseStartTime takes the fields after the command name, which is in
// parentheses and may hold spaces and parentheses itself.
func parseStartTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/<pid>/stat: %.60q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): starttime, field 22, is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/<pid>/stat has %d fields after the name, want at least 20", len(f))
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/<pid>/stat starttime %q: %v", f[19], err)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
