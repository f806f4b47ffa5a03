//go:build linux

package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/testrig/proctest"
)

// startKeeperTree starts a tree (this test binary as the keeper, see
// TestMain) whose command records its start in a file and sleeps, with
// these deadlines in the control pipe before the keeper starts. It returns
// the tree and the file; the group is killed when the test ends.
func startKeeperTree(t *testing.T, deadlines ...hostTime) (*tree, string) {
	t.Helper()
	proctest.MarkTrees(t)
	ran := filepath.Join(t.TempDir(), "ran")
	tr, err := startTree(treeSpec{
		argv:      []string{"sh", "-c", `echo ran > "$1"; exec sleep 60`, "sh", ran},
		env:       os.Environ(),
		stdout:    io.Discard,
		stderr:    io.Discard,
		deadlines: deadlines,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Kill(-tr.pgid, unix.SIGKILL)
		for ev := range tr.events {
			if !ev.stopped {
				break
			}
		}
		tr.close()
	})
	return tr, ran
}

// waitRan waits until the command of startKeeperTree has started, or its
// keeper has reported an error.
func waitRan(t *testing.T, tr *tree, ran string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ran); err == nil && tr.report().pid > 0 {
			return
		}
		if rep := tr.report(); rep.errCode != 0 {
			t.Fatalf("the keeper did not start the command: error %d %s", rep.errCode, rep.errMsg)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never started; report %+v", tr.report())
		}
	}
}

// A keeper that starts after the lease was renewed finds two deadlines in
// the pipe, the first one passed: it judges by the newest, and starts the
// command. It used to read the first alone and refuse (exit 76, "the
// lease's deadline passed before the command started"): the flake hunt's
// TestMutualExclusion lost rounds so on a starved machine, where the keeper
// took longer to start than the lease to be renewed.
func TestKeeperStartsOnNewestDeadline(t *testing.T) {
	tr, ran := startKeeperTree(t, deadlineIn(-time.Second), deadlineIn(time.Minute))
	waitRan(t, tr, ran)
}

// A keeper stopped (SIGSTOP) while the supervisor passes it a new deadline,
// and continued after the older one passed: it reads the newer deadline
// waiting in the pipe before it acts on the older one, and does not kill
// the group. Its timer and the new line used to be ready at once, and it
// killed the group about as often as not.
func TestKeeperReadsPipeBeforeKilling(t *testing.T) {
	tr, ran := startKeeperTree(t, deadlineIn(time.Second))
	waitRan(t, tr, ran)
	pid := tr.report().pid
	if err := unix.Kill(tr.pgid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select { // the stop has taken effect
	case ev := <-tr.events:
		if !ev.stopped {
			t.Fatalf("the keeper exited instead of stopping: %+v; report %+v", ev, tr.report())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the keeper never stopped")
	}
	tr.setRemaining(time.Minute)
	// Wait until the new deadline is in the pipe (TIOCINQ, or FIONREAD, of the write end
	// counts what the pipe holds, on Linux), then until the first one has
	// passed.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, err := unix.IoctlGetInt(int(tr.ctl.Fd()), unix.TIOCINQ); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new deadline never reached the pipe")
		}
	}
	time.Sleep(1200 * time.Millisecond)
	if err := unix.Kill(tr.pgid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if rep := tr.report(); rep.deadline || rep.done {
		t.Fatalf("the continued keeper killed the group at the older deadline: report %+v", rep)
	}
	if processGone(pid) || processGone(tr.pgid) {
		t.Fatalf("the command (%d) or the keeper (%d) is gone after the keeper was continued; report %+v", pid, tr.pgid, tr.report())
	}
}
