//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// treeScript is a command (for sh -c, with the log file as $1) whose
// process tree records its life in the log: a "start OWNER TOKEN" line,
// then the pids of the child (the sh itself) and of a grandchild (a second
// sh in the background), then a heartbeat line every 10ms from each ("c
// OWNER", "g OWNER"), forever.
const treeScript = `echo "start $LEASEHOLD_OWNER $LEASEHOLD_TOKEN" >> "$1"
sh -c 'echo "gpid $LEASEHOLD_OWNER $$" >> "$1"; while :; do echo "g $LEASEHOLD_OWNER" >> "$1"; sleep 0.01; done' sh "$1" &
echo "cpid $LEASEHOLD_OWNER $$" >> "$1"
while :; do echo "c $LEASEHOLD_OWNER" >> "$1"; sleep 0.01; done`

// startScript only records its start in the log ($1) and exits soon.
const startScript = `echo "start $LEASEHOLD_OWNER $LEASEHOLD_TOKEN" >> "$1"; sleep 0.3`

// testStores returns the store URLs to run a test on: a fresh SQLite file
// and every engine the environment configures.
func testStores(t *testing.T) map[string]string {
	sqliteURL, _ := newStore(t)
	stores := map[string]string{"sqlite": sqliteURL}
	for _, e := range enginetest.Engines {
		if u := os.Getenv(e.URLVar); e.URLVar != "" && u != "" {
			name := e.Store
			if name == "redis" {
				// The test server is fresh and has no persistence: without
				// this the store holds back its first grants (docs/stores/redis.md).
				u += "?holdback=0"
			}
			stores[name] = u
		}
	}
	return stores
}

// treeLog is a log written by treeScript and startScript.
type treeLog []string

// pids returns the pids the tree of owner recorded.
func (l treeLog) pids(owner string) []int {
	var out []int
	for _, line := range l {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "cpid" || f[0] == "gpid") && f[1] == owner {
			if pid, err := strconv.Atoi(f[2]); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// running reports whether the tree of owner is up: both pids recorded and
// heartbeats from both.
func (l treeLog) running(owner string) bool {
	var c, g bool
	for _, line := range l {
		c = c || line == "c "+owner
		g = g || line == "g "+owner
	}
	return c && g && len(l.pids(owner)) == 2
}

// waitTree waits until the tree of owner runs.
func waitTree(t *testing.T, log, owner string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !treeLog(readLines(log)).running(owner); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command tree of %s never ran: %q", owner, readLines(log))
		}
	}
}

// processGone reports whether pid has exited (a zombie not yet reaped by
// its new parent counts as exited: it runs no more).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist) && syscall.Kill(pid, 0) != nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// assertTreeStopped checks the log: after the start of next (granted the
// lease after the supervisor of killed died) the tree of killed wrote no
// heartbeat, and its processes are gone. It kills what is left on failure.
func assertTreeStopped(t *testing.T, log, killed, next string) {
	t.Helper()
	lines := treeLog(readLines(log))
	start := -1
	for i, line := range lines {
		if strings.HasPrefix(line, "start "+next+" ") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s never started: %q", next, lines)
	}
	after := 0
	for _, line := range lines[start+1:] {
		if line == "c "+killed || line == "g "+killed {
			after++
		}
	}
	if after > 0 {
		t.Errorf("%d heartbeats of %s's command tree after %s was granted the lease", after, killed, next)
	}
	pids := lines.pids(killed)
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("process %d of %s's command tree still runs after %s was granted the lease", pid, killed, next)
		}
	}
	if t.Failed() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestSignalStopsTree sends SIGTERM to the PID of "leasehold run" whose
// command is sh -c '(loop) & wait': the signal reaches the whole group, so
// the grandchild is gone before the next "run" is granted the lease.
func TestSignalStopsTree(t *testing.T) {
	store, _ := newStore(t)
	log := t.TempDir() + "/log"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := `echo "start $LEASEHOLD_OWNER $LEASEHOLD_TOKEN" >> "$1"
sh -c 'echo "gpid $LEASEHOLD_OWNER $$" >> "$1"; while :; do echo "g $LEASEHOLD_OWNER" >> "$1"; sleep 0.01; done' sh "$1" &
echo "cpid $LEASEHOLD_OWNER $$" >> "$1"
while :; do echo "c $LEASEHOLD_OWNER" >> "$1"; sleep 0.01; done & wait`
	first := leasehold(ctx, "run", "--store", store, "--owner", "first", "e2e/term", "--", "sh", "-c", script, "sh", log)
	startGroup(t, first)
	waitTree(t, log, "first")
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(first.Wait()); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want %d (the sh died from SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	next := leasehold(ctx, "run", "--store", store, "--no-wait", "--owner", "next", "e2e/term", "--", "sh", "-c", startScript, "sh", log)
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	assertTreeStopped(t, log, "first", "next")
}

// TestSupervisorStoppedStopsTree stops (SIGSTOP) the PID of a holding
// "leasehold run": it cannot renew or signal any more, but its keeper
// kills the command's tree at the lease's deadline, before the next run is
// granted the lease. Continued, the supervisor reports the lease lost.
func TestSupervisorStoppedStopsTree(t *testing.T) {
	store, _ := newStore(t)
	log := t.TempDir() + "/log"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	first := leasehold(ctx, "run", "--store", store, "--ttl", "2s", "--owner", "first", "e2e/stop", "--", "sh", "-c", treeScript, "sh", log)
	startGroup(t, first)
	waitTree(t, log, "first")
	if err := syscall.Kill(first.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := leasehold(ctx, "run", "--store", store, "--owner", "next", "e2e/stop", "--", "sh", "-c", startScript, "sh", log)
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	assertTreeStopped(t, log, "first", "next")
	if err := syscall.Kill(first.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(first.Wait()); code != 76 {
		t.Errorf("the stopped supervisor exited %d once continued, want 76 (lost)", code)
	}
}
