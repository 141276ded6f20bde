package runtime_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestPodmanCNI: Debian's podman 4.3.1 with network_backend = "cni" runs
// containers on the network of ovnhost's installed conflist on a standalone
// node (no Kubernetes; podman's CNI backend passes only K8S_POD_NAME, the
// container's name). Two containers get ovnhost addresses,
// ping and talk TCP to each other, and `podman rm` releases everything.
//
// What it takes on this machine (root without CAP_SYS_RESOURCE):
//   - runc, not crun (not installed with podman here; podman picks runc),
//   - containers.conf default_ulimits = [] : podman's default sets
//     RLIMIT_NOFILE to 1048576, above the hard limit root may raise to here
//     ("error setting rlimit type 7: operation not permitted"),
//   - cgroupfs (no systemd as PID 1); --cgroup-parent puts the containers
//     under the harness's cgroup parent, removed by the teardown.
//
// podman runs in the node's network namespace (as containerd does: its CNI
// plugins, portmap included, act there) and the host mount namespace (its
// /run/netns mounts are visible to ovnhost); its storage, run root, runc
// state, tmp dirs, events log and configuration are under the test's
// directory. Outside it podman touches only libcni's result cache
// (/var/lib/cni/results, entries removed at DEL, as with containerd) and
// the shared blob-info cache /var/lib/containers/cache (updated by
// `podman load`, as by skopeo; containers/image takes no other path for root).
func TestPodmanCNI(t *testing.T) {
	e := newEnv(t)
	for _, c := range []string{"podman", "conmon"} {
		if _, err := testenv.LookPath(c); err != nil {
			msg := "prerequisite missing: program " + c + " (Debian package podman)"
			if testenv.Strict() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	podman := lookPath(t, "podman")
	_, bbTar := criruntime.BuildImages(t, e.Dir)
	e.StartNode()

	p := e.newPodman(podman)
	p.run("load", "-i", bbTar)
	if out := p.run("network", "ls", "--format", "{{.Name}} {{.Driver}}"); !strings.Contains(out, "ovnhost") {
		t.Fatalf("podman does not list the ovnhost network from %s:\n%s", e.Path("cni-conf"), out)
	}
	start := func(name string, command ...string) string {
		return p.run(append([]string{"run", "-d", "--name", name, "--network", "ovnhost", "--cgroup-parent", e.CgroupParent, criruntime.BusyboxRef}, command...)...)
	}
	a := start("pa", "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
	b := start("pb", "sh", "-c", "echo hello-from-podman-b > /www/index.html && exec httpd -f -p 8080 -h /www")
	t.Logf("containers %s %s", a, b)
	cidr := netip.MustParsePrefix("10.16.0.0/16")
	ips := map[string]netip.Addr{}
	for _, name := range []string{"pa", "pb"} {
		out := p.run("inspect", "--format", "{{(index .NetworkSettings.Networks \"ovnhost\").IPAddress}}", name)
		ip, err := netip.ParseAddr(out)
		if err != nil || !cidr.Contains(ip) {
			t.Fatalf("container %s: address %q, want one of ovnhost's %s", name, out, cidr)
		}
		if got := p.run("exec", name, "ip", "-o", "addr", "show", "eth0"); !strings.Contains(got, ip.String()+"/16") {
			t.Fatalf("container %s: eth0 does not carry %s/16:\n%s", name, ip, got)
		}
		ips[name] = ip
	}
	if ips["pa"] == ips["pb"] {
		t.Fatalf("both containers got %s", ips["pa"])
	}
	links, ports := e.PodIfaces()
	if len(links) != 2 || len(ports) != 2 {
		t.Fatalf("want 2 pod veths and 2 OVS ports on the node, got %v %v", links, ports)
	}
	// podman's CNI backend passes K8S_POD_NAME=<container name> (and no
	// namespace): the standalone node names the port <name>.default.
	for _, name := range []string{"pa", "pb"} {
		if !e.LSPExists(name + ".default") {
			t.Fatalf("logical switch port %s.default missing in NB; it has: %s", name,
				run(t, lookPath(t, "ovn-nbctl"), "--db="+e.NBDB(), "--bare", "--columns=name", "list", "Logical_Switch_Port"))
		}
	}
	if out, err := p.cmd("exec", "pa", "ping", "-c", "3", "-i", "0.2", "-W", "2", ips["pb"].String()).CombinedOutput(); err != nil {
		t.Fatalf("ping pa -> pb (%s): %v\n%s\n%s", ips["pb"], err, out, e.Tail("ovnhost.log", 20))
	}
	out, err := p.cmd("exec", "pa", "sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, ips["pb"])).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello-from-podman-b") {
		t.Fatalf("TCP pa -> pb:8080: %v\n%s", err, out)
	}

	p.run("rm", "-f", "-t", "2", "pa", "pb")
	if l, ports := e.PodIfaces(); len(l) != 0 || len(ports) != 0 {
		t.Fatalf("after podman rm: veths %v and OVS ports %v left", l, ports)
	}
	for _, name := range []string{"pa", "pb"} {
		if e.LSPExists(name + ".default") {
			t.Fatalf("logical switch port %s.default left after podman rm", name)
		}
	}
	p.teardown()
	e.TeardownAndCheck(t)
}

type podmanEnv struct {
	e    *env
	bin  string
	conf string
}

// newPodman writes podman's configuration under the test's directory.
func (e *env) newPodman(bin string) *podmanEnv {
	t := e.t
	t.Helper()
	dir := e.Path("podman")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`[containers]
# podman's default RLIMIT_NOFILE (1048576) is above what root may set here.
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %[1]q
static_dir = %[2]q
tmp_dir = %[3]q
volume_path = %[4]q
image_copy_tmp_dir = %[3]q

[network]
network_backend = "cni"
network_config_dir = %[5]q
cni_plugin_dirs = [%[6]q]
`, dir+"/events.log", dir+"/libpod", dir+"/tmp", dir+"/volumes", e.Path("cni-conf"), e.Path("cni-bin"))
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", dir+"/root", dir+"/runroot")
	p := &podmanEnv{e: e, bin: bin, conf: dir + "/containers.conf"}
	for name, body := range map[string]string{"containers.conf": conf, "storage.conf": storage, "registries.conf": "unqualified-search-registries = []\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(p.teardown)
	return p
}

func (p *podmanEnv) cmd(args ...string) *exec.Cmd {
	// runc's state goes under the test's directory too (default /run/runc).
	global := []string{"--net=/run/netns/" + p.e.NS, "--", p.bin, "--runtime-flag", "root=" + p.e.Path("podman", "runc")}
	cmd := exec.Command(lookPath(p.e.t, "nsenter"), append(global, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CONTAINERS_CONF=" + p.conf,
		"CONTAINERS_STORAGE_CONF=" + p.e.Path("podman", "storage.conf"), "CONTAINERS_REGISTRIES_CONF=" + p.e.Path("podman", "registries.conf"),
		"HOME=" + p.e.Path("podman"), "TMPDIR=" + p.e.Path("podman", "tmp")}
	return cmd
}

// run runs podman and returns its trimmed stdout, failing the test on error.
func (p *podmanEnv) run(args ...string) string {
	p.e.t.Helper()
	var stderr strings.Builder
	cmd := p.cmd(args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.e.t.Fatalf("podman %s: %v\n%s%s\n%s", strings.Join(args, " "), err, out, stderr.String(), p.e.Tail("ovnhost.log", 20))
	}
	return strings.TrimSpace(string(out))
}

// teardown removes every container (CNI DEL while ovnhost runs) and
// podman's storage mounts. Idempotent.
func (p *podmanEnv) teardown() {
	if p.e.Node != nil {
		_ = p.cmd("rm", "-af", "-t", "0").Run()
	}
	p.e.UnmountUnder()
}
