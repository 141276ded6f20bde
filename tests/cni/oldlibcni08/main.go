// Command oldlibcni runs ADD, CHECK or DEL of a conflist through an old
// libcni (the version in go.mod), as a container runtime embedding it would,
// and prints the result (ADD) as that libcni encodes it. The ovnhost CNI
// tests (tests/cni) build it to check that the installed conflist works with
// the libcni of older runtimes. It is its own module so that the main
// module keeps its own libcni.
//
//	oldlibcni -cmd add|check|del -conflist FILE -netns PATH -id CONTAINERID
//	          [-ifname eth0] [-path CNI_PATH] [-cache DIR] [-args K=V;K=V]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	cmd := flag.String("cmd", "add", "add, check or del")
	conflist := flag.String("conflist", "", "the conflist file")
	netns := flag.String("netns", "", "network namespace path")
	id := flag.String("id", "", "container ID")
	ifName := flag.String("ifname", "eth0", "interface name")
	path := flag.String("path", "", "CNI_PATH (default: /opt/cni/bin)")
	cache := flag.String("cache", "", "libcni cache directory")
	args := flag.String("args", "", "CNI_ARGS as K=V;K=V")
	flag.Parse()
	if err := run(*cmd, *conflist, *netns, *id, *ifName, *path, *cache, *args); err != nil {
		fmt.Fprintln(os.Stderr, "oldlibcni:", err)
		os.Exit(1)
	}
}

func run(cmd, conflist, netns, id, ifName, path, cache, args string) error {
	list, err := libcni.ConfListFromFile(conflist)
	if err != nil {
		return err
	}
	if path == "" {
		path = "/opt/cni/bin"
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(path), cache, nil)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifName, CacheDir: cache}
	for _, kv := range strings.Split(args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			rt.Args = append(rt.Args, [2]string{k, v})
		}
	}
	ctx := context.Background()
	switch cmd {
	case "add":
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		return res.Print()
	case "check":
		return cni.CheckNetworkList(ctx, list, rt)
	case "del":
		return cni.DelNetworkList(ctx, list, rt)
	}
	return fmt.Errorf("unknown command %q", cmd)
}
