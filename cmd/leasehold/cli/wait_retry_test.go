//go:build unix

package cli

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
	"github.com/leasehold/leasehold/testrig/silent"
)

// TestOpenEndsOnEveryHandledSignal (red team, rtfixb #1): while the store
// is being opened, every signal that run, elect and hold handle ends the
// command as it ends a wait, with 128+N: SIGHUP and SIGUSR1 were queued
// for later and the command went on until the connect timeout (exit 70).
// SIGTERM is the control. The store accepts and never answers.
func TestOpenEndsOnEveryHandledSignal(t *testing.T) {
	srv := silent.Listen(t)
	url := silentStores(srv.Addr())["redis"]
	for _, tc := range []struct {
		cmd  string
		args []string
		sigs []syscall.Signal
	}{
		{"run", []string{"--connect-timeout", "10m", "run", "-w", "20", "--store", url, "sg", "--", "true"},
			[]syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT, syscall.SIGTERM}},
		{"elect", []string{"--connect-timeout", "10m", "elect", "--store", url, "sg", "--", "true"},
			[]syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGTERM}},
		{"hold", []string{"--connect-timeout", "10m", "hold", "-w", "20", "--store", url, "sg"},
			[]syscall.Signal{syscall.SIGHUP, syscall.SIGTERM}},
		{"run-unbounded", []string{"--connect-timeout", "10m", "run", "--store", url, "sg", "--", "true"},
			[]syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1}},
	} {
		for _, sig := range tc.sigs {
			t.Run(fmt.Sprintf("%s/%s", tc.cmd, sig), func(t *testing.T) {
				before := srv.Accepted()
				cmd, stderr := leaseholdProcess(t, tc.args...)
				srv.WaitAccepted(t, before)
				sent := time.Now()
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				code := exitCode(t, cmd)
				if want := 128 + int(sig); code != want {
					t.Errorf("exit %d, want %d; stderr %q", code, want, stderr)
				}
				if took := time.Since(sent); took > 15*time.Second {
					t.Errorf("ended %s after the signal; want within 2s (generously, 15s)", took)
				}
				if msg := stderr.String(); !strings.Contains(msg, "while opening") || strings.Contains(msg, "sekrit-pass-1") {
					t.Errorf("stderr %q: want a line saying the signal came while opening the store, without secrets", msg)
				}
			})
		}
	}
}

// timedRun runs leasehold with args and returns its exit code, how long
// it took and its stderr.
func timedRun(t *testing.T, args ...string) (int, time.Duration, *proctest.Buffer) {
	t.Helper()
	start := time.Now()
	cmd, stderr := leaseholdProcess(t, args...)
	code := exitCode(t, cmd)
	return code, time.Since(start), stderr
}

// checkWaitsOut runs args (with --wait of d) and checks that it exits with
// want no earlier than d after it started (and not past a generous d+10s),
// its stderr containing each of says.
func checkWaitsOut(t *testing.T, d time.Duration, want int, says []string, args ...string) {
	t.Helper()
	code, took, stderr := timedRun(t, args...)
	if code != want {
		t.Errorf("%q: exit %d, want %d; stderr %q", args, code, want, stderr)
	}
	if took < d {
		t.Errorf("%q: ended after %s, before its wait of %s ran out; stderr %q", args, took, d, stderr)
	}
	if took > d+10*time.Second {
		t.Errorf("%q: ended after %s, want about its wait of %s", args, took, d)
	}
	for _, s := range says {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("%q: stderr %q, want it to say %q", args, stderr, s)
		}
	}
}

// TestWaitRetriesRefusingStore (red team, rtfixb #2a): with --wait D a
// store that refuses connections is tried again until D runs out, then
// exit 75 naming the last error; it ended the wait at once with 70
// (PostgreSQL after 0.06s, Redis after 3.4s).
func TestWaitRetriesRefusingStore(t *testing.T) {
	port := enginetest.FreePort(t)
	// Redis takes about 3.4s to say that it was refused: its wait is
	// longer, so that one attempt ends before the wait does.
	for _, tc := range []struct {
		scheme, url string
		wait        int
	}{
		{"redis", fmt.Sprintf("redis://127.0.0.1:%d/0", port), 6},
		{"postgres", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), 3},
		// Issue 29's red team, #2: the HTTP store connects at its first
		// request, whose refusal ended the wait at once with 70.
		{"http", fmt.Sprintf("http://127.0.0.1:%d", port), 3},
		{"leasehold", fmt.Sprintf("leasehold://127.0.0.1:%d", port), 3},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			says := []string{"within the wait", "refused"}
			d, w := time.Duration(tc.wait)*time.Second, fmt.Sprint(tc.wait)
			checkWaitsOut(t, d, ExitNotAcquired, says, "run", "-w", w, "--store", tc.url, "w1", "--", "true")
			checkWaitsOut(t, d, ExitNotAcquired, says, "hold", "-w", w, "--store", tc.url, "w1")
		})
	}
}

