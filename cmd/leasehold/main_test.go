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
	proctest.MarkTrees(t)
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

// leasehold returns a command running the binary, without LEASEHOLD_STORE
// from the environment.
func leasehold(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
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

// mutualExclusion runs 4 × 5 `leasehold run` on one name against store and
// checks from their log that they never overlapped and that tokens grew.
func mutualExclusion(t *testing.T, store string) {
	logPath := filepath.Join(t.TempDir(), "log")
	const workers, rounds = 4, 5
	script := `echo "start $$ $LEASEHOLD_TOKEN" >> "$1"; sleep 0.02; echo "end $$ $LEASEHOLD_TOKEN" >> "$1"`

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				cmd := leasehold(ctx, "run", "--store", store, "--ttl", "5s", "e2e/job", "--", "sh", "-c", script, "sh", logPath)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[w] = append(errs[w], fmt.Sprintf("worker %d round %d: %v\n%s", w, r, err, out))
				}
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		for _, msg := range e {
			t.Error(msg)
		}
	}

	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines)%2 != 0 {
		t.Fatalf("odd number of log lines (%d):\n%s", len(lines), b)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(start) != 3 || start[0] != "start" || len(end) != 3 || end[0] != "end" ||
			start[1] != end[1] || start[2] != end[2] {
			t.Fatalf("overlap or garbled log at line %d: %q then %q\n%s", i+1, lines[i], lines[i+1], b)
		}
		tok, err := strconv.ParseUint(start[2], 10, 64)
		if err != nil {
			t.Fatalf("line %d: bad token: %v", i+1, err)
		}
		if tok <= last {
			t.Errorf("line %d: token %d after %d: not strictly increasing", i+1, tok, last)
		}
		last = tok
	}
	if n := len(lines) / 2; n < workers*rounds {
		t.Errorf("%d rounds, want at least %d", n, workers*rounds)
	}
	t.Logf("%d rounds, tokens up to %d", len(lines)/2, last)
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
	proctest.MarkTrees(t)
	const ttl = 2 * time.Second
	name := fmt.Sprintf("e2e/kill/%d", time.Now().UnixNano())
	log := filepath.Join(t.TempDir(), "log")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	holder := leasehold(ctx, "run", "--store", store, "--ttl", ttl.String(), "--owner", "holder", name, "--", "sh", "-c", treeScript, "sh", log)
	startGroup(t, holder)
	waitTree(t, log, "holder")

	waiter := leasehold(ctx, "run", "--store", store, "--ttl", ttl.String(), "--owner", "waiter", name, "--", "sh", "-c", startScript+"; echo got", "sh", log)
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
	// DynamoDB adds its max clock skew (1s by default).
	if took > ttl+2500*time.Millisecond {
		t.Errorf("waiter took %s after the kill, want at most TTL+2.5s = %s", took, ttl+2500*time.Millisecond)
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
