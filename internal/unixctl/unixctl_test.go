package unixctl

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// serve answers one request the way OVS's unixctl server does.
func serve(t *testing.T, reply func(req request) response) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.ctl")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req request
		if json.NewDecoder(c).Decode(&req) == nil {
			_ = json.NewEncoder(c).Encode(reply(req))
		}
	}()
	return sock
}

func TestCallReturnsTheResultText(t *testing.T) {
	sock := serve(t, func(r request) response {
		return response{Result: json.RawMessage(`"` + r.Method + " " + strings.Join(r.Params, ",") + `"`), Error: json.RawMessage("null")}
	})
	got, err := Call(context.Background(), sock, "bridge/dump-flows", "br-int")
	if err != nil || got != "bridge/dump-flows br-int" {
		t.Fatalf("Call = %q, %v", got, err)
	}
}

func TestCallReportsTheDaemonsError(t *testing.T) {
	sock := serve(t, func(r request) response {
		return response{Result: json.RawMessage("null"), Error: json.RawMessage(`"no such bridge"`)}
	})
	_, err := Call(context.Background(), sock, "bridge/dump-flows", "br-x")
	if err == nil || !strings.Contains(err.Error(), "no such bridge") {
		t.Fatalf("err = %v, want the daemon's message", err)
	}
}
