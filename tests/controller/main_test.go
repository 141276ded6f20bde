package controller_test

import (
	"os"
	"testing"
)

// TestMain removes the controller binary built for the process-based tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
