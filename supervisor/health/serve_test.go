package health

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestServeAndStop(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if stop, err := New().Serve("", log); err != nil || stop == nil {
		t.Fatalf("no address: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// A taken port is an error.
	if _, err := New().Serve(addr, log); err == nil {
		t.Fatal("serving on a taken port succeeded")
	}
	l.Close()
	r := New()
	r.Register("x")
	stop, err := r.Serve(addr, log)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), "x") {
		t.Fatalf("/readyz with a child not ready: %d %q", resp.StatusCode, body)
	}
	stop()
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("still serving after stop")
	}
}
