package pinger

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// A local UDP server answering every query: the probe matches its ID.
func TestDNSProbeMatchesTheAnswer(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			// A stray answer with another ID first, then the real one.
			stray := append([]byte{}, buf[:n]...)
			binary.BigEndian.PutUint16(stray, binary.BigEndian.Uint16(buf)+1)
			stray[2] |= 0x80
			_, _ = pc.WriteTo(stray, from)
			buf[2] |= 0x80 // QR: a response
			buf[3] = 3     // NXDOMAIN still proves the path
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	if _, err := dnsProbe(context.Background(), pc.LocalAddr().String(), "kubernetes.default.svc.cluster.local", time.Second); err != nil {
		t.Fatal(err)
	}
	// Nobody listens here: the probe times out and says so.
	dead, _ := net.ListenPacket("udp", "127.0.0.1:0")
	addr := dead.LocalAddr().String()
	dead.Close()
	if _, err := dnsProbe(context.Background(), addr, "x.y", 200*time.Millisecond); err == nil {
		t.Fatal("a probe without a server succeeded")
	}
}

func TestICMPEchoLoopback(t *testing.T) {
	testenv.RequireRoot(t) // raw ICMP needs CAP_NET_RAW; fails instead of skipping under make test
	c, err := listenICMP()
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.echo(context.Background(), "127.0.0.1", time.Second); err != nil {
		t.Fatal(err)
	}
	// Loss is shown by the cluster test (tests/node: a node's tunnel link down).
}
