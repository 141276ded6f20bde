package cni_test

// The installed conflist driven the way container runtimes drive it:
// through libcni (this module's, and the old ones older runtimes embed,
// built from tests/cni/oldlibcni*), on named network namespaces made like
// `ip netns add` does, on a host that has an eth0 of its own.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// oldLibcnis are the separate modules under tests/cni with an old libcni:
// directory -> what embeds that libcni.
var oldLibcnis = []struct{ dir, env, what string }{
	{"oldlibcni", "OVNHOST_CNI_OLDLIBCNI", "libcni v1.1.2 (containerd 1.6/1.7 via go-cni, podman 4 CNI backend, nerdctl 1.x)"},
	{"oldlibcni08", "OVNHOST_CNI_OLDLIBCNI08", "libcni v0.8.1 (Kubernetes up to 1.23 with dockershim)"},
}

// buildOldLibcnis builds the old-libcni programs before the test binary
// enters its private netns (the first build needs the module proxy) and
// returns the environment that names them (or the build error).
func buildOldLibcnis() []string {
	base := os.Getenv("OVNHOST_CNI_REF_CACHE")
	if base == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		base = filepath.Join(cache, "ovnhost")
	}
	var env []string
	for _, o := range oldLibcnis {
		out := filepath.Join(base, fmt.Sprintf("%s-%s-%s", o.dir, runtime.Version(), runtime.GOARCH), o.dir)
		cmd := exec.Command(goBin(), "build", "-trimpath", "-o", out, ".")
		cmd.Dir = filepath.Join(testenv.RepoRoot(), "tests", "cni", o.dir)
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			env = append(env, o.env+"_ERR="+fmt.Sprintf("go build in %s: %v: %s", cmd.Dir, err, strings.TrimSpace(string(b))))
			continue
		}
		env = append(env, o.env+"="+out)
	}
	return env
}

