package qemuvm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"text/template"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// initTemplate is the initramfs /init (busybox sh as PID 1). Any failure
// before switch_root prints why on the console and ends PID 1, which
// panics the kernel; panic=-1 and -no-reboot then end qemu, so the host
// sees the exit and the console at once instead of a boot timeout.
var initTemplate = template.Must(template.New("init").Parse(`#!/bin/sh
export PATH=/bin
/bin/busybox --install -s /bin
fail() { echo "qemuvm-init: $*"; exit 1; }
mark() { read up idle < /proc/uptime; echo "qemuvm-init: $* at ${up}s"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mark start
while read m; do
	[ -n "$m" ] || continue
	insmod /modules/$m || fail "insmod $m"
done < /modules/order
mark "modules loaded"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || fail "mount the host root over 9p"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "overlay on the host root"
R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs -o mode=755 tmpfs $R/run
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
for d in {{.StateDirs}}; do mkdir -p $R$d && mount -t tmpfs -o mode=755 tmpfs $R$d || fail "tmpfs on $d"; done
mkdir -p $R/.host && mount --bind /lower $R/.host
{{if .ModDir}}mkdir -p $R/lib/modules && ln -sfn {{.ModDir}} $R/lib/modules/{{.Release}} || fail "module tree"
{{end}}hostname {{.Name}}
echo {{.Name}} > $R/etc/hostname
printf '127.0.0.1\tlocalhost\n127.0.1.1\t{{.Name}}\n' > $R/etc/hosts
cp /vmagent $R/.vmagent || fail "copy vmagent"
mark "root ready"
{{if .Systemd}}mkdir -p $R/etc/systemd/system/multi-user.target.wants
cat > $R/etc/systemd/system/vmagent.service <<'EOF'
[Unit]
Description=qemuvm test agent (control channel to the host)
DefaultDependencies=no
After=local-fs.target

[Service]
ExecStart=/.vmagent
KillMode=process
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
EOF
ln -sf ../vmagent.service $R/etc/systemd/system/multi-user.target.wants/vmagent.service
{{range .Mask}}ln -sfn /dev/null $R/etc/systemd/system/{{.}} || fail "mask {{.}}"
{{end}}: > $R/etc/machine-id
exec switch_root $R /lib/systemd/systemd
{{else}}exec switch_root $R /.vmagent
{{end}}`))

func initScript(cfg Config) string {
	data := struct {
		Name, StateDirs, ModDir, Release string
		Systemd                          bool
		Mask                             []string
	}{Name: cfg.Name, StateDirs: strings.Join(StateDirs, " "), Release: cfg.Kernel.Release, Systemd: cfg.Systemd, Mask: cfg.Mask}
	if !cfg.NoModuleTree {
		data.ModDir = cfg.Kernel.ModDir
	}
	var b bytes.Buffer
	if err := initTemplate.Execute(&b, data); err != nil {
		panic(err) // the template is fixed; data are plain strings
	}
	return b.String()
}

var (
	agentOnce sync.Once
	agentData []byte
	agentErr  error
)

// agentBinary builds vmagent (static) once per test binary.
func agentBinary() ([]byte, error) {
	agentOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		src := filepath.Dir(file)
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			if gobin, err = exec.LookPath("go"); err != nil {
				agentErr = fmt.Errorf("go toolchain not found to build vmagent: %w", err)
				return
			}
		}
		tmp, err := os.MkdirTemp("", "vmagent-")
		if err != nil {
			agentErr = err
			return
		}
		defer os.RemoveAll(tmp)
		out := filepath.Join(tmp, "vmagent")
		cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./vmagent")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("go build vmagent: %v: %s", err, b)
			return
		}
		agentData, agentErr = os.ReadFile(out)
	})
	return agentData, agentErr
}

var (
	toolMu    sync.Mutex
	toolBuilt = map[string]string{}
)

// GoBinary builds a main package of this module (static, e.g.
// "./tests/kernel/vmprobe" relative to the module root) into the cache,
// where the guest sees it at the same path, and returns that path.
func GoBinary(t testing.TB, pkg string) string {
	t.Helper()
	toolMu.Lock()
	defer toolMu.Unlock()
	if p := toolBuilt[pkg]; p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	dir := filepath.Join(CacheRoot(), "bin")
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", out+".new", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	if err := os.Rename(out+".new", out); err != nil {
		t.Fatal(err)
	}
	toolBuilt[pkg] = out
	return out
}
