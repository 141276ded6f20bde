package packaging

import (
	"bufio"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/config"
)

var envLine = regexp.MustCompile(`^#?([A-Z][A-Z0-9_]*)=(.*)$`)

// sysconfigEnv returns the assignments of the sysconfig file, including the
// commented-out examples: every example must be a valid setting too.
func sysconfigEnv(content string) (env []string, extraArgs string) {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		m := envLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		if m[1] == "EXTRA_ARGS" {
			extraArgs = m[2]
			continue
		}
		env = append(env, m[1]+"="+m[2])
	}
	return env, extraArgs
}

func loadConfig(env []string, args []string) error {
	_, err := config.Load(args, env, io.Discard)
	return err
}

// TestSysconfigIsValidConfiguration feeds /etc/sysconfig/ovnhost, with every
// example uncommented, to the daemon's own configuration loader.
func TestSysconfigIsValidConfiguration(t *testing.T) {
	env, extra := sysconfigEnv(readRepo(t, "systemd/ovnhost.sysconfig"))
	if len(env) < 10 {
		t.Fatalf("only %d settings found in the sysconfig file", len(env))
	}
	if err := loadConfig(env, strings.Fields(extra)); err != nil {
		t.Fatalf("ovnhost rejects its own sysconfig file:\n%v", err)
	}
	// A typo in an OVNHOST_ name is an error, not silence.
	if err := loadConfig(append(env, "OVNHOST_HEALTH_ADRR=127.0.0.1:1"), nil); err == nil {
		t.Fatal("the loader accepted a misspelled OVNHOST_ variable")
	}
}
