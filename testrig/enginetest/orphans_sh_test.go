package enginetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/proctest"
	"golang.org/x/sys/unix"
)

// Tests of what the scripts leave when signalled, found by the third red
// team of 2026-12-06: processes the clean-up could not reach through the
// process tree. Each test's processes carry a proctest mark, by which the
// ones left are found wherever they went (re-parented to init).

// leftMarked lists the processes still carrying the mark kv
// ("PROCTEST_TREE=...") once within has passed, or none as soon as none is
// left (a zombie carries none).
func leftMarked(kv string, within time.Duration) []int {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		left := proctest.Marked([]byte(kv))
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// oddPath is a path to dir that is not its resolved form: through a
// symlink, and ending in "/./".
func oddPath(t *testing.T, dir string) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	return link + "/./"
}

// Stand-in bodies for a go test that runs until stopped, each writing
// "child PID" to $FAKE_GO_LOG once its child runs.
const (
	// It and its child ignore SIGTERM: SIGKILL ends them.
	ignoresTerm = `trap '' TERM; sleep 300 & echo "child $!" >>"$FAKE_GO_LOG"; wait`
	// It dies of SIGTERM; its child ignores it, and is left with no
	// parent when a signal to the group kills it.
	diesLeavingChild = `(trap '' TERM; exec sleep 300) & echo "child $!" >>"$FAKE_GO_LOG"; exec sleep 300`
	// On SIGTERM it starts a child that ignores it, and ends.
	startsChildAtTerm = `trap '(trap "" TERM; exec sleep 300) & exit 1' TERM; sleep 300 & echo "child $!" >>"$FAKE_GO_LOG"; wait`
	// It dies of SIGTERM; its child, a daemon in a session of its own (a
	// group signal does not reach it), has no environment in /proc, as
	// redis-server, which writes its process title over it, and works in
	// a directory in TMPDIR, as the engines the tests start do.
	// Started as a daemon is (its parent gone at once), out of the
	// tree's reach from the start.
	leavesEngine = `mkdir -p "$TMPDIR/engine$$"; (cd "$TMPDIR/engine$$" && (exec setsid env -i sleep 300) & echo "child $!" >>"$FAKE_GO_LOG"); exec sleep 300`
	// The same, but working elsewhere, running a program built in
	// TMPDIR, as the leasehold binaries the end-to-end tests build are
	// (and start without the LEASEHOLD_* variables).
	leavesBuilt = `cp "$(command -v sleep)" "$TMPDIR/built$$"; (cd / && (exec setsid env -i "$TMPDIR/built$$" 300) & echo "child $!" >>"$FAKE_GO_LOG"); exec sleep 300`
)

// TestVerifySignalLeavesNoOrphan: verify.sh, signalled while its suites
// and the fuzz targets' build run, leaves none of their processes, however
// they end.
//   - A burst of SIGTERMs to its group during its clean-up: the clean-up
//     checked each child's parent with ps, which sets handlers of its own
//     for SIGTERM (the clean-up's ignoring of it does not reach ps); killed, it
//     printed nothing, the check failed, and that child (the suites' or
//     the build's tree) was never stopped (the red team: 10 of 10 left
//     the suites running; 7 of 10 with the fuzz build).
//   - One SIGTERM to its group, which kills a process whose child ignores
//     it: the child, re-parented to init, was out of the clean-up's reach
//     (20 of 20).
//   - One SIGTERM to verify.sh alone, and a process that starts a child as
//     it ends (6 of 6).
func TestVerifySignalLeavesNoOrphan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		group  bool
		burst  int
		oddTmp bool // TMPDIR through a symlink, ending in "/./"
	}{
		{"burst of SIGTERMs to its group", ignoresTerm, true, 30, false},
		{"SIGTERM to its group, a child outlives its parent", diesLeavingChild, true, 1, false},
		{"SIGTERM to it alone, a child started at SIGTERM", startsChildAtTerm, false, 1, false},
		{"SIGTERM to its group, an engine with no environment left", leavesEngine, true, 1, false},
		// The kernel shows the engine's directory resolved (the red
		// team's second re-check: a TMPDIR with a trailing slash or a
		// symlink matched nothing, 29 of 30 left).
		{"SIGTERM to its group, an engine left, TMPDIR through a symlink", leavesEngine, true, 1, true},
		{"SIGTERM to its group, a program built in TMPDIR left", leavesBuilt, true, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := proctest.MarkTrees(t)
			log := filepath.Join(t.TempDir(), "calls")
			bin := fakeGoLog(t, tc.body, tc.body)
			tmp := t.TempDir()
			cmd := exec.Command(repoScript(t, "verify.sh"))
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), fakeEnv(bin, log, tmp)...)
			if tc.oddTmp {
				cmd.Env = append(cmd.Env, "TMPDIR="+oddPath(t, tmp)) // the last one counts
			}
			out := startGroup(t, cmd)
			// What a failing run left with no mark (a daemon with no
			// environment), by pid.
			t.Cleanup(func() {
				for _, pid := range loggedPids(log) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
				b, _ := os.ReadFile(log)
				if strings.Contains(string(b), "suites ") && strings.Count(string(b), "child ") == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the suites and the build never both ran: %q\n%s", b, out)
				}
			}
			target := cmd.Process.Pid
			if tc.group {
				target = -target
			}
			for i := range tc.burst {
				if i > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				syscall.Kill(target, syscall.SIGTERM)
			}
			waitExit(t, cmd, 90*time.Second, "verify.sh after SIGTERM", out)
			if left := leftMarked(kv, 10*time.Second); len(left) > 0 {
				t.Errorf("verify.sh ended and left processes running:\n%s\n%s", proctest.DescribeProcs(left), out)
			}
			// The stand-ins' children by pid: one with no environment
			// carries no proctest mark.
			if left := stillRunning(loggedPids(log), 5*time.Second); len(left) > 0 {
				t.Errorf("verify.sh ended and left processes running: %v\n%s", left, out)
			}
			if left := dirEntries(t, tmp); len(left) > 0 {
				t.Errorf("verify.sh left %v in TMPDIR\n%s", left, out)
			}
		})
	}
}

