//go:build linux

package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIgnoredSignalStaysIgnored starts "leasehold run" with SIGHUP ignored,
// as nohup does: the command must inherit the ignore (and leasehold must
// not catch SIGHUP and forward it).
func TestIgnoredSignalStaysIgnored(t *testing.T) {
	store, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `trap '' HUP; exec "$0" "$@"`, bin,
		"run", "--store", store, "e2e/nohup", "--", "grep", "SigIgn", "/proc/self/status")
	cmd.Env = leasehold(ctx).Env // without LEASEHOLD_STORE
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "SigIgn:" {
		t.Fatalf("unexpected output %q", out)
	}
	mask, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if mask&1 == 0 { // bit 0: SIGHUP (1)
		t.Errorf("the command does not ignore SIGHUP (SigIgn %s): leasehold dropped the ignore it was started with", f[1])
	}
}
