// Package version carries the build identity stamped in by the Makefile, so
// the daemon can tell whether the installed CNI plugin is its own build.
package version

// Version is set with -ldflags -X at build time.
var Version = "dev"
