//go:build linux

package main

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A supervisor stopped (SIGSTOP) past the lease's deadline while nobody
// else takes the lease: its keeper kills the command's tree at the
// deadline; continued, the supervisor must report the lease lost (76, with
// a message) even though releasing the expired lease still succeeds on
// SQLite, not the command's SIGKILL (137).
func TestSupervisorStoppedPastDeadlineReportsLost(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		log := dir + "/log" + string(rune('0'+i))
		first := leasehold(ctx, "run", "--store", store, "--ttl", "1s", "--owner", "first", "e2e/stopexp", "--", "sh", "-c", treeScript, "sh", log)
		var stderr bytes.Buffer
		first.Stderr = &stderr
		startGroup(t, first)
		waitTree(t, log, "first")
		if err := syscall.Kill(first.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Past the deadline: the keeper kills the tree meanwhile.
		time.Sleep(3 * time.Second)
		if err := syscall.Kill(first.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(20*time.Second, func() { _ = syscall.Kill(first.Process.Pid, syscall.SIGQUIT) })
		code := exitCode(first.Wait())
		timer.Stop()
		if code != 76 {
			t.Fatalf("run %d: the supervisor stopped past the deadline exited %d once continued, want 76 (lost); stderr:\n%s", i, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "lost") {
			t.Errorf("run %d: no message that the lease was lost:\n%s", i, stderr.String())
		}
	}
}
