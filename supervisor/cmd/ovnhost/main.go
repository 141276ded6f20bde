// Command ovnhost is the node daemon (placeholder until the supervisor lands).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "ovnhost: not built yet")
	os.Exit(1)
}
