// Command ovnhost-cni is the CNI plugin that kubelet (or containerd, nerdctl)
// executes from the CNI bin dir. It forwards each request to the ovnhost node
// daemon's CNI server over a unix socket and prints what the daemon answers.
// It carries no Kubernetes client and does no networking itself.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovnhost/ovnhost/cni/protocol"
	iv "github.com/ovnhost/ovnhost/internal/version"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    forward("ADD"),
		Del:    forward("DEL"),
		Check:  forward("CHECK"),
		GC:     forward("GC"),
		Status: forward("STATUS"),
	}, version.All, "ovnhost-cni "+iv.Version+": forwards CNI requests to the ovnhost node daemon")
}

func forward(cmd string) func(*skel.CmdArgs) error {
	return func(a *skel.CmdArgs) error {
		var conf protocol.NetConf
		if err := json.Unmarshal(a.StdinData, &conf); err != nil {
			return types.NewError(types.ErrDecodingFailure, "ovnhost-cni: cannot parse the network configuration: "+err.Error(), "")
		}
		sock := conf.Socket
		if sock == "" {
			sock = protocol.DefaultSocket
		}
		timeout := 300 * time.Second
		if conf.TimeoutSeconds > 0 {
			timeout = time.Duration(conf.TimeoutSeconds) * time.Second
		}
		body, err := json.Marshal(protocol.Request{
			Command: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
			Args: a.Args, Path: a.Path, Config: a.StdinData, Provider: protocol.AttachmentProvider(conf),
		})
		if err != nil {
			return types.NewError(types.ErrInternal, err.Error(), "")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		client := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives: true,
		}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://ovnhost"+protocol.Path, bytes.NewReader(body))
		if err != nil {
			return types.NewError(types.ErrInternal, err.Error(), "")
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return unreachable(sock, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("ovnhost-cni: reading the answer of the ovnhost daemon on %s failed: %v; try again later", sock, err), "")
		}
		var r protocol.Response
		if err := json.Unmarshal(data, &r); err != nil {
			return types.NewError(types.ErrInternal, fmt.Sprintf("ovnhost-cni: the daemon on %s answered HTTP %d with something that is not a CNI response: %.200s", sock, resp.StatusCode, data), "")
		}
		if r.Error != nil {
			return r.Error
		}
		if len(r.Result) > 0 {
			if _, err := os.Stdout.Write(r.Result); err != nil {
				return types.NewError(types.ErrIOFailure, err.Error(), "")
			}
		}
		return nil
	}
}

// unreachable is CNI error 11 (try again later): the runtime retries, and the
// message says which socket did not answer.
func unreachable(sock string, err error) error {
	why := err.Error()
	switch {
	case errors.Is(err, syscall.ENOENT):
		why = "the socket does not exist (is the ovnhost daemon running?)"
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused (the ovnhost daemon is not listening)"
	case errors.Is(err, syscall.EACCES):
		why = "permission denied (the plugin must run as root or in the socket's group)"
	case errors.Is(err, context.DeadlineExceeded):
		why = "no answer before the timeout"
	}
	return types.NewError(types.ErrTryAgainLater,
		fmt.Sprintf("ovnhost-cni: cannot reach the ovnhost CNI server at %s: %s; try again later", sock, why), err.Error())
}
