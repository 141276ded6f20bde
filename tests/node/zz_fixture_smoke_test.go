package node_test

import "testing"

func TestZZFixtureSmoke(t *testing.T) {
	c := startCluster(t, 3)
	c.ensureNamespace(t, "smoke", map[string]string{"team": "x"})
	p1 := c.addPod(t, 0, "smoke", "p1", map[string]string{"app": "a"}, nil)
	p3 := c.addPod(t, 2, "default", "p3", nil, nil)
	if err := ping(p1.netns, p3.ip, 3); err != nil {
		t.Fatal(err)
	}
	if src, err := c.world.sourceSeen(p3.netns, 5e9); err != nil || src != "192.168.209.2" {
		t.Fatalf("src %q %v", src, err)
	}
	c.deletePod(t, p1)
}
