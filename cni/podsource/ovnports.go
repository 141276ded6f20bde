package podsource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// A pod's author can write every annotation, and the API server's record
// of who wrote it (managedFields) names a field manager the client chose.
// What the author cannot write is OVN: the controller programs the pod's
// logical switch port ("<pod>.<namespace>", addresses "MAC IP...") in the
// northbound database, ovn-northd copies it to the southbound database's
// Port_Binding (column mac, datapath: the logical switch), and the node
// reads that. The node wires a pod only when its annotations equal what OVN
// holds (trust.go: matchOVN); the annotations are the hint that the
// controller is done, OVN is the authority.

// OVNPort is what OVN holds for one pod's logical switch port.
type OVNPort struct {
	// Switch is the logical switch (Datapath_Binding external_ids:name).
	Switch string
	MAC    net.HardwareAddr
	IPs    []netip.Addr
	// Addresses is the Port_Binding's mac column as OVN holds it.
	Addresses string
	// Chassis is the chassis the port is bound to ("": none); Requested
	// the chassis the port may be bound to (requested_chassis, then
	// requested_additional_chassis; none: any). A virtual machine's port
	// is requested on two chassis during its live migration.
	Chassis   string
	Requested []string
}

// OVNPorts reads the pods' logical switch ports from OVN.
type OVNPorts interface {
	// Port returns what OVN holds for the logical switch port lsp; ok is
	// false while OVN has no such port. A non-nil error says OVN cannot be
	// read yet (not connected): wait on Changed.
	Port(ctx context.Context, lsp string) (_ OVNPort, ok bool, _ error)
	// Changed is closed at the next change of what Port may return.
	Changed() <-chan struct{}
	// Where names the database for messages ("the OVN southbound database at tcp:...").
	Where() string
	Start(ctx context.Context)
	Stop()
}

// errOVNNotConnected: the southbound database has not answered yet.
var errOVNNotConnected = errors.New("not connected yet")

// SBPorts reads Port_Binding and Datapath_Binding from the OVN southbound
// database (the node's ovn-controller reads it too; the node needs no NB
// access). Only VIF ports (type "") and the columns it compares are
// monitored.
type SBPorts struct {
	endpoint string
	tls      *tls.Config
	log      *slog.Logger

	mu        sync.Mutex
	conn      *ovsdbconn.Conn
	connected chan struct{} // closed once conn is set
	cancel    context.CancelFunc
	done      chan struct{}
}

// NewSBPorts reads ports from the southbound database at endpoint (TLS for ssl: endpoints).
func NewSBPorts(endpoint string, tc *tls.Config, log *slog.Logger) *SBPorts {
	if log == nil {
		log = slog.Default()
	}
	return &SBPorts{endpoint: endpoint, tls: tc, log: log, connected: make(chan struct{})}
}

// Where names the database.
func (s *SBPorts) Where() string { return "the OVN southbound database at " + s.endpoint }

// Start connects in the background: pods already wired must not depend
// on the southbound database, new ADDs wait for it.
func (s *SBPorts) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		conn, err := dialSBPorts(ctx, s.endpoint, s.tls, s.log)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("cannot read pods' ports from the OVN southbound database; ADDs will fail", "sb", s.endpoint, "err", err)
			}
			return
		}
		s.mu.Lock()
		s.conn = conn
		close(s.connected)
		s.mu.Unlock()
	}()
}

func dialSBPorts(ctx context.Context, endpoint string, tc *tls.Config, log *slog.Logger) (*ovsdbconn.Conn, error) {
	full, err := sbdb.FullDatabaseModel()
	if err != nil {
		return nil, err
	}
	m, err := ovsdbconn.Subset(full, &sbdb.PortBinding{}, &sbdb.DatapathBinding{}, &sbdb.Chassis{})
	if err != nil {
		return nil, err
	}
	pb := &sbdb.PortBinding{}
	dp := &sbdb.DatapathBinding{}
	ch := &sbdb.Chassis{}
	return ovsdbconn.Dial(ctx, m, endpoint, ovsdbconn.Options{TLS: tc, Log: log, Name: "OVN_Southbound at " + endpoint,
		Monitor: []ovsdbconn.Table{
			{Model: pb, Fields: []any{&pb.LogicalPort, &pb.MAC, &pb.Datapath, &pb.Type, &pb.Chassis, &pb.RequestedChassis, &pb.RequestedAdditionalChassis},
				Where: []model.Condition{{Field: &pb.Type, Function: ovsdb.ConditionEqual, Value: ""}}},
			{Model: dp, Fields: []any{&dp.ExternalIDs}},
			// The chassis' names, for a VM port's bindings (kube.go, vmBound).
			{Model: ch, Fields: []any{&ch.Name}},
		}})
}

