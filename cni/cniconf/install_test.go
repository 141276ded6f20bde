package cniconf

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// fakePortmap writes a portmap plugin into dir that answers CNI_COMMAND=VERSION
// with the given supported versions (as containernetworking-plugins' does).
func fakePortmap(t *testing.T, dir string, versions string) string {
	t.Helper()
	p := filepath.Join(dir, PortmapType)
	script := "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] || exit 1\ncat >/dev/null\n" +
		`echo '{"cniVersion":"1.0.0","supportedVersions":[` + versions + `]}'` + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type chain struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

func parseChain(t *testing.T, b []byte) chain {
	t.Helper()
	var c chain
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("conflist %s: %v", b, err)
	}
	return c
}

func TestRender(t *testing.T) {
	for _, v := range []string{"", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		for _, pm := range []bool{false, true} {
			raw := Render("/run/x.sock", v, pm)
			if !bytes.Equal(raw, Render("/run/x.sock", v, pm)) {
				t.Fatal("not deterministic")
			}
			c := parseChain(t, raw)
			want := 1
			if pm {
				want = 2
			}
			if len(c.Plugins) != want || c.Plugins[0]["type"] != "ovnhost-cni" || c.Plugins[0]["socket"] != "/run/x.sock" {
				t.Fatalf("%s portmap=%v: plugins %v", v, pm, c.Plugins)
			}
			if pm {
				p := c.Plugins[1]
				caps, _ := p["capabilities"].(map[string]any)
				if p["type"] != "portmap" || p["snat"] != true || caps["portMappings"] != true || len(p) != 3 {
					t.Fatalf("portmap entry %v", p)
				}
			}
			// libcni loads it, and passes port mappings only to portmap.
			l, err := libcni.ConfListFromBytes(raw)
			if err != nil || len(l.Plugins) != want {
				t.Fatalf("libcni: %v %+v", err, l)
			}
			if pm && !l.Plugins[1].Network.Capabilities["portMappings"] {
				t.Fatalf("libcni sees no portMappings capability: %+v", l.Plugins[1].Network)
			}
			// doctor and the server's report: ours, and fine.
			r := Analyze("/etc/cni/net.d", []string{Conflist}, func(string) ([]byte, error) { return raw, nil }, "")
			if r.Status != Pass || !r.Files[0].Ours {
				t.Fatalf("cniconf on %s: %s %s", raw, r.Status, r.Found)
			}
		}
	}
}

func newTestInstaller(t *testing.T, version string) *Installer {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src-ovnhost-cni")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n# ovnhost-cni\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return NewInstaller(InstallOptions{Socket: "/run/x.sock", BinDir: filepath.Join(dir, "bin"), ConfDir: filepath.Join(dir, "conf"), Version: version,
		PluginSource: src, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func (in *Installer) installed(t *testing.T) chain {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(in.confDir, Conflist))
	if err != nil {
		t.Fatal(err)
	}
	return parseChain(t, raw)
}

