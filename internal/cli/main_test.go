package cli

import (
	"os"
	"testing"
)

// TestMain lets this test binary be the keeper of the commands that the
// tests run in-process ("run" and "elect" start their own binary as the
// keeper).
func TestMain(m *testing.M) {
	if KeeperRequested() {
		os.Exit(RunKeeper())
	}
	os.Exit(m.Run())
}
