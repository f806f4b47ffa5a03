//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/proctest"
)

// holdStores returns the stores the hold/release tests run on: a SQLite
// file and a `leasehold serve` over HTTP.
func holdStores(t *testing.T) map[string]string {
	t.Helper()
	sq, _ := newStore(t)
	srv, _ := startServer(t, filepath.Join(t.TempDir(), "data"), proctest.FreeAddr(t))
	return map[string]string{"sqlite": sq, "serve": srv}
}

// holder is a running "leasehold hold --json".
type holder struct {
	cmd   *exec.Cmd
	grant struct {
		Name, Lease, Owner string
		Token              uint64
		TTLMS              int64 `json:"ttl_ms"`
		Deadline           string
	}
	done chan int // the exit code, once it exited
}

// startHold starts "hold --json" with args and waits for its grant line.
func startHold(t *testing.T, store string, args ...string) *holder {
	t.Helper()
	h := &holder{done: make(chan int, 1)}
	h.cmd = leasehold(context.Background(), append([]string{"hold", "--json", "--store", store}, args...)...)
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, h.cmd)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
		h.done <- exitCode(h.cmd.Wait())
	}()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &h.grant); err != nil {
			t.Fatalf("hold --json printed %q: %v", line, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hold printed no grant within 30s")
	}
	return h
}

// wait returns hold's exit code, failing after a generous limit.
func (h *holder) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-h.done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("hold did not exit within 30s")
		return -1
	}
}

// runLH runs the binary to the end and returns its exit code and output.
func runLH(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := leasehold(ctx, args...).CombinedOutput()
	return exitCode(err), string(out)
}

func heldBy(t *testing.T, store, name string) (leaseJSON, bool) {
	t.Helper()
	for _, l := range status(t, store, name) {
		if l.Name == name {
			return l, true
		}
	}
	return leaseJSON{}, false
}

// TestHoldRelease holds a lease with "hold", sees run -n refused (with the
// default and a -E exit code), a release with the wrong token refused with
// nothing changed, then releases it with the right owner and token; the
// holder learns at its next renewal and exits 76.
func TestHoldRelease(t *testing.T) {
	for kind, store := range holdStores(t) {
		t.Run(kind, func(t *testing.T) {
			h := startHold(t, store, "--ttl", "6s", "--owner", "tester/1", "hr/a")
			if h.grant.Name != "hr/a" || h.grant.Owner != "tester/1" || h.grant.Token == 0 || h.grant.TTLMS != 6000 {
				t.Fatalf("grant %+v", h.grant)
			}
			if _, err := time.Parse(time.RFC3339Nano, h.grant.Deadline); err != nil {
				t.Errorf("deadline %q: %v", h.grant.Deadline, err)
			}
			if code, out := runLH(t, "run", "-n", "--verbose", "--store", store, "hr/a", "--", "true"); code != 75 || !strings.Contains(out, "tester/1") {
				t.Errorf("run -n on a held lease: exit %d, want 75\n%s", code, out)
			}
			if code, out := runLH(t, "run", "-n", "-E", "3", "--store", store, "hr/a", "--", "true"); code != 3 {
				t.Errorf("run -n -E 3 on a held lease: exit %d, want 3\n%s", code, out)
			}
			tok := strconv.FormatUint(h.grant.Token, 10)
			wrong := strconv.FormatUint(h.grant.Token+1, 10)
			if code, out := runLH(t, "release", "--store", store, "hr/a", "--owner", "tester/1", "--token", wrong); code != 76 || !strings.Contains(out, "not held") {
				t.Errorf("release with a wrong token: exit %d, want 76\n%s", code, out)
			}
			if l, ok := heldBy(t, store, "hr/a"); !ok || l.Token != h.grant.Token {
				t.Fatalf("after a refused release: held=%v %+v, want still token %d", ok, l, h.grant.Token)
			}
			if code, out := runLH(t, "release", "--store", store, "hr/a", "--owner", "tester/1", "--token", "x1"); code != 64 {
				t.Errorf("release --token x1: exit %d, want 64\n%s", code, out)
			}
			if code, out := runLH(t, "release", "--store", store, "hr/a", "--owner", "tester/1", "--token", tok); code != 0 {
				t.Fatalf("release: exit %d\n%s", code, out)
			}
			if _, ok := heldBy(t, store, "hr/a"); ok {
				t.Error("still held after release")
			}
			if code := h.wait(t); code != 76 {
				t.Errorf("hold after its lease was released: exit %d, want 76", code)
			}
		})
	}
}

