package nodeapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"golang.org/x/sys/unix"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// Capture writes the packets seen on a pod's host veth (or another OVS
// interface of this node) to w in pcap format, until count packets, the
// duration, or ctx ends. It reads an AF_PACKET socket bound to that one
// interface; no filter is applied here (netctl filters with tcpdump on the
// operator's side).
func (o *Ops) Capture(ctx context.Context, r api.CaptureRequest, w io.Writer, started func()) error {
	iface, count, d := r.Iface, r.Count, r.Duration
	switch {
	case r.Pod != "":
		p, err := o.Pod(ctx, r.Namespace, r.Pod)
		if err != nil {
			return err
		}
		iface = p.Interface
	case iface != "":
		if err := o.isOVSInterface(ctx, iface); err != nil {
			return err
		}
	default:
		return BadRequest{Err: errors.New("give pod (with namespace) or iface")}
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", iface, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return fmt.Errorf("AF_PACKET socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fmt.Errorf("bind to %s: %w", iface, err)
	}
	// A short receive timeout lets the loop notice ctx and the deadline.
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	started()
	if err := writePcapHeader(w); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	buf := make([]byte, 65536)
	for n := 0; count == 0 || n < count; {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil
		}
		l, _, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		caplen := min(l, len(buf))
		if err := writePcapRecord(w, time.Now(), buf[:caplen], l); err != nil {
			return err // the client went away
		}
		n++
	}
	return nil
}

func (o *Ops) isOVSInterface(ctx context.Context, name string) error {
	c, err := o.dial(ctx, "Open_vSwitch")
	if err != nil {
		return err
	}
	defer c.Close()
	rows, err := selectRows(ctx, c.Client, "Interface", []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}})
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return BadRequest{Err: fmt.Errorf("%s is not an OVS interface of this node; capture works on pod veths and OVS ports only", name)}
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// pcap (not pcapng): what tcpdump -r and Wireshark read, Ethernet link type.
func writePcapHeader(w io.Writer) error {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 65536) // snaplen
	binary.LittleEndian.PutUint32(h[20:], 1)     // LINKTYPE_ETHERNET
	_, err := w.Write(h[:])
	return err
}

func writePcapRecord(w io.Writer, ts time.Time, data []byte, origLen int) error {
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(ts.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], uint32(origLen))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}
