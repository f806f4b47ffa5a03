//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// bin is the leasehold binary built by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bin, err = proctest.BuildLeasehold(dir, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newStore creates a fresh SQLite store file and returns its URL and path.
//
// The file is created here, before any leasehold process opens it: two
// processes that open a new file at the same moment can fail with
// SQLITE_BUSY (sqlite.Open switches the new file to WAL mode, and that
// does not wait on busy_timeout), which is a store bug, not what these
// tests are about.
func newStore(t *testing.T) (url, path string) {
	markTrees(t)
	path = filepath.Join(t.TempDir(), "x.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path, path
}

// treeLimit bounds every test of this package that marks the processes
// it starts (markTrees): one still running after it waits for something
// that will not come, and fails with what its processes were doing. The
// longest take a few minutes on a loaded machine (their own bounds are at
// most 5 minutes); the package's -timeout (20 minutes in scripts/test.sh)
// named the test only, after a long wait, and stopped the whole package.
const treeLimit = 8 * time.Minute

// markTrees marks the processes the test starts (proctest.MarkTrees: they
// are killed when it ends) and fails it after treeLimit, killing them
// then so that its waits on them end (proctest.MarkTreesWithin).
func markTrees(t *testing.T) {
	t.Helper()
	proctest.MarkTreesWithin(t, treeLimit)
}

// waitDelay bounds how long Wait goes on once the process has exited (or
// its context ended) while its output pipes stay open (a process of its
// tree that outlived it still writes to them): Wait then closes them and
// returns. Without it Wait waited as long as they were open, for ever for
// a leftover that never dies.
const waitDelay = 10 * time.Second

// leasehold returns a command running the binary, without LEASEHOLD_STORE
// from the environment, with waitDelay.
func leasehold(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		// Not the test scripts' mark (scripts/lib/proc.sh): without it, a
		// leftover of a stopped run is out of their reach.
		if !strings.HasPrefix(kv, "LEASEHOLD_") || strings.HasPrefix(kv, "LEASEHOLD_PROC_MARKS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.WaitDelay = waitDelay
	return cmd
}

// startGroup starts cmd in a process group of its own, killed (with any
// children left behind) when the test ends.
func startGroup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

// releaseBehind releases the lease name that held has straight in the
// SQLite file at path, behind its holder's back.
func releaseBehind(t *testing.T, path, name string, held leaseJSON) {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Release(context.Background(), name, held.Owner, held.Token); err != nil {
		t.Fatalf("release %s behind the holder's back: %v", name, err)
	}
}

// leaseJSON is one entry of "status --json".
type leaseJSON struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
}

func status(t *testing.T, store, prefix string) []leaseJSON {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := leasehold(ctx, "status", "--json", "--store", store, prefix).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("status: %v\n%s", err, stderr)
	}
	var ls []leaseJSON
	if err := json.Unmarshal(out, &ls); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return ls
}

