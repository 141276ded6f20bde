package pinger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// icmpConn sends echo requests on one raw socket and hands each reply to
// the probe waiting for its sequence number.
type icmpConn struct {
	c  *icmp.PacketConn
	id int

	mu      sync.Mutex
	seq     uint16
	waiting map[uint16]chan struct{}
}

func listenICMP() (*icmpConn, error) {
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return nil, err
	}
	ic := &icmpConn{c: c, id: os.Getpid() & 0xffff, waiting: map[uint16]chan struct{}{}}
	go ic.read()
	return ic, nil
}

func (ic *icmpConn) close() { _ = ic.c.Close() }

func (ic *icmpConn) read() {
	buf := make([]byte, 1500)
	for {
		n, _, err := ic.c.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		if !ok || e.ID != ic.id {
			continue
		}
		ic.mu.Lock()
		if ch, ok := ic.waiting[uint16(e.Seq)]; ok {
			close(ch)
			delete(ic.waiting, uint16(e.Seq))
		}
		ic.mu.Unlock()
	}
}

// echo sends one echo request to addr and waits for its reply.
func (ic *icmpConn) echo(ctx context.Context, addr string, timeout time.Duration) (time.Duration, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return 0, fmt.Errorf("%q is not an IP address", addr)
	}
	ic.mu.Lock()
	ic.seq++
	seq := ic.seq
	ch := make(chan struct{})
	ic.waiting[seq] = ch
	ic.mu.Unlock()
	defer func() {
		ic.mu.Lock()
		delete(ic.waiting, seq)
		ic.mu.Unlock()
	}()
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: ic.id, Seq: int(seq), Data: []byte("ovnhost-pinger")}}
	raw, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if _, err := ic.c.WriteTo(raw, &net.IPAddr{IP: ip}); err != nil {
		return 0, err
	}
	select {
	case <-ch:
		return time.Since(t0), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("no echo reply within %s", timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// dnsProbe sends one A query for name to server (IP or IP:port, UDP) and
// waits for an answer with the same ID; any answer, NXDOMAIN included,
// proves the DNS Service path works.
func dnsProbe(ctx context.Context, server, name string, timeout time.Duration) (time.Duration, error) {
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "53")
	}
	id := uint16(rand.UintN(1 << 16))
	q, err := dnsQuery(id, name)
	if err != nil {
		return 0, err
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	t0 := time.Now()
	if _, err := c.Write(q); err != nil {
		return 0, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("no DNS answer from %s within %s", server, timeout)
		}
		if n >= 12 && binary.BigEndian.Uint16(buf) == id && buf[2]&0x80 != 0 {
			return time.Since(t0), nil
		}
	}
}

// dnsQuery builds a recursive A query.
func dnsQuery(id uint16, name string) ([]byte, error) {
	b := make([]byte, 12, 64)
	binary.BigEndian.PutUint16(b[0:], id)
	b[2] = 0x01                          // RD
	binary.BigEndian.PutUint16(b[4:], 1) // QDCOUNT
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			return nil, errors.New("bad DNS name " + name)
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	b = append(b, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
	return b, nil
}
