package proctest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
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