// waitHeld polls status until name is held and returns the holder.
func waitHeld(t *testing.T, store, name string) leaseJSON {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, l := range status(t, store, name) {
			if l.Name == name {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed up as held", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestMutualExclusion runs 4 workers that each run "leasehold run" 5
// times; the children log start and end lines to one file.
func TestMutualExclusion(t *testing.T) {
	store, _ := newStore(t)
	mutualExclusion(t, store)
}

// mutualExclusion runs 4 workers that each complete 5 rounds of `leasehold
// run` on one name against store, and checks from the commands' log that
// they never overlapped and that their tokens grew.
//
// A round that exits 76 lost its lease and is run again. On a starved
// machine (the flake hunt's: load 15 on 2 cores, the test's processes
// niced) a lease whose renewal is not confirmed in time is lost, and
// rightly: the lease promises safety, not speed. Such a round's command
// did not run, or was stopped part way ("start" without "end"), or
// finished just before the loss; what is checked is that nothing of it was
// logged after the next command started. The lost rounds are bounded
// (as many as the rounds to complete), so that a product that loses every
// lease fails instead of retrying until the test times out.
func mutualExclusion(t *testing.T, store string) {
	logPath := filepath.Join(t.TempDir(), "log")
	const workers, rounds = 4, 5
	const maxLost = workers * rounds
	script := `echo "start $$ $LEASEHOLD_TOKEN" >> "$1"; sleep 0.02; echo "end $$ $LEASEHOLD_TOKEN" >> "$1"`

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var errs []string
	lost := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for done, attempt := 0, 0; done < rounds; attempt++ {
				cmd := leasehold(ctx, "run", "--store", store, "--ttl", "5s", "e2e/job", "--", "sh", "-c", script, "sh", logPath)
				out, err := cmd.CombinedOutput()
				mu.Lock()
				switch {
				case err == nil:
					done++
				case exitCode(err) == 76 && ctx.Err() == nil: // the lease was lost
					lost++
					t.Logf("worker %d attempt %d lost its lease (run again): %v\n%s", w, attempt, err, out)
					if lost > maxLost {
						errs = append(errs, fmt.Sprintf("worker %d: more than %d rounds lost their lease in all", w, maxLost))
						done = rounds
					}
				default:
					errs = append(errs, fmt.Sprintf("worker %d attempt %d: %v\n%s", w, attempt, err, out))
					done++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, msg := range errs {
		t.Error(msg)
	}

	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// open is the command that started last and has not ended; cut holds
	// the commands that never ended (their lease was lost): no line of
	// theirs may follow the next start.
	var open string
	cut := map[string]bool{}
	var last uint64
	pairs := 0
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[0] != "start" && f[0] != "end") {
			t.Fatalf("line %d: garbled %q\n%s", i+1, line, b)
		}
		who := f[1] + " " + f[2]
		if cut[who] {
			t.Fatalf("line %d: %q from a command that was cut off, after the next command started: overlap\n%s", i+1, line, b)
		}
		if f[0] == "end" {
			if who != open {
				t.Fatalf("line %d: %q while %q had started: overlap\n%s", i+1, line, open, b)
			}
			open = ""
			pairs++
			continue
		}
		if open != "" {
			cut[open] = true
		}
		open = who
		tok, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatalf("line %d: bad token: %v", i+1, err)
		}
		if tok <= last {
			t.Errorf("line %d: token %d after %d: not strictly increasing", i+1, tok, last)
		}
		last = tok
	}
	if open != "" {
		cut[open] = true
	}
	if len(cut) > lost {
		t.Errorf("%d commands never ended, but only %d rounds lost their lease", len(cut), lost)
	}
	if pairs < workers*rounds {
		t.Errorf("%d commands ran to their end, want at least %d", pairs, workers*rounds)
	}
	t.Logf("%d commands ran to their end, %d were cut off, %d rounds lost their lease; tokens up to %d", pairs, len(cut), lost, last)
}

// TestHolderKilled kills only the PID of a holding "leasehold run" with
// SIGKILL, on every store: its command tree (a child and a grandchild) must
// stop before a waiter gets the lease, which it does once the holder's TTL
// runs out.
func TestHolderKilled(t *testing.T) {
	for name, store := range testStores(t) {
		t.Run(name, func(t *testing.T) { holderKilled(t, store) })
	}
}

func holderKilled(t *testing.T, store string) {
	markTrees(t)
	const ttl = 2 * time.Second
	name := fmt.Sprintf("e2e/kill/%d", time.Now().UnixNano())
	log := filepath.Join(t.TempDir(), "log")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	holder := leasehold(ctx, "run", "--store", store, "--ttl", ttl.String(), "--owner", "holder", name, "--", "sh", "-c", treeScript, "sh", log)
	startGroup(t, holder)
	waitTree(t, log, "holder")

	waiter := leasehold(ctx, "run", "--verbose", "--store", store, "--ttl", ttl.String(), "--owner", "waiter", name, "--", "sh", "-c", startScript+"; echo got", "sh", log)
	stdout, err := waiter.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := waiter.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, waiter)
	waiting, got := make(chan struct{}), make(chan time.Time, 1)
	var errLines []string
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errLines = append(errLines, sc.Text())
			if len(errLines) == 1 {
				close(waiting)
			}
		}
	})
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "got" {
				got <- time.Now()
			}
		}
	})

	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the waiter never reported waiting")
	}
	// The supervisor's PID only, not its process group.
	if err := syscall.Kill(holder.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = holder.Wait()

	var gotAt time.Time
	select {
	case gotAt = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the lease")
	}
	readers.Wait()
	werr := waiter.Wait()
	took := gotAt.Sub(killed)
	t.Logf("%s: waiter ran its command %s after the holder was killed", store[:strings.Index(store, ":")], took.Round(time.Millisecond))
	if code := exitCode(werr); code != 0 {
		t.Errorf("waiter exit code %d: %v\n%s", code, werr, strings.Join(errLines, "\n"))
	}
	if !strings.Contains(strings.Join(errLines, "\n"), "waiting for "+name+" (held by holder") {
		t.Errorf("waiter stderr does not name the holder:\n%s", strings.Join(errLines, "\n"))
	}
	assertTreeStopped(t, log, "holder", "waiter")
	// etcd keeps a lease for its TTL rounded up to whole seconds (2s here);
	// DynamoDB adds its max clock skew (1s by default); the waiter's poll,
	// its keeper and sh starting, and startScript's own sleep come on top:
	// a bound that catches a waiter left waiting, not a slow machine (it
	// was TTL+2.5 s, which a loaded machine can pass).
	if took > ttl+10*time.Second {
		t.Errorf("waiter took %s after the kill, want at most TTL+10s = %s", took, ttl+10*time.Second)
	}
}