// TestHoldInterrupt: SIGTERM and SIGINT make hold release and exit 0.
func TestHoldInterrupt(t *testing.T) {
	store, _ := newStore(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		h := startHold(t, store, "hi/a")
		if err := h.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := h.wait(t); code != 0 {
			t.Errorf("hold after %s: exit %d, want 0", sig, code)
		}
		if _, ok := heldBy(t, store, "hi/a"); ok {
			t.Errorf("still held after hold got %s", sig)
		}
	}
}

// TestHoldWait: a second hold with -w gives up with 75 (or -E's code), and
// -n wins over -w, as in flock.
func TestHoldWait(t *testing.T) {
	store, _ := newStore(t)
	h := startHold(t, store, "hw/a")
	if code, out := runLH(t, "hold", "-w", "200ms", "--store", store, "hw/a"); code != 75 || !strings.Contains(out, "gave up waiting") {
		t.Errorf("hold -w 200ms: exit %d, want 75\n%s", code, out)
	}
	if code, out := runLH(t, "hold", "-w", "200ms", "-E", "9", "--store", store, "hw/a"); code != 9 {
		t.Errorf("hold -w 200ms -E 9: exit %d, want 9\n%s", code, out)
	}
	// -n with -w is one quiet attempt, as flock's (issue 29's red team,
	// #9: it was refused with 64).
	if code, out := runLH(t, "hold", "-n", "-w", "1s", "--store", store, "hw/a"); code != 75 || out != "" {
		t.Errorf("hold -n -w: exit %d, want 75 and nothing said\n%s", code, out)
	}
	if code, out := runLH(t, "hold", "-E", "256", "--store", store, "hw/b"); code != 64 {
		t.Errorf("hold -E 256: exit %d, want 64\n%s", code, out)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t); code != 0 {
		t.Errorf("hold after SIGTERM: exit %d", code)
	}
}

// TestReleaseFromRunEnv: a command started by run releases its own lease
// with "leasehold release NAME" from LEASEHOLD_OWNER and LEASEHOLD_TOKEN.
func TestReleaseFromRunEnv(t *testing.T) {
	store, _ := newStore(t)
	script := `"$1" release --store "$2" "$LEASEHOLD_NAME"; echo "release=$?"`
	code, out := runLH(t, "run", "--store", store, "re/a", "--", "sh", "-c", script, "sh", bin, store)
	if !strings.Contains(out, "release=0") {
		t.Fatalf("release from run's command did not succeed (run exit %d)\n%s", code, out)
	}
	if _, ok := heldBy(t, store, "re/a"); ok {
		t.Error("still held after the command released it")
	}
}

// TestReleaseWrongTokenInRunSaysOnce (issue 29's red team, #13): a
// release inside run's command with another token is refused (76) with
// one "lease not held": it said "lease not held: lease not held: this run
// holds ...".
func TestReleaseWrongTokenInRunSaysOnce(t *testing.T) {
	store, _ := newStore(t)
	script := `LEASEHOLD_TOKEN=999 "$1" release --store "$2" "$LEASEHOLD_NAME"; echo "release=$?"`
	code, out := runLH(t, "run", "--store", store, "re/w", "--", "sh", "-c", script, "sh", bin, store)
	if code != 0 || !strings.Contains(out, "release=76") || !strings.Contains(out, "lease not held: this run holds re/w as ") ||
		strings.Count(out, "not held") != 1 {
		t.Fatalf("run exit %d, want 0, and one refusal naming run's grant:\n%s", code, out)
	}
}

// TestReleaseEarlyInRun (issue 29, item 3): release's first example, a
// command that releases its lease early and goes on, works: run releases
// the lease at the command's request and stops supervising, the command
// runs on past the lease's TTL without it (another run takes the lease
// meanwhile), and run exits with the command's status. Before, the next
// renewal was refused, the command was killed ("after" never printed)
// and run exited 76. A release of another grant from inside the command
// still goes to the store.
func TestReleaseEarlyInRun(t *testing.T) {
	store, _ := newStore(t)
	script := `"$1" release --store "$2" "$LEASEHOLD_NAME" || exit 99
"$1" run -n --store "$2" early/a -- true || exit 98
sleep 5
echo after
exit 7`
	// A TTL of 4 s, the command running 5 s past its release: with 900 ms
	// a renewal late by about 300 ms on a loaded machine ended the lease
	// before the command had asked for the release (the grace window).
	code, out := runLH(t, "run", "--ttl", "4s", "--store", store, "early/a", "--", "sh", "-c", script, "sh", bin, store)
	if code != 7 || !strings.Contains(out, "after") || !strings.Contains(out, "released early/a (owner ") ||
		!strings.Contains(out, "goes on without the lease") {
		t.Fatalf("run exit %d, want 7 with the command's output\n%s", code, out)
	}
	if _, ok := heldBy(t, store, "early/a"); ok {
		t.Error("early/a still held after run ended")
	}
	// A release inside the command of a grant that is not its own goes to
	// the store as before.
	h := startHold(t, store, "--owner", "other/1", "early/b")
	script = `"$1" release --store "$2" --owner other/1 --token "$3" early/b; echo "release=$?"`
	code, out = runLH(t, "run", "--store", store, "early/c", "--", "sh", "-c", script, "sh", bin, store, strconv.FormatUint(h.grant.Token, 10))
	if code != 0 || !strings.Contains(out, "release=0") {
		t.Fatalf("release of another grant inside run: run exit %d\n%s", code, out)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("the hold whose grant was released: exit %d, want 76", code)
	}
}

