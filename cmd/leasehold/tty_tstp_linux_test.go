//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startJobShell starts an interactive bash on a new pseudo-terminal.
func startJobShell(t *testing.T) (*pty, *exec.Cmd, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed: it is the job-control shell of this test")
	}
	p := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	sh := exec.CommandContext(ctx, bash, "--norc", "--noprofile", "-i")
	sh.Env = []string{"PATH=" + os.Getenv("PATH"), "TERM=dumb", "PS1=$ ", "HOME=" + t.TempDir()}
	p.start(sh)
	return p, sh, p.expect(0, "$ ")
}

// runTicks types, into the shell on p, a "leasehold run" with this TTL on
// lease name of a command that appends a line to ticks every 20 ms, and
// waits until the command has started. It returns the terminal's output
// position after that.
func runTicks(p *pty, at int, store, ttl, name, ticks string) int {
	// One command per line: bash goes on with the rest of a line when a
	// job of it stops.
	p.typeIn(fmt.Sprintf("%s run --store %s --ttl %s %s -- sh -c 'echo st''arted; while :; do echo tick >> %s; sleep 0.02; done'\n",
		bin, store, ttl, name, ticks))
	return p.expect(at, "started")
}

// fileSize is the size of the file at path (0 if it is missing).
func fileSize(path string) int {
	b, _ := os.ReadFile(path)
	return len(b)
}

// Ctrl-Z on a command that ignores SIGTSTP: the command is not stopped, so
// its lease must not be left unrenewed while it runs. Long after the TTL,
// the command still writes only while the lease is held.
func TestTerminalCtrlZIgnoredKeepsLease(t *testing.T) {
	store, _ := newStore(t)
	ticks := filepath.Join(t.TempDir(), "ticks")
	p, sh, at := startJobShell(t)
	p.typeIn(fmt.Sprintf("%s run --store %s --ttl 2s e2e/tstp -- sh -c 'trap \"\" TSTP; echo st''arted; while :; do date >> %s; sleep 0.1; done'\n",
		bin, store, ticks))
	at = p.expect(at, "started")
	waitHeld(t, store, "e2e/tstp")
	size := func() int { return fileSize(ticks) }

	p.typeIn("\x1a")            // Ctrl-Z: ignored by the command
	time.Sleep(5 * time.Second) // over twice the TTL
	for i := range 3 {
		held := len(status(t, store, "e2e/tstp")) == 1
		before := size()
		time.Sleep(time.Second)
		after := size()
		if !held && after != before {
			t.Fatalf("check %d: the command wrote %d bytes while its lease was not held; terminal:\n%s", i, after-before, p.output())
		}
	}
	p.typeIn("\x03") // Ctrl-C (the command is in the foreground)
	p.typeIn("fg\n") // in case the job was stopped anyway
	at = p.expect(at, "$ ")
	p.typeIn("exit\n")
	_ = sh.Wait()
}

// A job stopped with Ctrl-Z for longer than the lease's TTL: leasehold is
// stopped and cannot renew, but the keeper stays awake and kills the
// stopped command at the lease's deadline. fg then reports the lease lost.
func TestTerminalStoppedJobKilledAtDeadline(t *testing.T) {
	store, _ := newStore(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	p, sh, at := startJobShell(t)
	p.typeIn(fmt.Sprintf("%s run --store %s --ttl 2s e2e/stopkill -- sh -c 'echo $$ > %s; echo st''arted; while :; do sleep 0.1; done'\n",
		bin, store, pidFile))
	at = p.expect(at, "started")
	waitHeld(t, store, "e2e/stopkill")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	p.typeIn("\x1a") // Ctrl-Z
	at = p.expect(at, "Stopped")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped command (pid %d) is still there 30s after Ctrl-Z with a 2s TTL; terminal:\n%s", pid, p.output())
		}
	}
	p.typeIn("fg\n")
	at = p.expect(at, "$ ")
	p.typeIn("echo \"rc=$?\"\n")
	p.expect(at, "rc=76")
	p.typeIn("exit\n")
	_ = sh.Wait()
}