// TestWaitOutlastsStoppedStore (red team, rtfixb #2b): a wait longer than
// --connect-timeout on a stopped Redis ends when the wait runs out (75),
// not at the connect timeout (70).
func TestWaitOutlastsStoppedStore(t *testing.T) {
	srv := enginetest.StartRedis(t)
	srv.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })
	checkWaitsOut(t, 5*time.Second, ExitNotAcquired, []string{"within the wait"},
		"--connect-timeout", "1s", "run", "-w", "5", "--store", srv.RedisURL(), "w1", "--", "true")
}

// TestWaitForStoreToStart (red team, rtfixb #2): a Redis that starts on
// its port a second into a wait of 20s is found: the command runs (the
// hold-back after a Redis restart is off, or it would outlast the wait).
func TestWaitForStoreToStart(t *testing.T) {
	srv := enginetest.StartRedis(t)
	srv.Kill()
	cmd, stderr := leaseholdProcess(t, "run", "-w", "20", "--store", withQuery(srv.RedisURL(), "holdback=0s"), "w1", "--", "true")
	time.Sleep(time.Second)
	srv.Start()
	t.Cleanup(srv.Kill)
	if code := exitCode(t, cmd); code != ExitOK {
		t.Errorf("exit %d, want 0 (the store started during the wait); stderr %q", code, stderr)
	}
}

// TestWaitBadStoreURLAtOnce: a usage error in the store URL is not tried
// again during a wait: exit 64 at once.
func TestWaitBadStoreURLAtOnce(t *testing.T) {
	for _, url := range []string{"nosuchscheme://x/y", "redis://127.0.0.1:6379/0?nosuchparam=1"} {
		start := time.Now()
		cmd, stderr := leaseholdProcess(t, "run", "-w", "20", "--store", url, "w1", "--", "true")
		if code := exitCode(t, cmd); code != ExitUsage {
			t.Errorf("%s: exit %d, want %d; stderr %q", url, code, ExitUsage, stderr)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: ended after %s, want at once (not after the wait of 20s)", url, took)
		}
	}
}

// TestWaitSentinelMinorityAnswers (red team, rtfixb #3): with 2 of 3
// sentinels stopped, run -w 2 exits 75 every time (it was 70 or 75).
func TestWaitSentinelMinorityAnswers(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	for _, s := range d.Sentinels[1:] {
		s.Signal(syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, s := range d.Sentinels[1:] {
			s.Signal(syscall.SIGCONT)
		}
	})
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkWaitsOut(t, 2*time.Second, ExitNotAcquired, []string{"within the wait"},
				"run", "-w", "2", "--store", d.URL(""), "a1", "--", "true")
		})
	}
}

// TestUnboundedWaitRetriesRefusedServer (issue 29's red team, #2): run
// without --wait (wait as long as it takes) on a lease server that
// refuses connections keeps trying to open it, saying so once, and takes
// the lease once a server listens there: it exited 70 at once. It says
// that the store answers again before the command runs.
func TestUnboundedWaitRetriesRefusedServer(t *testing.T) {
	catchSIGTERM(t)
	port := enginetest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd, stderr := leaseholdProcess(t, "run", "--store", "http://"+addr, "nw", "--", "true")
	for end := time.Now().Add(60 * time.Second); !strings.Contains(stderr.String(), "; still trying\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) || cmd.ProcessState != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("run did not say it keeps trying within 60 s: %q", stderr)
		}
	}
	srv := startServing(t, "--addr", addr, "--resp-addr", "", "--data-dir", t.TempDir(), "--log-level", "warn")
	defer srv.stop(t)
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, want 0: %q", code, stderr)
	}
	msg := stderr.String()
	opened := strings.Index(msg, "leasehold: waiting for nw: the store answers again\n")
	if !strings.HasPrefix(msg, "leasehold: waiting for nw: the store cannot be opened (since ") || !strings.Contains(msg, "connection refused") ||
		strings.Count(msg, "cannot be opened") != 1 || opened < 0 {
		t.Errorf("stderr %q: want one line saying the store cannot be opened (connection refused), then that it answers again", msg)
	}
}
