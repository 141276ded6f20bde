package hostcheck

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb/serverdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// The real host's OVSDB and unixctl questions. Doctor's questions are
// one-shot: each dials one remote through libovsdb within the check's
// deadline, monitors only the tables it reads, reads the cache and closes.

// ListDBs returns the databases an ovsdb-server serves (what list_dbs
// answers), read from the Database table of its _Server database, which
// every ovsdb-server serves and which lists _Server itself.
func (h *DoctorHost) ListDBs(ctx context.Context, remote string) ([]string, error) {
	rows, err := h.ServerDatabases(ctx, remote)
	if err != nil {
		return nil, err
	}
	dbs := make([]string, 0, len(rows))
	for _, r := range rows {
		dbs = append(dbs, r.Name)
	}
	sort.Strings(dbs)
	return dbs, nil
}

// ServerDatabases reads the Database rows of remote's _Server database.
func (h *DoctorHost) ServerDatabases(ctx context.Context, remote string) ([]serverdb.Database, error) {
	c, err := h.dial(ctx, serverdb.FullDatabaseModel, remote, "ovsdb-server", &serverdb.Database{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var rows []serverdb.Database
	if err := c.List(ctx, &rows); err != nil {
		return nil, fmt.Errorf("reading the databases served at %s: %w", remote, err)
	}
	return rows, nil
}

// TLSHandshake dials addr and completes a handshake with the configured
// key, certificate and CA.
func (h *DoctorHost) TLSHandshake(ctx context.Context, addr string) error {
	tc, err := tlsConfig(h.ssl)
	if err != nil {
		return err
	}
	d := tls.Dialer{Config: tc}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// OpenvSwitch reads the rows of the Open_vSwitch table.
func (h *DoctorHost) OpenvSwitch(ctx context.Context, remote string) ([]vswitch.OpenvSwitch, error) {
	c, err := h.dial(ctx, vswitch.FullDatabaseModel, remote, "ovsdb-server (Open_vSwitch)", &vswitch.OpenvSwitch{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var rows []vswitch.OpenvSwitch
	if err := c.List(ctx, &rows); err != nil {
		return nil, fmt.Errorf("reading the Open_vSwitch table at %s: %w", remote, err)
	}
	return rows, nil
}

// SBChassis reads the Chassis and Encap tables of the SB database.
func (h *DoctorHost) SBChassis(ctx context.Context, remote string) ([]sbdb.Chassis, []sbdb.Encap, error) {
	c, err := h.dial(ctx, sbdb.FullDatabaseModel, remote, "ovsdb-server (OVN_Southbound)", &sbdb.Chassis{}, &sbdb.Encap{})
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	var chassis []sbdb.Chassis
	if err := c.List(ctx, &chassis); err != nil {
		return nil, nil, fmt.Errorf("reading the Chassis table at %s: %w", remote, err)
	}
	var encaps []sbdb.Encap
	if err := c.List(ctx, &encaps); err != nil {
		return nil, nil, fmt.Errorf("reading the Encap table at %s: %w", remote, err)
	}
	return chassis, encaps, nil
}

// NorthdVersion reads SB_Global options:northd_internal_version, which
// ovn-northd writes ("23.03.1-20.27.0-70.6": OVN, SB schema, internal).
func (h *DoctorHost) NorthdVersion(ctx context.Context, remote string) (string, error) {
	c, err := h.dial(ctx, sbdb.FullDatabaseModel, remote, "ovsdb-server (OVN_Southbound)", &sbdb.SBGlobal{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	var rows []sbdb.SBGlobal
	if err := c.List(ctx, &rows); err != nil {
		return "", fmt.Errorf("reading SB_Global at %s: %w", remote, err)
	}
	if len(rows) == 0 {
		return "", nil
	}
	return rows[0].Options["northd_internal_version"], nil
}

// dial connects to one remote and monitors tables; ssl: remotes use the
// configured key, certificate and CA.
func (h *DoctorHost) dial(ctx context.Context, dbModel func() (model.ClientDBModel, error), remote, name string, tables ...model.Model) (*ovsdbconn.Conn, error) {
	full, err := dbModel()
	if err != nil {
		return nil, fmt.Errorf("%s: building the client model: %w", name, err)
	}
	// Only the tables doctor reads: libovsdb checks every table of the
	// model against the server, which may run another release.
	m, err := ovsdbconn.Subset(full, tables...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var tc *tls.Config
	if strings.HasPrefix(strings.TrimSpace(remote), "ssl:") {
		if tc, err = tlsConfig(h.ssl); err != nil {
			return nil, err
		}
	}
	return ovsdbconn.Dial(ctx, m, remote, ovsdbconn.Options{Tables: tables, TLS: tc, Name: name, Once: true})
}

// Unixctl calls a daemon's control socket: command and its arguments,
// separated by spaces ("stopwatch/show flow-generation").
func (*DoctorHost) Unixctl(ctx context.Context, sock, command string) (string, error) {
	f := strings.Fields(command)
	if len(f) == 0 {
		return "", fmt.Errorf("empty unixctl command")
	}
	return unixctl.Call(ctx, sock, f[0], f[1:]...)
}

// sslFiles are the key, certificate and CA for ssl: remotes.
type sslFiles struct{ key, cert, ca string }

func tlsConfig(ssl sslFiles) (*tls.Config, error) {
	t, err := ovsdbconn.LoadTLS(ssl.key, ssl.cert, ssl.ca, nil)
	if err != nil {
		return nil, err
	}
	return t.Config(), nil
}
