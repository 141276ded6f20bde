// Command vmprobe is the traffic and timing tool the kernel-datapath tests
// run inside their VMs (and inside pod namespaces there), printing one JSON
// object per command so the host side reads exact figures:
//
//	vmprobe serve -addr :5201            UDP echo and TCP echo on one port, until killed
//	vmprobe tcp -to IP:PORT -n 64        one TCP connection, n round trips of a 1 KiB message
//	vmprobe stream -to IP:PORT -for 10s -every 10ms
//	                                     UDP ping-pong on one 5-tuple (an established flow):
//	                                     sent, answered, longest gap without answers
//	vmprobe tcpstream -to IP:PORT -for 10s -every 10ms
//	                                     the same on one TCP connection (kernel retransmits hide loss: gaps show it)
//	vmprobe newflow -to IP:PORT -kill PIDFILE -within 30s
//	                                     SIGKILL the pid in PIDFILE, then open new TCP connections
//	                                     (each a new 5-tuple: an upcall to ovs-vswitchd) until one
//	                                     answers: time from the kill to the first answer
//	vmprobe time -n 20 -- CMD ARGS...    run CMD n times (stdin from -stdin FILE), per-run wall times
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: vmprobe serve|tcp|stream|tcpstream|newflow|time ..."))
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "tcp":
		err = tcpRounds(os.Args[2:])
	case "stream":
		err = udpStream(os.Args[2:])
	case "tcpstream":
		err = tcpStream(os.Args[2:])
	case "newflow":
		err = newFlow(os.Args[2:])
	case "time":
		err = timeCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "vmprobe:", err)
	os.Exit(1)
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", ":5201", "listen address (UDP and TCP)")
	_ = fs.Parse(args)
	pc, err := net.ListenPacket("udp", *addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	fmt.Println("serving", *addr)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

type tcpResult struct {
	Rounds  int     `json:"rounds"`
	Bytes   int     `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func tcpRounds(args []string) error {
	fs := flag.NewFlagSet("tcp", flag.ExitOnError)
	to := fs.String("to", "", "server IP:PORT")
	n := fs.Int("n", 64, "round trips")
	size := fs.Int("size", 1024, "message size")
	timeout := fs.Duration("timeout", 30*time.Second, "overall deadline")
	_ = fs.Parse(args)
	t0 := time.Now()
	c, err := net.DialTimeout("tcp", *to, *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(*timeout))
	msg := bytes.Repeat([]byte("ovnhost!"), *size/8+1)[:*size]
	got := make([]byte, *size)
	for i := 0; i < *n; i++ {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := c.Write(msg); err != nil {
			return fmt.Errorf("round %d: write: %w", i, err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("round %d: read: %w", i, err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("round %d: the echo differs from what was sent", i)
		}
	}
	emit(tcpResult{Rounds: *n, Bytes: 2 * *n * *size, Seconds: time.Since(t0).Seconds()})
	return nil
}

// streamResult describes one flow probed at a fixed rate.
type streamResult struct {
	Sent     int     `json:"sent"`
	Answered int     `json:"answered"`
	Lost     int     `json:"lost"`
	MaxGapMS float64 `json:"max_gap_ms"` // longest time without an answer while sending
	GapStart string  `json:"gap_start"`  // when it began (RFC 3339, the VM's clock)
	Seconds  float64 `json:"seconds"`
}

func udpStream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	to := fs.String("to", "", "server IP:PORT")
	dur := fs.Duration("for", 10*time.Second, "how long to send")
	every := fs.Duration("every", 10*time.Millisecond, "send interval")
	_ = fs.Parse(args)
	c, err := net.Dial("udp", *to)
	if err != nil {
		return err
	}
	defer c.Close()
	// The flow must be established before the measurement starts.
	if err := udpWarm(c, 10*time.Second); err != nil {
		return err
	}
	fmt.Println("established")
	answered := make(chan time.Time, 1<<16)
	seen := map[uint32]bool{}
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(answered)
				return
			}
			if n >= 4 && buf[0] != 0xff {
				seq := binary.BigEndian.Uint32(buf)
				if !seen[seq] {
					seen[seq] = true
					answered <- time.Now()
				}
			}
		}
	}()
	return runStream(*dur, *every, func(seq uint32) error {
		var b [16]byte
		binary.BigEndian.PutUint32(b[:], seq)
		_, err := c.Write(b[:])
		return err
	}, answered, func() { _ = c.SetReadDeadline(time.Now()) })
}

func udpWarm(c net.Conn, within time.Duration) error {
	deadline := time.Now().Add(within)
	buf := make([]byte, 64)
	for time.Now().Before(deadline) {
		if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(buf); err == nil {
			_ = c.SetReadDeadline(time.Time{})
			return nil
		}
	}
	return fmt.Errorf("no UDP echo from %s within %s", c.RemoteAddr(), within)
}

func tcpStream(args []string) error {
	fs := flag.NewFlagSet("tcpstream", flag.ExitOnError)
	to := fs.String("to", "", "server IP:PORT")
	dur := fs.Duration("for", 10*time.Second, "how long to send")
	every := fs.Duration("every", 10*time.Millisecond, "send interval")
	_ = fs.Parse(args)
	c, err := net.DialTimeout("tcp", *to, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("established")
	answered := make(chan time.Time, 1<<16)
	go func() {
		buf := make([]byte, 16)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				close(answered)
				return
			}
			answered <- time.Now()
		}
	}()
	return runStream(*dur, *every, func(seq uint32) error {
		var b [16]byte
		binary.BigEndian.PutUint32(b[:], seq)
		_, err := c.Write(b[:])
		return err
	}, answered, func() { _ = c.SetReadDeadline(time.Now()) })
}

// runStream sends every interval for dur (or until SIGTERM), then waits
// up to 2 s for late answers, and reports the longest stretch without an
// answer.
func runStream(dur, every time.Duration, send func(uint32) error, answered <-chan time.Time, stop func()) error {
	t0 := time.Now()
	last := t0
	var maxGap time.Duration
	var gapStart time.Time
	got := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.After(dur)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	var seq uint32
	account := func(at time.Time) {
		got++
		if g := at.Sub(last); g > maxGap {
			maxGap, gapStart = g, last
		}
		last = at
	}
loop:
	for {
		select {
		case <-tick.C:
			if err := send(seq); err != nil {
				return fmt.Errorf("send %d: %w", seq, err)
			}
			seq++
		case at, ok := <-answered:
			if !ok {
				break loop
			}
			account(at)
		case <-end:
			break loop
		case <-term:
			break loop
		}
	}
	sentEnd := time.Now()
	grace := time.After(2 * time.Second)
drain:
	for got < int(seq) {
		select {
		case at, ok := <-answered:
			if !ok {
				break drain
			}
			account(at)
		case <-grace:
			break drain
		}
	}
	if g := sentEnd.Sub(last); g > maxGap && got < int(seq) {
		maxGap, gapStart = g, last
	}
	stop()
	emit(streamResult{Sent: int(seq), Answered: got, Lost: int(seq) - got,
		MaxGapMS: float64(maxGap.Microseconds()) / 1000, GapStart: gapStart.UTC().Format(time.RFC3339Nano), Seconds: time.Since(t0).Seconds()})
	return nil
}

type newFlowResult struct {
	Attempts  int     `json:"attempts"`
	FirstMS   float64 `json:"first_ms"` // kill to the first new connection answering
	KilledPid int     `json:"killed_pid"`
}

func newFlow(args []string) error {
	fs := flag.NewFlagSet("newflow", flag.ExitOnError)
	to := fs.String("to", "", "server IP:PORT")
	pidfile := fs.String("kill", "", "SIGKILL the pid in this file first")
	within := fs.Duration("within", 30*time.Second, "give up after")
	attempt := fs.Duration("attempt", 100*time.Millisecond, "deadline of each connection attempt")
	_ = fs.Parse(args)
	pid := 0
	if *pidfile != "" {
		b, err := os.ReadFile(*pidfile)
		if err != nil {
			return err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("%s: %w", *pidfile, err)
		}
	}
	t0 := time.Now()
	if pid > 0 {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill -9 %d: %w", pid, err)
		}
	}
	deadline := t0.Add(*within)
	n := 0
	// At most one attempt per 10 ms: a refused connection returns at once.
	pace := time.NewTicker(10 * time.Millisecond)
	defer pace.Stop()
	for time.Now().Before(deadline) {
		n++
		c, err := net.DialTimeout("tcp", *to, *attempt)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(*attempt))
			_, werr := c.Write([]byte("x"))
			b := make([]byte, 1)
			_, rerr := io.ReadFull(c, b)
			c.Close()
			if werr == nil && rerr == nil {
				emit(newFlowResult{Attempts: n, FirstMS: float64(time.Since(t0).Microseconds()) / 1000, KilledPid: pid})
				return nil
			}
		}
		<-pace.C
	}
	return fmt.Errorf("no new TCP connection to %s answered within %s of the kill (%d attempts)", *to, *within, n)
}

type timeResult struct {
	Runs   int       `json:"runs"`
	MS     []float64 `json:"ms"`
	P50MS  float64   `json:"p50_ms"`
	MinMS  float64   `json:"min_ms"`
	Failed int       `json:"failed"`
	Last   string    `json:"last_output,omitempty"`
}

func timeCmd(args []string) error {
	fs := flag.NewFlagSet("time", flag.ExitOnError)
	n := fs.Int("n", 10, "runs")
	stdin := fs.String("stdin", "", "file given as stdin to each run")
	envEach := fs.String("env-each", "", "NAME: set NAME=<prefix><i> for run i (e.g. CNI_CONTAINERID)")
	prefix := fs.String("prefix", "c", "prefix for -env-each")
	_ = fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("time: no command")
	}
	var in []byte
	if *stdin != "" {
		var err error
		if in, err = os.ReadFile(*stdin); err != nil {
			return err
		}
	}
	res := timeResult{Runs: *n}
	for i := 0; i < *n; i++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = os.Environ()
		if *envEach != "" {
			for _, name := range strings.Split(*envEach, ",") {
				v := fmt.Sprintf("%s%d", *prefix, i)
				if name == "CNI_NETNS" {
					v = "/var/run/netns/" + v
				}
				cmd.Env = append(cmd.Env, name+"="+v)
			}
		}
		cmd.Stdin = bytes.NewReader(in)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		res.MS = append(res.MS, float64(time.Since(t0).Microseconds())/1000)
		if err != nil {
			res.Failed++
			res.Last = string(out)
		}
	}
	s := append([]float64(nil), res.MS...)
	sort.Float64s(s)
	res.P50MS, res.MinMS = s[len(s)/2], s[0]
	emit(res)
	return nil
}
