//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readPid waits for a pid written to path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
	}
}

// growing reports whether the file at path grows within d.
func growing(path string, d time.Duration) bool {
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	before := size()
	time.Sleep(d)
	return size() != before
}

// Issue 25, item 7: the command exits leaving a process that ignores
// SIGTERM; while the keeper waits for it to go (the leftover window),
// leasehold's own process group gets SIGKILL (kill -9 -PGID, timeout -s
// KILL, kill -9 %1). The leftover must not outlive the lease: the keeper
// used to join leasehold's group for that window, die with it, and leave
// the leftover running for ever.
func TestLeftoverKilledWhenSupervisorGroupKilled(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	ticks, pidFile, exited := filepath.Join(dir, "ticks"), filepath.Join(dir, "pid"), filepath.Join(dir, "exited")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := fmt.Sprintf(`trap '' TERM; (trap '' TERM; echo $BASHPID > %s; while :; do echo tick >> %s; sleep 0.02; done) & sleep 0.3; echo > %s; exit 0`,
		pidFile, ticks, exited)
	cmd := leasehold(ctx, "run", "--store", store, "--ttl", "10s", "e2e/leftover", "--", "bash", "-c", script)
	startGroup(t, cmd)
	leftover := readPid(t, pidFile)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(exited); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never exited")
		}
	}
	time.Sleep(300 * time.Millisecond) // inside the leftover window (SIGTERM ignored: 1 s before SIGKILL)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); !processGone(leftover); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leftover (pid %d) still runs 10 s after leasehold's group was killed (still writing: %v)", leftover, growing(ticks, 200*time.Millisecond))
		}
	}
}

// Issue 25, item 6: under a terminal, the keeper alone gets SIGSTOP.
// leasehold used to stop its own job, so nobody renewed the lease or
// enforced its deadline while the command ran on: another holder got the
// lease. Now leasehold goes on holding and enforcing it: the command only
// writes while its lease is held.
func TestTerminalKeeperStoppedKeepsLease(t *testing.T) {
	store, _ := newStore(t)
	p, sh, job, at := startTicks(t, store, "--ttl 2s", "e2e/keeperstop", "")
	waitHeld(t, store, "e2e/keeperstop")
	keeper := parentOf(t, job.pid)
	if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGCONT) })
	time.Sleep(5 * time.Second) // over twice the TTL
	for i := range 3 {
		held := len(status(t, store, "e2e/keeperstop")) == 1
		if !held && growing(job.ticks, time.Second) {
			t.Fatalf("check %d: the command wrote while its lease was not held (the keeper stopped); terminal:\n%s", i, p.output())
		}
		if held {
			time.Sleep(time.Second)
		}
	}
	if !strings.Contains(p.output(), "keeper of the command's process group was stopped") {
		t.Errorf("leasehold did not say that the keeper was stopped; terminal:\n%s", p.output())
	}
	_ = syscall.Kill(keeper, syscall.SIGCONT)
	p.typeIn("\x03") // Ctrl-C
	p.typeIn("fg\n") // in case the job was stopped anyway
	at = p.expect(at, "$ ")
	p.exit(sh)
}

// parentOf returns the parent pid of pid (from /proc).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}