// TestLostLease releases the holder's lease behind its back: its next
// renewal is refused, the child is terminated and leasehold exits 76.
func TestLostLease(t *testing.T) {
	store, path := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var stderr strings.Builder
	holder := leasehold(ctx, "run", "--store", store, "--ttl", "1s", "--grace", "300ms", "lost/x", "--", "sleep", "30")
	holder.Stderr = &stderr
	startGroup(t, holder)
	held := waitHeld(t, store, "lost/x")

	releaseBehind(t, path, "lost/x", held)
	released := time.Now()

	err := holder.Wait()
	t.Logf("leasehold exited %s after the release", time.Since(released).Round(time.Millisecond))
	if code := exitCode(err); code != 76 {
		t.Errorf("exit code %d, want 76; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "leasehold: lease lost/x lost:") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	// leasehold reaps its child before it exits: nothing is left in the
	// process group.
	if err := syscall.Kill(-holder.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("processes left in the holder's group (kill 0: %v): the sleep child survived", err)
	}
}

// TestSignalForwarding sends SIGTERM to leasehold: the child's trap makes
// it exit 42, leasehold exits 42 and releases the lease.
func TestSignalForwarding(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Files, not pipes: the orphaned "sleep 30" must not hold up Wait.
	script := `trap "exit 42" TERM; echo ready > "$1"; sleep 30 & wait`
	cmd := leasehold(ctx, "run", "--store", store, "--ttl", "5s", "e2e/sig", "--", "sh", "-c", script, "sh", ready)
	cmd.Stdout, cmd.Stderr = out, out
	startGroup(t, cmd)

	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := exitCode(err); code != 42 {
		b, _ := os.ReadFile(out.Name())
		t.Errorf("exit code %d, want 42; output:\n%s", code, b)
	}
	if ls := status(t, store, "e2e/sig"); len(ls) != 0 {
		t.Errorf("lease still held after leasehold exited: %+v", ls)
	}
}
