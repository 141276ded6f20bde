// Package unixctl talks to the control socket of an OVS or OVN daemon (what
// ovs-appctl does): one JSON-RPC request per connection over a unix socket.
package unixctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

type request struct {
	Method string   `json:"method"`
	Params []string `json:"params"`
	ID     int      `json:"id"`
}

type response struct {
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	ID     int             `json:"id"`
}

// Call runs command with args on the daemon behind socket and returns its
// text reply. A daemon that exits as a result (the "exit" command) may close
// the connection before answering; that is not an error.
func Call(ctx context.Context, socket, command string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", fmt.Errorf("unixctl %s: %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if args == nil {
		args = []string{}
	}
	if err := json.NewEncoder(conn).Encode(request{Method: command, Params: args}); err != nil {
		return "", fmt.Errorf("unixctl %s %s: %w", socket, command, err)
	}
	var resp response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		if command == "exit" {
			return "", nil
		}
		return "", fmt.Errorf("unixctl %s %s: reading reply: %w", socket, command, err)
	}
	if len(resp.Error) > 0 && string(resp.Error) != "null" {
		var msg string
		if json.Unmarshal(resp.Error, &msg) != nil {
			msg = string(resp.Error)
		}
		return "", fmt.Errorf("unixctl %s %s: %s", socket, command, msg)
	}
	var out string
	if len(resp.Result) > 0 && string(resp.Result) != "null" {
		if json.Unmarshal(resp.Result, &out) != nil {
			out = string(resp.Result)
		}
	}
	return out, nil
}

// Echo sends the JSON-RPC "echo" that every OVSDB server answers on its
// database socket (the liveness probe of RFC 7047) and checks the reply.
func Echo(ctx context.Context, socket string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("echo %s: %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if err := json.NewEncoder(conn).Encode(map[string]any{"method": "echo", "params": []string{"ovnhost"}, "id": "ovnhost-probe"}); err != nil {
		return fmt.Errorf("echo %s: %w", socket, err)
	}
	var resp struct {
		Result []string        `json:"result"`
		Error  json.RawMessage `json:"error"`
		ID     string          `json:"id"`
	}
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return fmt.Errorf("echo %s: reading reply: %w", socket, err)
	}
	if resp.ID != "ovnhost-probe" || len(resp.Result) != 1 || resp.Result[0] != "ovnhost" {
		return fmt.Errorf("echo %s: unexpected reply (id %q, result %v, error %s)", socket, resp.ID, resp.Result, resp.Error)
	}
	return nil
}
