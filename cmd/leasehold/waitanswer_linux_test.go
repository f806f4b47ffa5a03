package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	lh "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// startServeProcess runs "leasehold serve" as a process of its own (so that it
// can be stopped with SIGSTOP) on free ports, and returns it with its
// HTTP base URL and RESP address.
func startServeProcess(t *testing.T) (cmd *exec.Cmd, base, resp string) {
	t.Helper()
	out := &proctest.Buffer{}
	cmd = leasehold(context.Background(), "serve", "--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = out, out
	startGroup(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	httpRE, respRE := regexp.MustCompile(`HTTP API on (http://[^/\s]+)/v1/`), regexp.MustCompile(`RESP on (\S+)`)
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h, r := httpRE.FindStringSubmatch(out.String()), respRE.FindStringSubmatch(out.String())
		if h != nil && r != nil {
			return cmd, h[1], r[1]
		}
		if time.Now().After(end) {
			t.Fatalf("serve did not say where it listens within 60 s:\n%s", out.String())
		}
	}
}

// waitOrder waits (generously, 120 s) until s's output has every one of
// says, in that order, and fails if it exits first.
func (s *started) waitOrder(t *testing.T, says ...string) {
	t.Helper()
	for end := time.Now().Add(120 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, at := s.stderr.String(), 0
		for _, w := range says {
			i := strings.Index(out[at:], w)
			if i < 0 {
				at = -1
				break
			}
			at += i + len(w)
		}
		if at >= 0 {
			return
		}
		select {
		case code := <-s.done:
			t.Fatalf("exited %d before saying %q in that order:\n%s", code, says, s.stderr.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("did not say %q in that order within 120 s:\n%s", says, out)
		}
	}
}

// TestWaitSaysServerHung (issue 29's red team, #3 and #4): a waiter on a
// lease server that is stopped (SIGSTOP: its connections open, nothing
// answered) says that the store does not answer, once its long-poll is
// well past the wait it asked for (+ 5 s), and that it answers again once
// the server is continued, before the command runs. It said nothing at
// all: "waiting for wd/1" and then the command's output. The polls here
// are 1 s long (wait_chunk=) and the client's own timeout 10 minutes, so
// that only the overdue poll can tell.
func TestWaitSaysServerHung(t *testing.T) {
	srv, base, resp := startServeProcess(t)
	hs, err := remote.OpenHTTP(base)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	c, err := lh.New(hs, lh.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.TryAcquire(context.Background(), "wd/1", lh.TTL(10*time.Minute), lh.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	waiter := startLH(t, "run", "--verbose", "--store", "leasehold://"+resp+"?wait_chunk=1s&timeout=10m", "-w", "600", "wd/1", "--", "echo", ranMarker)
	waiter.waitFor(t, "waiting for wd/1 (held by holder")
	if err := srv.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The unanswered request is the wait's 1 s poll or, when the server
	// was stopped before that was sent, the try a wait starts with ("a
	// request"): CI run 65, on a loaded machine, was the second.
	waiter.waitOrder(t, "waiting for wd/1: the store does not answer (since ", "no answer to a ", " asked at ", "); still trying\n")
	if said := waiter.stderr.String(); !strings.Contains(said, "no answer to a wait of 1s asked at ") && !strings.Contains(said, "no answer to a request asked at ") {
		t.Fatalf("the outage names neither the 1 s wait nor the try:\n%s", said)
	}
	if err := srv.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waiter.waitOrder(t, "the store does not answer", "leasehold: waiting for wd/1: the store answers again\n")
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := waiter.exit(t, time.Now(), 60*time.Second); code != 0 {
		t.Fatalf("the waiter exited %d:\n%s", code, waiter.stderr.String())
	}
	// Not counted: a loaded machine may delay an answer past the grace
	// before the stop too; each outage is said once and ended once.
	waiter.waitOrder(t, "does not answer", "answers again", ranMarker)
}

// TestWaitSaysRedisAnswersAgain (issue 29's red team, #4): a waiter whose
// Redis was stopped said that it does not answer, but never that it
// answered again: the next line was the command's output. The answer
// after the outage is the grant itself here (the holder's release while
// the waiter's retried wait blocks), and "answers again" comes before the
// command runs.
func TestWaitSaysRedisAnswersAgain(t *testing.T) {
	srv := enginetest.StartRedis(t)
	u := srv.RedisURL() + "?holdback=0s"
	holder := startLH(t, "hold", "--store", u, "--ttl", "10m", "ra")
	holder.waitFor(t, "holding")
	waiter := startLH(t, "run", "--verbose", "--store", u, "-w", "600", "ra", "--", "echo", ranMarker)
	waiter.waitFor(t, "waiting for ra (held by")
	srv.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })
	waiter.waitOrder(t, "waiting for ra: the store does not answer (since ")
	srv.Signal(syscall.SIGCONT)
	if err := syscall.Kill(holder.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _ := waiter.exit(t, time.Now(), 120*time.Second); code != 0 {
		t.Fatalf("the waiter exited %d:\n%s", code, waiter.stderr.String())
	}
	waiter.waitOrder(t, "does not answer", "leasehold: waiting for ra: the store answers again\n", ranMarker)
}
