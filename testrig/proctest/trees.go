package proctest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TreeMark is the environment variable that marks the processes a test
// starts. Every descendant inherits it (leasehold run passes its
// environment on to the command, and the command to its children), so a
// process tree can be found whole even after its parts have left their
// parent's process group or been re-parented to init.
const TreeMark = "PROCTEST_TREE"

// MarkTrees gives the running test a mark of its own: it sets TreeMark in
// this process's environment for the test's duration (t.Setenv: the test
// and its ancestors must not be parallel), so that every process the test
// starts with this environment, and all their descendants, carry it. When
// the test ends, before its temporary directory is removed, every process
// still carrying the mark is sent SIGKILL and waited for; the test fails
// if one still runs after limit (a process that cannot be killed). A
// nested test's mark replaces its parent's until it ends.
//
// It returns "PROCTEST_TREE=<mark>" for commands built with an environment
// of their own (exec.Cmd.Env).
func MarkTrees(t testing.TB) string {
	t.Helper()
	// The temporary directory's removal is registered first, so that it
	// runs after the reaping (cleanups run last-registered first).
	_ = t.TempDir()
	var b [8]byte
	_, _ = rand.Read(b[:])
	mark := hex.EncodeToString(b[:])
	t.Setenv(TreeMark, mark)
	t.Cleanup(func() {
		if left := KillMarked(mark, 30*time.Second); len(left) > 0 {
			t.Errorf("processes of this test still run after SIGKILL: %v", left)
		}
	})
	return TreeMark + "=" + mark
}

// MarkTreesWithin is MarkTrees with a watchdog: if the test still runs
// after limit (capped so that it fires 30 s before the test binary's
// -timeout would), it fails, naming the state of each of its processes
// (stopped ones show state T) and every goroutine of the test binary, and
// its processes are killed (KillMarked), so that the test's waits on them
// (Wait, a read of their output) end and the rest of the package runs.
// A process waited for while stopped, or a pipe a leftover holds open,
// otherwise made a test wait until the binary's timeout, which names the
// test but not what its processes were doing.
//
// The limit is for the whole test, subtests included: give the longest
// run on a loaded machine generous room.
func MarkTreesWithin(t testing.TB, limit time.Duration) string {
	t.Helper()
	kv := MarkTrees(t)
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := tt.Deadline(); ok {
			limit = max(min(limit, time.Until(dl)-30*time.Second), time.Second)
		}
	}
	began := time.Now()
	fired := make(chan struct{})
	timer := time.AfterFunc(limit, func() {
		defer close(fired)
		pids := Marked([]byte(kv))
		var stacks []byte
		for n := 1 << 16; ; n *= 2 {
			stacks = make([]byte, n)
			if m := runtime.Stack(stacks, true); m < n {
				stacks = stacks[:m]
				break
			}
		}
		t.Errorf("still running %s after it started (limit %s): something waits for ever; its %d processes (killed now):\n%s\ngoroutines of the test binary:\n%s",
			time.Since(began).Round(time.Second), limit, len(pids), DescribeProcs(pids), stacks)
		if left := KillMarked(strings.TrimPrefix(kv, TreeMark+"="), 30*time.Second); len(left) > 0 {
			t.Errorf("processes still run after SIGKILL: %v", left)
		}
	})
	// Registered after MarkTrees' reaping: runs before it. A watchdog
	// under way finishes before the test can end (t.Errorf after the
	// end panics).
	t.Cleanup(func() {
		if !timer.Stop() {
			<-fired
		}
	})
	return kv
}

// DescribeProcs describes the processes pids, one a line: pid, parent,
// process group, state (R running, S sleeping, T stopped, Z zombie...) and
// command line; a process gone meanwhile is said to be.
func DescribeProcs(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			fmt.Fprintf(&b, "  %d: gone\n", pid)
			continue
		}
		s := string(stat)
		state := "?"
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			// After the command name: state, ppid, pgrp, ...
			if f := strings.Fields(s[i+1:]); len(f) >= 3 {
				state = "state " + f[0] + ", parent " + f[1] + ", group " + f[2]
			}
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		fmt.Fprintf(&b, "  %d: %s: %s\n", pid, state, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return b.String()
}

// KillMarked sends SIGKILL to every process whose environment carries
// TreeMark=mark and waits until none runs (a zombie runs no more), for at
// most limit. It returns the pids still running then.
func KillMarked(mark string, limit time.Duration) []int {
	want := []byte(TreeMark + "=" + mark)
	deadline := time.Now().Add(limit)
	for {
		pids := Marked(want)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Marked returns the pids of the running processes (not zombies, not this
// one) whose initial environment holds the entry kv ("NAME=value").
func Marked(kv []byte) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !hasEntry(env, kv) || zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// hasEntry reports whether the NUL-separated environment block env holds
// the entry kv exactly.
func hasEntry(env, kv []byte) bool {
	for _, e := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(e, kv) {
			return true
		}
	}
	return false
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