func oldLibcni(t testing.TB, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" || !fileExists(p) {
		msg := "old libcni program not built: " + os.Getenv(env+"_ERR")
		if testenv.Strict() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// withHostEth0 gives the node an eth0 of its own, as real hosts have: a
// pod's eth0 must never be confused with it (issue 12's CHECK failure).
func withHostEth0(t testing.TB) {
	t.Helper()
	if _, err := netlink.LinkByName("eth0"); err == nil {
		return
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}); err != nil {
		t.Fatalf("host eth0: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("eth0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if l, err := netlink.LinkByName("eth0"); err == nil {
		_ = netlink.LinkSetUp(l)
	}
}

// conflistAt is the installed conflist with cniVersion v ("" as installed).
func (n *node) conflistAt(t testing.TB, v string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.cfg.ConfDir, cniconf.Conflist))
	if err != nil {
		t.Fatalf("installed conflist: %v", err)
	}
	if v == "" {
		return b
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["cniVersion"] = v
	out, _ := json.Marshal(m)
	return out
}

func k8sArgs(name string) [][2]string {
	return [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}
}

// libcniPod is a pod attached through libcni.
type libcniPod struct {
	rt   *libcni.RuntimeConf
	list *libcni.NetworkConfigList
	ip   string
}

func TestLibcniEveryVersion(t *testing.T) {
	n := startNode(t, nodeOpts{})
	withHostEth0(t)
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(n.conflistAt(t, ""), &c); err != nil || c.CNIVersion != "0.4.0" {
		t.Fatalf("installed conflist cniVersion %q (%v), want the default 0.4.0", c.CNIVersion, err)
	}
	// GC and STATUS exist from 1.1.0 on: older versions get the library's error.
	for _, cmd := range []string{"GC", "STATUS"} {
		out := runPlugin(t, n.installedPlugin(), cniCall{Command: cmd, Conf: n.netconf(t, "", nil)})
		if out.Code == 0 || out.Err.Code != 1 || !strings.Contains(out.Err.Msg, "does not allow "+cmd) {
			t.Errorf("%s at 0.4.0: exit %d code %d %q, want error 1", cmd, out.Code, out.Err.Code, out.Err.Msg)
		}
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.cfg.BinDir}, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var pods []*libcniPod
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		name := "lib-v" + strings.ReplaceAll(v, ".", "")
		list, err := libcni.ConfListFromBytes(n.conflistAt(t, v))
		if err != nil {
			t.Fatal(err)
		}
		p := &libcniPod{list: list, rt: &libcni.RuntimeConf{ContainerID: "cid-" + name, NetNS: podnettest.NewNetNS(t, "ovht-"+name), IfName: "eth0", Args: k8sArgs(name)}}
		res, err := cni.AddNetworkList(ctx, list, p.rt)
		if err != nil {
			t.Fatalf("%s: ADD through libcni: %v", v, err)
		}
		if res.Version() != v {
			t.Errorf("%s: ADD answered in version %s", v, res.Version())
		}
		r, err := types100.NewResultFromResult(res)
		if err != nil || len(r.IPs) == 0 || r.IPs[0].Gateway == nil {
			t.Fatalf("%s: ADD result %+v: %v", v, res, err)
		}
		p.ip = r.IPs[0].Address.IP.String()
		if err := ping(t, p.rt.NetNS, r.IPs[0].Gateway.String()); err != nil {
			t.Fatalf("%s: pod to its gateway: %v", v, err)
		}
		if len(pods) > 0 {
			if err := ping(t, p.rt.NetNS, pods[len(pods)-1].ip); err != nil {
				t.Fatalf("%s: pod to the pod of version %s: %v", v, pods[len(pods)-1].list.CNIVersion, err)
			}
		}
		err = cni.CheckNetworkList(ctx, list, p.rt)
		if v == "0.3.1" {
			// CHECK came with 0.4.0: libcni itself refuses it.
			if err == nil || !strings.Contains(err.Error(), "does not support the CHECK command") {
				t.Errorf("%s: CHECK: %v, want libcni's refusal", v, err)
			}
		} else if err != nil {
			t.Errorf("%s: CHECK of a good pod through libcni: %v", v, err)
		}
		if v == "1.1.0" {
			if err := cni.GetStatusNetworkList(ctx, list); err != nil {
				t.Errorf("%s: STATUS: %v", v, err)
			}
		}
		pods = append(pods, p)
	}
	// CHECK notices a broken pod at every version that has CHECK.
	broken := pods[2]
	if b, err := exec.Command("ip", "-n", filepath.Base(broken.rt.NetNS), "addr", "flush", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	if err := cni.CheckNetworkList(ctx, broken.list, broken.rt); err == nil || !strings.Contains(err.Error(), "address "+broken.ip) {
		t.Errorf("CHECK after removing the address: %v", err)
	}
	for _, p := range pods {
		for i := 0; i < 2; i++ {
			if err := cni.DelNetworkList(ctx, p.list, p.rt); err != nil {
				t.Fatalf("%s: DEL #%d through libcni: %v", p.list.CNIVersion, i+1, err)
			}
		}
	}
	n.assertClean(t)
}

// podman and nerdctl pass no Kubernetes arguments: the container ID keys
// the attachment.
func TestLibcniStandaloneWithoutKubernetesArgs(t *testing.T) {
	n := startNode(t, nodeOpts{})
	withHostEth0(t)
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.cfg.BinDir}, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := libcni.ConfListFromBytes(n.conflistAt(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	var pods []*libcniPod
	for i := 0; i < 2; i++ {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), i)))
		id := hex.EncodeToString(sum[:]) // what podman and nerdctl use
		p := &libcniPod{list: list, rt: &libcni.RuntimeConf{ContainerID: id, NetNS: podnettest.NewNetNS(t, "ovht-ctr"), IfName: "eth0"}}
		res, err := cni.AddNetworkList(ctx, list, p.rt)
		if err != nil {
			t.Fatalf("ADD without K8S args: %v", err)
		}
		r, err := types100.NewResultFromResult(res)
		if err != nil || len(r.IPs) == 0 {
			t.Fatalf("ADD result %+v: %v", res, err)
		}
		p.ip = r.IPs[0].Address.IP.String()
		rows := n.selectRows(t, "Interface", ovsdb.NewCondition("name", ovsdb.ConditionEqual, podnet.HostIfName(id, "eth0")))
		if len(rows) != 1 {
			t.Fatalf("OVS interface of container %s: %d rows", id, len(rows))
		}
		ids := rows[0]["external_ids"].(ovsdb.OvsMap).GoMap
		if ids["iface-id"] != id[:12]+".default" || ids["pod_name"] != id[:12] {
			t.Errorf("container %s: external_ids %v, want pod %s in default", id, ids, id[:12])
		}
		if err := cni.CheckNetworkList(ctx, list, p.rt); err != nil {
			t.Errorf("CHECK without K8S args: %v", err)
		}
		if err := ping(t, p.rt.NetNS, r.IPs[0].Gateway.String()); err != nil {
			t.Fatal(err)
		}
		if len(pods) > 0 {
			if err := ping(t, p.rt.NetNS, pods[0].ip); err != nil {
				t.Fatal(err)
			}
		}
		pods = append(pods, p)
	}
	for _, p := range pods {
		if err := cni.DelNetworkList(ctx, list, p.rt); err != nil {
			t.Fatalf("DEL without K8S args: %v", err)
		}
	}
	n.assertClean(t)
	// The address went back to the pool: a new container gets one again.
	p := pods[0]
	if _, err := cni.AddNetworkList(ctx, list, p.rt); err != nil {
		t.Fatalf("ADD again: %v", err)
	}
	if err := cni.DelNetworkList(ctx, list, p.rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(t)
}

