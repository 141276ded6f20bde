// Command ovnhost-controller is a placeholder until its issue lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "ovnhost-controller: not built yet")
	os.Exit(1)
}
