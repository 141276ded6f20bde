package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Members of --cni-socket-group can send any request the kubelet could:
// the server refuses the two that would turn that into root on the node
// (a veth moved into the daemon's own network namespace, a GC that removes
// every pod port) unless they come from root.

type peerKey struct{}

// peerCred is the uid/gid of the process at the other end of a CNI socket
// connection (SO_PEERCRED, taken when the connection is accepted).
type peerCred struct {
	uid, gid uint32
	known    bool
}

func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, peerCred{uid: cred.Uid, gid: cred.Gid, known: true})
}

func peerOf(ctx context.Context) peerCred {
	p, _ := ctx.Value(peerKey{}).(peerCred)
	return p
}

// nsGetNSType is NS_GET_NSTYPE (linux/nsfs.h: _IO(0xb7, 0x3)).
const nsGetNSType = 0xb703

// netnsIdentity is a namespace's device and inode.
type netnsIdentity struct{ dev, ino uint64 }

// hostNetns are the namespaces no pod may be wired into: the daemon's own
// and that of PID 1 as the daemon sees it (the host's, unless the daemon
// runs in a PID namespace of its own).
type hostNetns []netnsIdentity

func ownNetns() (hostNetns, error) {
	var out hostNetns
	for _, p := range []string{"/proc/self/ns/net", "/proc/1/ns/net"} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if p == "/proc/1/ns/net" {
				continue // another PID namespace may hide it
			}
			return nil, err
		}
		out = append(out, netnsIdentity{uint64(st.Dev), st.Ino})
	}
	return out, nil
}

// checkPodNetns refuses a CNI_NETNS that is not a network namespace, or
// is the daemon's own or PID 1's (the host's, for a DaemonSet on the host
// network): a veth moved there, with the pod's address and routes,
// would rewire the host.
func checkPodNetns(path string, host hostNetns) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return errors.New("is not a namespace (want a network namespace such as /var/run/netns/<name> or /proc/<pid>/ns/net)")
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil {
		return fmt.Errorf("cannot tell the namespace's type: %w", err)
	}
	if typ != unix.CLONE_NEWNET {
		return errors.New("is a namespace but not a network namespace")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	for i, h := range host {
		if uint64(st.Dev) == h.dev && st.Ino == h.ino {
			if i == 0 {
				return errors.New("is the node daemon's own network namespace; a pod never lives there")
			}
			return errors.New("is the network namespace of PID 1 (the host's); a pod never lives there")
		}
	}
	return nil
}
