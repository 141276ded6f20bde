package packaging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// runtimeMode is a Talos node booted from disk (validation.RuntimeMode).
type runtimeMode struct{}

func (runtimeMode) String() string        { return "metal" }
func (runtimeMode) RequiresInstall() bool { return true }
func (runtimeMode) InContainer() bool     { return false }

func TestTalosMachineConfigPatch(t *testing.T) {
	path := filepath.Join(testenv.RepoRoot(), "talos-extension", "machine-config-patch.yaml")
	patch, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("ovnhost-test", "https://192.0.2.1:6443", "1.34.1", generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(patch []byte) (string, error) {
		cfg, err := in.Config(machine.TypeWorker)
		if err != nil {
			t.Fatal(err)
		}
		p, err := configpatcher.LoadPatch(patch)
		if err != nil {
			return "", err
		}
		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
		if err != nil {
			return "", err
		}
		b, err := out.Bytes()
		if err != nil {
			return "", err
		}
		prov, err := configloader.NewFromBytes(b)
		if err != nil {
			return "", err
		}
		if _, err := prov.Validate(runtimeMode{}); err != nil {
			return "", err
		}
		var mods []string
		for _, m := range prov.Machine().Kernel().Modules() {
			mods = append(mods, m.Name())
		}
		var env []string
		var files []string
		for _, s := range prov.ExtensionServiceConfigs() {
			if s.Name() == "ovnhost" {
				env = s.Environment()
				for _, f := range s.ConfigFiles() {
					files = append(files, f.MountPath())
				}
			}
		}
		return strings.Join([]string{
			"modules=" + strings.Join(mods, ","),
			"cni=" + prov.Cluster().Network().CNI().Name(),
			"files=" + strings.Join(files, ","),
			"env=" + strings.Join(env, " "),
		}, "\n"), nil
	}
	got, err := apply(patch)
	if err != nil {
		t.Fatalf("Talos rejects talos-extension/machine-config-patch.yaml: %v", err)
	}
	for _, want := range []string{"modules=openvswitch", "cni=none", "files=/etc/ovnhost/kubeconfig", "NODE_NAME=", "KUBECONFIG=/etc/ovnhost/kubeconfig"} {
		if !strings.Contains(got, want) {
			t.Errorf("patched config lacks %q:\n%s", want, got)
		}
	}
	// The service's environment, with a real node name, is the daemon's.
	var env []string
	for _, kv := range strings.Fields(strings.TrimPrefix(got[strings.Index(got, "env="):], "env=")) {
		if strings.HasPrefix(kv, "NODE_NAME=") {
			kv = "NODE_NAME=node1"
		}
		env = append(env, kv)
	}
	if err := loadConfig(env, nil); err != nil {
		t.Errorf("ovnhost rejects the ExtensionServiceConfig environment: %v", err)
	}
	// A misspelled key must not pass silently.
	typo := bytes.Replace(patch, []byte("    modules:"), []byte("    modlues:"), 1)
	if _, err := apply(typo); err == nil {
		t.Error("Talos accepted a patch with a misspelled key")
	}
}