func TestInstallChainsPortmapWhenPresent(t *testing.T) {
	for _, tc := range []struct {
		name, version, portmap string // portmap: supported versions, "-" none
		chained                bool
	}{
		{"absent", "0.4.0", "-", false},
		{"present", "0.4.0", `"0.3.1","0.4.0","1.0.0"`, true},
		{"present-default-version", "", `"0.4.0","1.0.0"`, true},
		{"too-old-for-1.1.0", "1.1.0", `"0.3.1","0.4.0","1.0.0"`, false},
		{"new-enough-for-1.1.0", "1.1.0", `"1.0.0","1.1.0"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newTestInstaller(t, tc.version)
			if err := os.MkdirAll(in.binDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.portmap != "-" {
				fakePortmap(t, in.binDir, tc.portmap)
			}
			if err := in.installAll(); err != nil {
				t.Fatal(err)
			}
			c := in.installed(t)
			if got := len(c.Plugins) == 2 && c.Plugins[1]["type"] == "portmap"; got != tc.chained {
				t.Fatalf("chained %v, want %v: %v", got, tc.chained, c.Plugins)
			}
			if !bytes.Equal(mustRead(t, filepath.Join(in.confDir, Conflist)), Render(in.socket, in.version, tc.chained)) {
				t.Fatal("installed conflist is not ConflistChain's")
			}
		})
	}
	// A portmap that is not executable, or does not answer, is not chained.
	in := newTestInstaller(t, "0.4.0")
	_ = os.MkdirAll(in.binDir, 0o755)
	_ = os.WriteFile(filepath.Join(in.binDir, PortmapType), []byte("#!/bin/sh\nexit 3\n"), 0o755)
	if err := in.installAll(); err != nil {
		t.Fatal(err)
	}
	if c := in.installed(t); len(c.Plugins) != 1 {
		t.Fatalf("a failing portmap was chained: %v", c.Plugins)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWatchFollowsPortmap: portmap installed or removed while the daemon
// runs rewrites the conflist; restoring a changed conflist keeps the chain.
func TestWatchFollowsPortmap(t *testing.T) {
	in := newTestInstaller(t, "0.4.0")
	if err := in.installAll(); err != nil {
		t.Fatal(err)
	}
	w, err := in.startWatch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.watch(ctx, w); close(done) }()
	defer func() { cancel(); <-done }()
	conf := filepath.Join(in.confDir, Conflist)
	waitFor := func(what string, want []byte) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !bytes.Equal(mustRead(t, conf), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: conflist is\n%s\nwant\n%s", what, mustRead(t, conf), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	with, without := Render(in.socket, in.version, true), Render(in.socket, in.version, false)
	waitFor("start", without)

	fakePortmap(t, in.binDir, `"0.4.0"`)
	waitFor("portmap installed", with)

	if err := os.WriteFile(conf, []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("conflist overwritten", with)

	if err := os.Remove(filepath.Join(in.binDir, PortmapType)); err != nil {
		t.Fatal(err)
	}
	waitFor("portmap removed", without)
}

// TestInstallProbesRealPortmap: Debian's containernetworking-plugins portmap
// answers the VERSION probe and is chained at the default cniVersion.
func TestInstallProbesRealPortmap(t *testing.T) {
	const real = "/usr/lib/cni/portmap"
	bin, err := os.ReadFile(real)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("%s: %v (Debian package containernetworking-plugins, installed by make deps)", real, err)
		}
		t.Skipf("%s: %v (Debian package containernetworking-plugins)", real, err)
	}
	for _, v := range []string{"", "0.4.0", "1.0.0"} {
		in := newTestInstaller(t, v)
		_ = os.MkdirAll(in.binDir, 0o755)
		if err := os.WriteFile(filepath.Join(in.binDir, PortmapType), bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if !in.portmapUsable() {
			t.Fatalf("cniVersion %q: %s not usable", v, real)
		}
	}
}

// TestInstallerWithMultus: Multus's configuration sorts before ours and
// delegates to it (what multus-cni's thin entrypoint writes: a copy of our
// conflist as its first delegate). The installer leaves Multus's file alone,
// keeps ours in place, and warns only when Multus delegates elsewhere.
func TestInstallerWithMultus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delegate func(in *Installer) string
		warn     string
	}{
		{"delegates to ovnhost", func(in *Installer) string { return string(Render(in.socket, in.version, false)) }, ""},
		{"delegates to flannel", func(*Installer) string { return `{"name":"cbr0","plugins":[{"type":"flannel"}]}` }, "not to ovnhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			in := newTestInstaller(t, "0.4.0")
			in.log = slog.New(slog.NewTextHandler(&logs, nil))
			if err := os.MkdirAll(in.confDir, 0o755); err != nil {
				t.Fatal(err)
			}
			multus := []byte(`{"cniVersion":"0.4.0","name":"multus-cni-network","type":"multus","kubeconfig":"/k","delegates":[` + tc.delegate(in) + `]}`)
			mp := filepath.Join(in.confDir, "00-multus.conf")
			if err := os.WriteFile(mp, multus, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := in.installAll(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mustRead(t, mp), multus) {
				t.Fatal("the installer changed Multus's configuration")
			}
			if c := in.installed(t); c.Plugins[0]["type"] != "ovnhost-cni" {
				t.Fatalf("our conflist: %v", c.Plugins)
			}
			got := logs.String()
			conflict := bytes.Contains(logs.Bytes(), []byte("conflicting CNI configuration"))
			if tc.warn == "" && conflict {
				t.Fatalf("Multus delegating to ovnhost reported as a conflict:\n%s", got)
			}
			if tc.warn != "" && (!conflict || !bytes.Contains(logs.Bytes(), []byte(tc.warn))) {
				t.Fatalf("want a conflict warning with %q, got:\n%s", tc.warn, got)
			}
		})
	}
}

// TestWatchJudgesMultusWhenWritten: Multus's file appearing while the daemon
// runs is judged once its writes settle, not at its empty Create (which
// would read as an unparsable configuration sorting first).
func TestWatchJudgesMultusWhenWritten(t *testing.T) {
	var logs syncBuffer
	in := newTestInstaller(t, "0.4.0")
	in.log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := in.installAll(); err != nil {
		t.Fatal(err)
	}
	w, err := in.startWatch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.watch(ctx, w); close(done) }()
	defer func() { cancel(); <-done }()
	f, err := os.Create(filepath.Join(in.confDir, "00-multus.conf"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a writer between its create and its write
	if _, err := f.WriteString(`{"cniVersion":"0.4.0","name":"multus-cni-network","type":"multus","kubeconfig":"/k","delegates":[` + string(Render(in.socket, in.version, false)) + `]}`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !logs.contains("delegates the default network to ovnhost") {
		if time.Now().After(deadline) {
			t.Fatalf("no report of Multus delegating to ovnhost:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if logs.contains("conflicting CNI configuration") {
		t.Fatalf("the half-written Multus file was reported as a conflict:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string           { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
func (s *syncBuffer) contains(sub string) bool { return strings.Contains(s.String(), sub) }

func TestWriteAtomicAndConflist(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "ovnhost-cni")
	changed, err := writeAtomic(p, []byte("v1"), 0o755)
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if changed, _ := writeAtomic(p, []byte("v1"), 0o755); changed {
		t.Fatal("same content rewritten")
	}
	_ = os.Chmod(p, 0o644)
	if changed, _ := writeAtomic(p, []byte("v1"), 0o755); !changed {
		t.Fatal("wrong mode not repaired")
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	var c struct {
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(Render("/run/x.sock", "1.1.0", false), &c); err != nil || c.CNIVersion != "1.1.0" || c.Plugins[0]["type"] != "ovnhost-cni" || c.Plugins[0]["socket"] != "/run/x.sock" {
		t.Fatalf("conflist %+v %v", c, err)
	}
}

func TestConflistVersion(t *testing.T) {
	for in, want := range map[string]string{"": "0.4.0", "1.0.0": "1.0.0", "0.3.1": "0.3.1"} {
		var c struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(Render("/run/x.sock", in, false), &c); err != nil || c.CNIVersion != want {
			t.Errorf("Render(%q): cniVersion %q %v, want %s", in, c.CNIVersion, err, want)
		}
	}
	// Every runtime of the support table parses the default.
	if ok, _ := version.GreaterThan(protocol.DefaultConfVersion, "0.4.0"); ok {
		t.Errorf("default %s is newer than libcni 0.8 (dockershim) accepts", protocol.DefaultConfVersion)
	}
	in := NewInstaller(InstallOptions{Version: "1.0.0", PluginSource: "/x"})
	if in.version != "1.0.0" {
		t.Errorf("installer version %q", in.version)
	}
}