// The default conflist with the libcni of older runtimes: ADD, CHECK, DEL.
func TestOldLibcniDefaultVersion(t *testing.T) {
	n := startNode(t, nodeOpts{})
	withHostEth0(t)
	conf := filepath.Join(t.TempDir(), "ovnhost.conflist")
	if err := os.WriteFile(conf, n.conflistAt(t, ""), 0o644); err != nil {
		t.Fatal(err)
	}
	var prev string
	for _, o := range oldLibcnis {
		t.Run(o.dir, func(t *testing.T) {
			bin := oldLibcni(t, o.env)
			name := "old-" + strings.TrimPrefix(o.dir, "oldlibcni")
			if name == "old-" {
				name = "old-v11"
			}
			ns := podnettest.NewNetNS(t, "ovht-"+name)
			cache := t.TempDir()
			run := func(cmd string) string {
				t.Helper()
				out, err := exec.Command(bin, "-cmd", cmd, "-conflist", conf, "-netns", ns, "-id", "cid-"+name,
					"-path", n.cfg.BinDir, "-cache", cache, "-args", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="+name).CombinedOutput()
				if err != nil {
					t.Fatalf("%s (%s) %s: %v\n%s", o.dir, o.what, cmd, err, out)
				}
				return string(out)
			}
			out := run("add")
			var r struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct{ Address, Gateway string }
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil || r.CNIVersion != protocol.DefaultConfVersion || len(r.IPs) == 0 {
				t.Fatalf("%s ADD result: %s (%v)", o.dir, out, err)
			}
			if err := ping(t, ns, r.IPs[0].Gateway); err != nil {
				t.Fatal(err)
			}
			if prev != "" {
				if err := ping(t, ns, prev); err != nil {
					t.Fatal(err)
				}
			}
			prev = strings.Split(r.IPs[0].Address, "/")[0]
			run("check")
			run("del")
			run("del")
			prev = ""
		})
	}
	n.assertClean(t)
}
