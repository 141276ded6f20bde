package doctor

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// A minimal D-Bus client: enough to ask the system bus whether a name has
// an owner (firewalld registers org.fedoraproject.FirewallD1). It speaks
// little-endian messages with string and uint32 arguments only.

// FirewalldBusName is the name firewalld owns on the system bus.
const FirewalldBusName = "org.fedoraproject.FirewallD1"

// SystemBusAddress is the system bus socket address.
func SystemBusAddress() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return "unix:path=/run/dbus/system_bus_socket"
}

type dbusConn struct {
	c      net.Conn
	r      *bufio.Reader
	serial uint32
	bo     binary.ByteOrder // of the last message read
}

// dbusDial connects and authenticates (EXTERNAL, by uid) to a bus address
// of the form unix:path=... and sends Hello.
func dbusDial(ctx context.Context, addr string) (*dbusConn, error) {
	path := ""
	for _, a := range strings.Split(addr, ";") {
		if rest, ok := strings.CutPrefix(a, "unix:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "path="); ok {
					path = v
				}
			}
		}
		if path != "" {
			break
		}
	}
	if path == "" {
		return nil, fmt.Errorf("unsupported D-Bus address %q", addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	dc := &dbusConn{c: c, r: bufio.NewReader(c)}
	uid := hex.EncodeToString([]byte(strconv.Itoa(os.Getuid())))
	if _, err := c.Write([]byte("\x00AUTH EXTERNAL " + uid + "\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	line, err := dc.r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("D-Bus authentication: %w", err)
	}
	if !strings.HasPrefix(line, "OK ") {
		c.Close()
		return nil, fmt.Errorf("D-Bus authentication refused: %q", strings.TrimSpace(line))
	}
	if _, err := c.Write([]byte("BEGIN\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := dc.call("Hello", ""); err != nil {
		c.Close()
		return nil, err
	}
	return dc, nil
}

func (d *dbusConn) Close() error { return d.c.Close() }

// buf builds a little-endian D-Bus message with alignment.
type dbuf struct{ b []byte }

func (w *dbuf) align(n int) {
	for len(w.b)%n != 0 {
		w.b = append(w.b, 0)
	}
}
func (w *dbuf) byte1(v byte) { w.b = append(w.b, v) }
func (w *dbuf) u32(v uint32) {
	w.align(4)
	w.b = binary.LittleEndian.AppendUint32(w.b, v)
}
func (w *dbuf) str(s string) { // s and o
	w.u32(uint32(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
}
func (w *dbuf) sig(s string) {
	w.b = append(w.b, byte(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
}

// call invokes a method of org.freedesktop.DBus; args are strings or
// uint32s matching sig. It returns the reply body.
func (d *dbusConn) call(member, sig string, args ...any) ([]byte, error) {
	var body dbuf
	for _, a := range args {
		switch v := a.(type) {
		case string:
			body.str(v)
		case uint32:
			body.u32(v)
		default:
			return nil, fmt.Errorf("unsupported D-Bus argument %T", a)
		}
	}
	d.serial++
	var m dbuf
	m.byte1('l')
	m.byte1(1) // METHOD_CALL
	m.byte1(0)
	m.byte1(1) // protocol version
	m.u32(uint32(len(body.b)))
	m.u32(d.serial)
	var fields dbuf
	field := func(code byte, typ string, val string) {
		fields.align(8)
		fields.byte1(code)
		fields.sig(typ)
		if typ == "g" {
			fields.sig(val)
		} else {
			// Offsets inside the array are relative to the message start:
			// the array begins at 16, which keeps 4- and 8-alignment.
			fields.str(val)
		}
	}
	field(1, "o", "/org/freedesktop/DBus")
	field(2, "s", "org.freedesktop.DBus")
	field(3, "s", member)
	field(6, "s", "org.freedesktop.DBus")
	if sig != "" {
		field(8, "g", sig)
	}
	m.u32(uint32(len(fields.b)))
	m.b = append(m.b, fields.b...)
	m.align(8)
	m.b = append(m.b, body.b...)
	if _, err := d.c.Write(m.b); err != nil {
		return nil, err
	}
	for {
		typ, replyTo, errName, rbody, err := d.read()
		if err != nil {
			return nil, err
		}
		if replyTo != d.serial {
			continue // a signal such as NameAcquired
		}
		switch typ {
		case 2: // METHOD_RETURN
			return rbody, nil
		case 3: // ERROR
			return nil, fmt.Errorf("D-Bus %s: %s", member, errName)
		}
	}
}

// read reads one message and returns its type, reply serial, error name
// and body.
func (d *dbusConn) read() (byte, uint32, string, []byte, error) {
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(d.r, hdr); err != nil {
		return 0, 0, "", nil, err
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if hdr[0] == 'B' {
		bo = binary.BigEndian
	}
	d.bo = bo
	bodyLen := bo.Uint32(hdr[4:])
	fieldsLen := bo.Uint32(hdr[12:])
	if bodyLen > 1<<20 || fieldsLen > 1<<16 {
		return 0, 0, "", nil, errors.New("D-Bus message too large")
	}
	pad := (8 - (16+int(fieldsLen))%8) % 8
	rest := make([]byte, int(fieldsLen)+pad+int(bodyLen))
	if _, err := io.ReadFull(d.r, rest); err != nil {
		return 0, 0, "", nil, err
	}
	fields := rest[:fieldsLen]
	var replyTo uint32
	var errName string
	// Walk the header fields; positions are offsets from the message start.
	pos := 0
	abs := func() int { return 16 + pos }
	alignTo := func(n int) {
		for abs()%n != 0 {
			pos++
		}
	}
	for pos < len(fields) {
		alignTo(8)
		if pos+2 > len(fields) {
			break
		}
		code := fields[pos]
		sl := int(fields[pos+1])
		if pos+2+sl+1 > len(fields) {
			break
		}
		sig := string(fields[pos+2 : pos+2+sl])
		pos += 2 + sl + 1
		switch sig {
		case "s", "o":
			alignTo(4)
			if pos+4 > len(fields) {
				return 0, 0, "", nil, errors.New("D-Bus header truncated")
			}
			n := int(bo.Uint32(fields[pos:]))
			pos += 4
			if pos+n+1 > len(fields) {
				return 0, 0, "", nil, errors.New("D-Bus header truncated")
			}
			if code == 4 {
				errName = string(fields[pos : pos+n])
			}
			pos += n + 1
		case "u":
			alignTo(4)
			if pos+4 > len(fields) {
				return 0, 0, "", nil, errors.New("D-Bus header truncated")
			}
			if code == 5 {
				replyTo = bo.Uint32(fields[pos:])
			}
			pos += 4
		case "g":
			if pos >= len(fields) {
				return 0, 0, "", nil, errors.New("D-Bus header truncated")
			}
			pos += 1 + int(fields[pos]) + 1
		default:
			return 0, 0, "", nil, fmt.Errorf("D-Bus header field type %q not understood", sig)
		}
	}
	return hdr[1], replyTo, errName, rest[int(fieldsLen)+pad:], nil
}

// nameHasOwner asks the bus whether name is owned.
func nameHasOwner(ctx context.Context, addr, name string) (bool, error) {
	d, err := dbusDial(ctx, addr)
	if err != nil {
		return false, err
	}
	defer d.Close()
	body, err := d.call("NameHasOwner", "s", name)
	if err != nil {
		return false, err
	}
	if len(body) < 4 {
		return false, errors.New("D-Bus NameHasOwner: short reply")
	}
	return d.bo.Uint32(body) != 0, nil
}
