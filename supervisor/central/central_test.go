package central

import (
	"strings"
	"testing"
)

func TestDecideMissing(t *testing.T) {
	members := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	cases := []struct {
		name  string
		self  string
		peers []PeerDB
		want  Action
		cid   string
		err   string
	}{
		{"fresh cluster, bootstrap, all peers joining", "10.0.0.1", []PeerDB{{IP: "10.0.0.2", Answered: true}, {IP: "10.0.0.3", Answered: true}}, Create, "", ""},
		{"bootstrap waits for a silent peer", "10.0.0.1", []PeerDB{{IP: "10.0.0.2", Answered: true}, {IP: "10.0.0.3"}}, Wait, "", ""},
		{"bootstrap wiped, cluster alive", "10.0.0.1", []PeerDB{{IP: "10.0.0.2", Answered: true, ClusterID: "c1"}, {IP: "10.0.0.3"}}, Join, "c1", ""},
		{"other member joins without a cluster yet", "10.0.0.2", []PeerDB{{IP: "10.0.0.1"}, {IP: "10.0.0.3"}}, Join, "", ""},
		{"other member joins the cluster a peer names", "10.0.0.3", []PeerDB{{IP: "10.0.0.1", Answered: true, ClusterID: "c1"}, {IP: "10.0.0.2", Answered: true, ClusterID: "c1"}}, Join, "c1", ""},
		{"split central", "10.0.0.3", []PeerDB{{IP: "10.0.0.1", Answered: true, ClusterID: "c1"}, {IP: "10.0.0.2", Answered: true, ClusterID: "c2"}}, "", "", "different clusters"},
	}
	for _, c := range cases {
		d, err := DecideMissing(c.self, members, c.peers)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || d.Action != c.want || d.ClusterID != c.cid || d.Reason == "" {
			t.Errorf("%s: got %+v, %v; want %s %q", c.name, d, err, c.want, c.cid)
		}
	}
	if d, _ := DecideMissing("10.0.0.1", []string{"10.0.0.1"}, nil); d.Action != Create {
		t.Errorf("single member: %+v", d)
	}
}

func TestAddresses(t *testing.T) {
	if got := raftAddress("fd00::1", NBRaftPort, true); got != "ssl:[fd00::1]:6643" {
		t.Error(got)
	}
	if got := listenRemote("10.0.0.1", 6641, false); got != "ptcp:6641:10.0.0.1" {
		t.Error(got)
	}
	if got := ipOfRaftAddress("tcp:[fd00::1]:6644"); got != "fd00::1" {
		t.Error(got)
	}
	if !Leaving("10.0.0.3", []string{"10.0.0.1", "10.0.0.2"}) || Leaving("10.0.0.2", []string{"10.0.0.1", "10.0.0.2"}) {
		t.Error("Leaving")
	}
}