// TestTestShGroupSignalLeavesNoOrphan: a signal to test.sh's group kills
// a process of the running stage whose child ignores it; the child,
// re-parented to init, was left running (the red team: 8 of 8; the table
// and the exit were right). Now the stage's processes carry a mark by which
// test.sh finds them. A daemon with no environment in /proc (redis-server
// writes its title over it), in a session of its own, is found by its
// working directory, in the run's TMPDIR (the red team's re-check: 6 of 6
// left).
func TestTestShGroupSignalLeavesNoOrphan(t *testing.T) {
	engine := `mkdir -p "$TMPDIR/engine"; (cd "$TMPDIR/engine" && (exec setsid env -i sleep 300) & echo $! >"$MARK.child")`
	for _, tc := range []struct {
		name, child string
		oddTmp      bool // TMPDIR through a symlink, ending in "/./"
	}{
		{"child outlives its parent", `(trap '' TERM; exec sleep 300) & echo $! >"$MARK.child"`, false},
		{"engine with no environment", engine, false},
		{"engine with no environment, TMPDIR through a symlink", engine, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := proctest.MarkTrees(t)
			mark := filepath.Join(t.TempDir(), "mark")
			bin := standIns(t, map[string]string{"go": `if [ "$1" = mod ]; then
	` + tc.child + `
	touch "$MARK"
	exec sleep 300
fi
exec ` + realPath(t, "go") + ` "$@"`})
			tmp := t.TempDir()
			tmpdir := tmp
			if tc.oddTmp {
				tmpdir = oddPath(t, tmp)
			}
			cmd := exec.Command(repoScript(t, "test.sh"))
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "MARK="+mark,
				"LEASEHOLD_STAGES=mod", "TMPDIR="+tmpdir)
			out := startGroup(t, cmd)
			waitFile(t, mark, 2*time.Minute, "the mod stage's start", out)
			b, _ := os.ReadFile(mark + ".child")
			child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := waitExit(t, cmd, 90*time.Second, "test.sh after SIGTERM to its group", out)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 || !strings.Contains(out.String(), "INTERRUPTED by SIGTERM") {
				t.Errorf("test.sh after SIGTERM to its group: %v, want exit 143 and the stage INTERRUPTED:\n%s", err, out)
			}
			if left := leftMarked(kv, 10*time.Second); len(left) > 0 {
				t.Errorf("test.sh ended and left processes running:\n%s\n%s", proctest.DescribeProcs(left), out)
			}
			if left := stillRunning([]int{child}, 5*time.Second); len(left) > 0 {
				t.Errorf("test.sh ended and left the stage's child running: %v\n%s", left, out)
			}
			if left := dirEntries(t, tmp); len(left) > 0 {
				t.Errorf("test.sh left %v in TMPDIR\n%s", left, out)
			}
		})
	}
}

// TestTestShSignalDuringGoVersion: a signal while test.sh printed go's
// version, before any stage: to test.sh alone it ended the run with no
// table (the signal's trap was set, the table's not yet); to its group it
// also killed go version (its subshell does not keep the traps), and the
// heading read "== " (the red team: 1 of 72 each). Now the table is printed
// and the heading is whole.
func TestTestShSignalDuringGoVersion(t *testing.T) {
	for _, tc := range []struct {
		sig   syscall.Signal
		group bool
	}{
		{syscall.SIGTERM, false},
		{syscall.SIGINT, true},
		{syscall.SIGHUP, true},
	} {
		to := "alone"
		if tc.group {
			to = "group"
		}
		t.Run(unix.SignalName(tc.sig)+" to "+to, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "mark")
			bin := standIns(t, map[string]string{"go": `if [ "$1" = version ]; then touch "$MARK"; sleep 2; echo "go version go0.0-standin linux/amd64"; exit 0; fi
exec ` + realPath(t, "go") + ` "$@"`})
			cmd := exec.Command(repoScript(t, "test.sh"))
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "MARK="+mark,
				"LEASEHOLD_STAGES=mod", "TMPDIR="+t.TempDir())
			out := startGroup(t, cmd)
			waitFile(t, mark, time.Minute, "test.sh's go version", out)
			target := cmd.Process.Pid
			if tc.group {
				target = -target
			}
			if err := syscall.Kill(target, tc.sig); err != nil {
				t.Fatal(err)
			}
			err := waitExit(t, cmd, 90*time.Second, "test.sh after the signal", out)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(tc.sig) {
				t.Errorf("test.sh after SIG%s: %v, want exit %d:\n%s", unix.SignalName(tc.sig), err, 128+int(tc.sig), out)
			}
			if !strings.Contains(out.String(), "== stages (") {
				t.Errorf("test.sh after SIG%s during go version printed no table:\n%s", unix.SignalName(tc.sig), out)
			}
			if tc.group && !strings.Contains(out.String(), "== go version go0.0-standin") {
				t.Errorf("the heading lost go's version:\n%s", out)
			}
		})
	}
}
