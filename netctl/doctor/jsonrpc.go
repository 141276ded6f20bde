package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// A minimal JSON-RPC 1.0 client for the OVSDB protocol (RFC 7047) and the
// OVS unixctl protocol, which use the same framing: one JSON object per
// message, no delimiter. Doctor only asks one-shot questions (list_dbs, a
// select, connection-status), for which a cache-building client would be
// wasteful.

// TLSFiles are the SSL key, certificate and CA for ssl: remotes.
type TLSFiles struct{ Key, Cert, CA string }

type rpcRequest struct {
	Method string `json:"method"`
	Params []any  `json:"params"`
	ID     any    `json:"id"`
}

type rpcMessage struct {
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	ID     any             `json:"id"`
}

// dialRemote opens an OVSDB-style remote: unix:PATH, tcp:IP:PORT or
// ssl:IP:PORT.
func dialRemote(ctx context.Context, remote string, tf TLSFiles) (net.Conn, error) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(remote), ":")
	if !ok {
		return nil, fmt.Errorf("%q: no scheme", remote)
	}
	var d net.Dialer
	switch scheme {
	case "unix":
		return d.DialContext(ctx, "unix", rest)
	case "tcp":
		return d.DialContext(ctx, "tcp", rest)
	case "ssl":
		cfg, err := tlsConfig(tf)
		if err != nil {
			return nil, err
		}
		td := tls.Dialer{NetDialer: &d, Config: cfg}
		return td.DialContext(ctx, "tcp", rest)
	}
	return nil, fmt.Errorf("%q: unknown scheme %q", remote, scheme)
}

func tlsConfig(tf TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(tf.Cert, tf.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the SSL key pair: %w", err)
	}
	ca, err := os.ReadFile(tf.CA)
	if err != nil {
		return nil, fmt.Errorf("reading the SSL CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate", tf.CA)
	}
	// OVN certificates name the node or role (CN), not the address we dial:
	// verify the chain against the CA and skip the host name, as OVS does.
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no peer certificate")
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			inter := x509.NewCertPool()
			for _, r := range raw[1:] {
				if c, err := x509.ParseCertificate(r); err == nil {
					inter.AddCert(c)
				}
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		}}, nil
}

// call sends one request on a fresh connection and returns its result,
// answering the server's echo requests meanwhile.
func call(ctx context.Context, remote string, tf TLSFiles, method string, params ...any) (json.RawMessage, error) {
	conn, err := dialRemote(ctx, remote, tf)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if params == nil {
		params = []any{}
	}
	enc := json.NewEncoder(conn)
	if err := enc.Encode(rpcRequest{Method: method, Params: params, ID: 1}); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(conn)
	for {
		var m rpcMessage
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("reading the reply to %s: %w", method, err)
		}
		if m.Method == "echo" {
			_ = enc.Encode(map[string]any{"result": json.RawMessage(orEmpty(m.Params)), "error": nil, "id": m.ID})
			continue
		}
		if m.Method != "" {
			continue // a notification
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, fmt.Errorf("%s: %s", method, m.Error)
		}
		return m.Result, nil
	}
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("[]")
	}
	return b
}

// listDBs asks an ovsdb-server for its databases.
func listDBs(ctx context.Context, remote string, tf TLSFiles) ([]string, error) {
	res, err := call(ctx, remote, tf, "list_dbs")
	if err != nil {
		return nil, err
	}
	var dbs []string
	err = json.Unmarshal(res, &dbs)
	return dbs, err
}

// selectRows runs a select of columns on table and returns the rows.
func selectRows(ctx context.Context, remote string, tf TLSFiles, db, table string, columns ...string) ([]map[string]json.RawMessage, error) {
	op := map[string]any{"op": "select", "table": table, "where": []any{}, "columns": columns}
	res, err := call(ctx, remote, tf, "transact", db, op)
	if err != nil {
		return nil, err
	}
	var results []struct {
		Rows    []map[string]json.RawMessage `json:"rows"`
		Error   string                       `json:"error"`
		Details string                       `json:"details"`
	}
	if err := json.Unmarshal(res, &results); err != nil {
		return nil, err
	}
	if len(results) != 1 {
		return nil, fmt.Errorf("select %s: %d results", table, len(results))
	}
	if results[0].Error != "" {
		return nil, fmt.Errorf("select %s: %s: %s", table, results[0].Error, results[0].Details)
	}
	return results[0].Rows, nil
}

// ovsdbString decodes a string column (an atom or a one-element set).
func ovsdbString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var set []json.RawMessage
	if json.Unmarshal(raw, &set) == nil && len(set) == 2 {
		var tag string
		_ = json.Unmarshal(set[0], &tag)
		if tag == "set" {
			var elems []string
			if json.Unmarshal(set[1], &elems) == nil && len(elems) > 0 {
				return elems[0]
			}
		}
	}
	return ""
}

// ovsdbMap decodes a map column of strings.
func ovsdbMap(raw json.RawMessage) map[string]string {
	var pair []json.RawMessage
	if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
		return nil
	}
	var tag string
	if json.Unmarshal(pair[0], &tag) != nil || tag != "map" {
		return nil
	}
	var kvs [][2]string
	if json.Unmarshal(pair[1], &kvs) != nil {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv[0]] = kv[1]
	}
	return m
}

// ovsdbUUIDs decodes a column of references (a uuid or a set of uuids).
func ovsdbUUIDs(raw json.RawMessage) []string {
	var pair []json.RawMessage
	if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
		return nil
	}
	var tag string
	_ = json.Unmarshal(pair[0], &tag)
	switch tag {
	case "uuid":
		var u string
		_ = json.Unmarshal(pair[1], &u)
		return []string{u}
	case "set":
		var elems [][2]string
		_ = json.Unmarshal(pair[1], &elems)
		var out []string
		for _, e := range elems {
			out = append(out, e[1])
		}
		return out
	}
	return nil
}

// unixctl calls a command on an OVS/OVN daemon's control socket.
func unixctl(ctx context.Context, sock, command string, args ...string) (string, error) {
	params := make([]any, len(args))
	for i, a := range args {
		params[i] = a
	}
	res, err := call(ctx, "unix:"+sock, TLSFiles{}, command, params...)
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(res, &s); err != nil {
		return string(res), nil
	}
	return s, nil
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
