package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// allow lets everyone but "mallory" do everything and records what was asked.
type allow struct{ asked []Attributes }

func (a *allow) Check(_ context.Context, req *http.Request, attrs Attributes) (string, int, error) {
	a.asked = append(a.asked, attrs)
	if req.Header.Get("Authorization") == "Bearer mallory" {
		return "mallory", http.StatusForbidden, errors.New(`"mallory" may not`)
	}
	return "alice", http.StatusOK, nil
}

func do(t *testing.T, h http.Handler, method, target, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func errorOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("%d %q: %v", w.Code, w.Body.String(), err)
	}
	return e.Error
}

func TestHandlerGuardsEveryPath(t *testing.T) {
	if w := do(t, Handler(health.New(), Backend{Node: "n1"}, nil, nil), http.MethodGet, api.PathStatus, "x", ""); w.Code != http.StatusForbidden {
		t.Fatalf("no authorizer: %d", w.Code)
	}
	auth := &allow{}
	h := Handler(health.New(), Backend{Node: "n1"}, auth, nil)
	if w := do(t, h, http.MethodPost, api.PathStatus, "x", ""); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodGet {
		t.Fatalf("POST /v1/status: %d", w.Code)
	}
	if w := do(t, h, http.MethodGet, api.PathStatus, "mallory", ""); w.Code != http.StatusForbidden || !strings.Contains(errorOf(t, w), "mallory") {
		t.Fatalf("refused user: %d %s", w.Code, w.Body)
	}
	w := do(t, h, http.MethodGet, api.PathStatus, "x", "")
	var snap api.Snapshot
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &snap) != nil || snap.Version == "" {
		t.Fatalf("status: %d %s", w.Code, w.Body)
	}
	do(t, h, http.MethodGet, api.PathCapture+"?pod=p&namespace=ns", "x", "")
	do(t, h, http.MethodGet, api.PathCapture+"?iface=br-int", "x", "")
	want := []string{`get nodes/diagnostics.ovnhost.io "n1"`, `get nodes/diagnostics.ovnhost.io "n1"`,
		`capture nodes/capture.ovnhost.io "n1"`, `capture nodes/hostcapture.ovnhost.io "n1"`}
	var got []string
	for _, a := range auth.asked {
		got = append(got, a.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("asked %q, want %q", got, want)
	}
}

func TestHandlerBodies(t *testing.T) {
	var gotCapture api.CaptureRequest
	b := Backend{Node: "n1",
		Doctor: func(context.Context) (any, int, error) { return map[string]string{"status": "warn"}, 1, nil },
		Appctl: func(_ context.Context, r api.AppctlRequest) (string, error) {
			if r.Command != "version" {
				return "", BadRequest{errors.New("not read-only")}
			}
			return "ovs-vswitchd 3.1\n", nil
		},
		Capture: func(_ context.Context, r api.CaptureRequest, w io.Writer, started func()) error {
			gotCapture = r
			started()
			_, err := w.Write([]byte("pcap"))
			return err
		}}
	h := Handler(health.New(), b, &allow{}, nil)
	w := do(t, h, http.MethodGet, api.PathDoctor, "x", "")
	if w.Code != http.StatusOK || w.Header().Get(api.HeaderDoctorExitCode) != "1" || !strings.Contains(w.Body.String(), `"warn"`) {
		t.Fatalf("doctor: %d %v %s", w.Code, w.Header(), w.Body)
	}
	w = do(t, h, http.MethodPost, api.PathAppctl, "x", `{"target":"ovs-vswitchd","command":"version"}`)
	var out api.AppctlResult
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil || out.Output != "ovs-vswitchd 3.1\n" {
		t.Fatalf("appctl: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, http.MethodPost, api.PathAppctl, "x", `{"target":"ovs-vswitchd","command":"exit"}`); w.Code != http.StatusBadRequest {
		t.Fatalf("refused command: %d", w.Code)
	}
	if w := do(t, h, http.MethodPost, api.PathAppctl, "x", `{`); w.Code != http.StatusBadRequest || !strings.Contains(errorOf(t, w), "appctl request") {
		t.Fatalf("bad body: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, http.MethodPost, api.PathOVSDB, "x", `{}`); w.Code != http.StatusInternalServerError || !strings.Contains(errorOf(t, w), "not wired") {
		t.Fatalf("unwired ovsdb: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, http.MethodGet, api.PathCapture+"?pod=p&namespace=ns&duration=2h", "x", ""); w.Code != http.StatusBadRequest || !strings.Contains(errorOf(t, w), "at most 1h") {
		t.Fatalf("capture duration: %d %s", w.Code, w.Body)
	}
	q := api.CaptureRequest{Namespace: "ns", Pod: "p", Count: 5, Duration: 30e9}.Query()
	w = do(t, h, http.MethodGet, api.PathCapture+"?"+q.Encode(), "x", "")
	if w.Code != http.StatusOK || w.Body.String() != "pcap" || gotCapture != (api.CaptureRequest{Namespace: "ns", Pod: "p", Count: 5, Duration: 30e9}) {
		t.Fatalf("capture: %d %s %+v", w.Code, w.Body, gotCapture)
	}
	if w := do(t, h, http.MethodGet, api.PathPinger, "x", ""); w.Code != http.StatusNotFound {
		t.Fatalf("no pinger: %d", w.Code)
	}
}