// TestReleaseWithoutControlInRun (issue 29 red team; documented in run
// --help and the README): a command that releases its own lease with
// LEASEHOLD_CONTROL cleared from its environment releases in the store
// behind run's back; run finds the lease lost at its next renewal, stops
// the command and exits 76.
func TestReleaseWithoutControlInRun(t *testing.T) {
	store, _ := newStore(t)
	script := `env -u LEASEHOLD_CONTROL "$1" release --store "$2" "$LEASEHOLD_NAME" || exit 99
sleep 30
echo after`
	code, out := runLH(t, "run", "--ttl", "900ms", "--store", store, "early/x", "--", "sh", "-c", script, "sh", bin, store)
	if code != 76 || strings.Contains(out, "after") || strings.Contains(out, "goes on without the lease") {
		t.Fatalf("run exit %d, want 76 with the command stopped\n%s", code, out)
	}
}

// TestForceRelease: refused without a terminal and without --yes (nothing
// changed); with --yes the holder loses the lease (hold exits 76); again on
// a free lease: 76, not held.
func TestForceRelease(t *testing.T) {
	for kind, store := range holdStores(t) {
		t.Run(kind, func(t *testing.T) {
			h := startHold(t, store, "--ttl", "6s", "fr/a")
			if code, out := runLH(t, "force-release", "--store", store, "fr/a"); code != 64 || !strings.Contains(out, "--yes") {
				t.Errorf("force-release without a terminal: exit %d, want 64\n%s", code, out)
			}
			if l, ok := heldBy(t, store, "fr/a"); !ok || l.Token != h.grant.Token {
				t.Fatalf("after a refused force-release: held=%v %+v", ok, l)
			}
			if code, out := runLH(t, "force-release", "--yes", "--store", store, "fr/a"); code != 0 || !strings.Contains(out, h.grant.Owner) {
				t.Fatalf("force-release --yes: exit %d\n%s", code, out)
			}
			if _, ok := heldBy(t, store, "fr/a"); ok {
				t.Error("still held after force-release")
			}
			if code := h.wait(t); code != 76 {
				t.Errorf("hold after force-release: exit %d, want 76", code)
			}
			if code, out := runLH(t, "force-release", "--yes", "--store", store, "fr/a"); code != 76 || !strings.Contains(out, "not held") {
				t.Errorf("force-release of a free lease: exit %d, want 76\n%s", code, out)
			}
		})
	}
}

// TestHoldLossOnHungServer (issue 25's review): with the server stopped
// (SIGSTOP), hold reported the loss and exited 76 about 5 s after the
// lease's deadline: it first tried to release the lost lease for up to
// 5 s. A script watching hold's PID believed it held meanwhile. Now the
// release of a lost lease is brief, and hold exits soon after the deadline.
func TestHoldLossOnHungServer(t *testing.T) {
	markTrees(t)
	addr := proctest.FreeAddr(t)
	srv := leasehold(context.Background(), "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--addr", addr, "--resp-addr", "", "--log-level", "warn")
	startGroup(t, srv)
	url := "http://" + addr
	proctest.WaitReady(t, url+"/readyz", 30*time.Second)
	h := startHold(t, url, "--ttl", "1s", "e2e/hold-hung")
	if err := syscall.Kill(-srv.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(-srv.Process.Pid, syscall.SIGCONT) })
	if code := h.wait(t); code != 76 {
		t.Errorf("hold exited %d, want 76 (lost)", code)
	}
	// The deadline is within the TTL of the stop; the kill of a lost
	// lease's release is 300 ms; the rest is slack for a loaded machine.
	if took := time.Since(stopped); took > 4*time.Second {
		t.Errorf("hold exited %s after the server was stopped (TTL 1s): the loss was reported late", took.Round(time.Millisecond))
	}
}