// Stop closes the connection.
func (s *SBPorts) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	s.cancel = nil
}

// Changed is closed at the next change of the cache (or at the connection).
func (s *SBPorts) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return s.connected
	}
	return s.conn.Changed()
}

// Port reads lsp's Port_Binding and its datapath from the cache.
func (s *SBPorts) Port(ctx context.Context, lsp string) (OVNPort, bool, error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return OVNPort{}, false, errOVNNotConnected
	}
	pb := &sbdb.PortBinding{LogicalPort: lsp}
	if err := conn.Get(ctx, pb); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return OVNPort{}, false, nil
		}
		return OVNPort{}, false, err
	}
	if pb.Type != "" {
		return OVNPort{}, false, nil
	}
	dp := &sbdb.DatapathBinding{UUID: pb.Datapath}
	if err := conn.Get(ctx, dp); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			// The binding arrived before its datapath: wait for it.
			return OVNPort{}, false, nil
		}
		return OVNPort{}, false, err
	}
	p, ok, err := ParsePortBinding(pb.MAC, dp.ExternalIDs["name"])
	if !ok || err != nil {
		return p, ok, err
	}
	name := func(uuid string) string {
		c := &sbdb.Chassis{UUID: uuid}
		if conn.Get(ctx, c) != nil {
			return uuid // not in the cache yet: unnamed, it matches no node's name
		}
		return c.Name
	}
	if pb.Chassis != nil {
		p.Chassis = name(*pb.Chassis)
	}
	if pb.RequestedChassis != nil {
		p.Requested = append(p.Requested, name(*pb.RequestedChassis))
	}
	for _, u := range pb.RequestedAdditionalChassis {
		p.Requested = append(p.Requested, name(u))
	}
	return p, true, nil
}

// ParsePortBinding reads a Port_Binding's mac column ("MAC IP [IP...]",
// one entry, as the controller writes a pod's addresses) on switch sw.
// ok is false for what no pod port of the controller holds ("dynamic",
// "unknown", none or several entries): the node then waits, and refuses at
// the deadline.
func ParsePortBinding(macs []string, sw string) (OVNPort, bool, error) {
	if len(macs) != 1 {
		return OVNPort{}, false, nil
	}
	f := strings.Fields(macs[0])
	if len(f) < 2 {
		return OVNPort{}, false, nil
	}
	mac, err := net.ParseMAC(f[0])
	if err != nil {
		return OVNPort{}, false, nil
	}
	p := OVNPort{Switch: sw, MAC: mac, Addresses: macs[0]}
	for _, s := range f[1:] {
		a, err := netip.ParseAddr(s)
		if err != nil {
			if pr, perr := netip.ParsePrefix(s); perr == nil {
				a = pr.Addr()
			} else {
				return OVNPort{}, false, nil
			}
		}
		p.IPs = append(p.IPs, a.Unmap())
	}
	return p, true, nil
}

// MismatchError refuses a pod whose annotation differs from what OVN holds.
type MismatchError struct {
	Pod        string // namespace/name
	Field      string // the annotation
	Annotation string // its value
	OVN        string // what OVN (or the Subnet) holds
	Source     string // where OVN's value was read
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("pod %s: annotation %s=%q but %s holds %q: the annotation does not match what the controller programmed in OVN; the pod is not wired. Nobody but the controller may write the pod's address annotations: remove them from the pod (or its template) and let the controller write them",
		e.Pod, e.Field, e.Annotation, e.Source, e.OVN)
}
