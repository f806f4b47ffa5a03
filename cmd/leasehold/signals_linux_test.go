//go:build linux

package main

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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
	cmd.WaitDelay = waitDelay
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

// TestHoldBackgroundNoCtrlC (issue 29, item 7): a hold started with SIGINT
// ignored (a script's background job) does not claim that Ctrl-C releases
// it: it names SIGTERM, which does.
func TestHoldBackgroundNoCtrlC(t *testing.T) {
	store, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `trap '' INT; exec "$0" hold --store "$1" bg/a`, bin, store)
	cmd.Env = leasehold(ctx).Env // without LEASEHOLD_* of the test's environment
	cmd.WaitDelay = waitDelay
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, cmd)
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.Contains(line, "holding bg/a") || strings.Contains(line, "Ctrl-C") || !strings.Contains(line, "SIGTERM releases it") {
		t.Errorf("hold with SIGINT ignored printed %q", line)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCode(cmd.Wait()); code != 0 {
		t.Errorf("hold after SIGTERM: exit %d, want 0", code)
	}
}
