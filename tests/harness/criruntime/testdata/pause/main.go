// Command pause is the sandbox ("infra") container of the runtime tests: it
// holds the pod's namespaces, reaps the zombies it inherits as PID 1 and
// exits on SIGINT or SIGTERM, like registry.k8s.io/pause. Built statically
// (CGO_ENABLED=0) into a one-file image by tests/harness/criruntime.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
