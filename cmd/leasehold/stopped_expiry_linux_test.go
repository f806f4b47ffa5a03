//go:build linux

package main

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sqlite"
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

// A supervisor stopped (SIGSTOP) just after a renewal was confirmed, before
// it passed the new deadline on to its keeper: the keeper kills the group at
// the older deadline's kill time, while the supervisor's lease, renewed, is
// still held. Continued at once, the supervisor must report what happened:
// the lease was not renewed in time for the group (76, with a message), not
// the command's SIGKILL (137) with the lease released as if all went well.
//
// The stop follows the renewal's commit, seen in the SQLite file, within a
// few milliseconds; the supervisor passes new deadlines on every 250 ms here
// (--grace 1s), so it rarely has. Should it have, the keeper kills at the
// new deadline's kill time, and the continued supervisor still renews its
// lease before the deadline (it is continued within the kill margin, 300 ms).
func TestSupervisorStoppedAfterRenewalReportsLost(t *testing.T) {
	store, path := newStore(t)
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	log := t.TempDir() + "/log"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const name = "e2e/stoprenew"
	sup := leasehold(ctx, "run", "--store", store, "--ttl", "6s", "--grace", "1s", "--owner", "first", name, "--", "sh", "-c", treeScript, "sh", log)
	var stderr bytes.Buffer
	sup.Stderr = &stderr
	startGroup(t, sup)
	waitTree(t, log, "first")
	pids := treeLog(readLines(log)).pids("first")

	// Wait for a renewal: the time left in the store jumps up.
	var last time.Duration
	for {
		rec, err := s.Get(ctx, name)
		if err != nil {
			t.Fatalf("read the lease: %v; stderr:\n%s", err, stderr.String())
		}
		if last > 0 && rec.Remaining > last+time.Second {
			break
		}
		last = rec.Remaining
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(sup.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for !processGone(pids[0]) || !processGone(pids[1]) {
		if ctx.Err() != nil {
			t.Fatalf("the keeper never killed the tree of a stopped supervisor")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(sup.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	code := exitCode(sup.Wait())
	if code != 76 {
		t.Fatalf("the supervisor stopped after a renewal exited %d once continued, want 76 (not renewed in time); stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "lease "+name+" lost") {
		t.Errorf("no message that the lease was lost:\n%s", stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
}
