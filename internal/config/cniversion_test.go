package config

import (
	"errors"
	"strings"
	"testing"
)

func TestCNIVersionSetting(t *testing.T) {
	c, err := load(t, nil, []string{"NODE_NAME=n1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.CNIVersion != "0.4.0" {
		t.Fatalf("default cni-version %q, want 0.4.0 (the highest every supported runtime accepts)", c.CNIVersion)
	}
	for _, tc := range []struct {
		args, env []string
		want      string
	}{
		{[]string{"--cni-version=1.0.0"}, nil, "1.0.0"},
		{nil, []string{"OVNHOST_CNI_VERSION=1.1.0"}, "1.1.0"},
		{[]string{"--cni-version=0.3.1"}, []string{"OVNHOST_CNI_VERSION=1.1.0"}, "0.3.1"},
		{nil, []string{"OVNHOST_CNI_VERSION= 0.3.0 "}, "0.3.0"},
	} {
		c, err := load(t, tc.args, append([]string{"NODE_NAME=n1"}, tc.env...))
		if err != nil || c.CNIVersion != tc.want {
			t.Errorf("%v %v: cni-version %q, %v; want %s", tc.args, tc.env, c.CNIVersion, err, tc.want)
		}
	}
	for _, bad := range []string{"1.2.0", "0.2.0", "v1.0.0", "latest", ""} {
		_, err := load(t, []string{"--cni-version=" + bad}, []string{"NODE_NAME=n1"})
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 {
			t.Errorf("cni-version %q: got %v, want one configuration error", bad, err)
			continue
		}
		e := errs[0]
		if e.Key != "--cni-version" || !strings.Contains(e.Error(), "CNI version") || !strings.Contains(e.Fix, "0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0") {
			t.Errorf("cni-version %q: error %q (key %s) fix %q", bad, e.Error(), e.Key, e.Fix)
		}
	}
}
