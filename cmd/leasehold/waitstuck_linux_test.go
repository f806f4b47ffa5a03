//go:build linux

package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// ranMarker is what the commands of the tests below print if they run.
const ranMarker = "COMMAND-RAN"

// started is a leasehold command started in a process group of its own.
type started struct {
	stderr *proctest.Buffer // stdout and stderr
	done   chan int         // its exit code
	at     time.Time
	pid    int
}

// startLH starts the binary with args (killed, with its group, when the
// test ends).
func startLH(t *testing.T, args ...string) *started {
	t.Helper()
	s := &started{stderr: &proctest.Buffer{}, done: make(chan int, 1)}
	cmd := leasehold(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	s.at = time.Now()
	startGroup(t, cmd)
	s.pid = cmd.Process.Pid
	go func() { s.done <- exitCode(cmd.Wait()) }()
	return s
}

// waitFor waits until stderr says what (failing after 30 s, or if it
// exits first).
func (s *started) waitFor(t *testing.T, what string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !strings.Contains(s.stderr.String(), what); time.Sleep(10 * time.Millisecond) {
		select {
		case code := <-s.done:
			t.Fatalf("exited %d before saying %q: %s", code, what, s.stderr.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("did not say %q within 30 s: %s", what, s.stderr.String())
		}
	}
}

// exit returns the exit code and how long after from it came, failing if
// none came within limit of from.
func (s *started) exit(t *testing.T, from time.Time, limit time.Duration) (int, time.Duration) {
	t.Helper()
	select {
	case code := <-s.done:
		return code, time.Since(from)
	case <-time.After(time.Until(from.Add(limit))):
		t.Fatalf("still running %s after it should have ended: %s", limit, s.stderr.String())
		return -1, 0
	}
}

// waitVariants are the three ways of waiting that the tests below check:
// run -w SECONDS, run --wait DURATION and hold -w SECONDS, for the lease
// name+suffix, waiting secs seconds.
func waitVariants(store, name string, secs int, extra ...string) map[string][]string {
	n := strconv.Itoa(secs)
	common := append([]string{"--store", store}, extra...)
	return map[string][]string{
		"run -w":     append(append([]string{"run"}, common...), "-w", n, name+"-w", "--", "echo", ranMarker),
		"run --wait": append(append([]string{"run"}, common...), "--wait", n+"s", name+"-wait", "--", "echo", ranMarker),
		"hold -w":    append(append([]string{"hold"}, common...), "-w", n, name+"-hold"),
	}
}

// TestWaitUnreplicatedRetries (issue 31 red team, item 2): with
// wait_replicas=1 and the replica not acknowledging (stopped after Open
// saw it), a free lease's grant is released by the store
// (UnreplicatedError); run -w, run --wait and hold -w exited 70 within a
// second instead of trying again until the wait ends. They retry, and
// exit 75 at its end naming the replicas that acknowledged.
func TestWaitUnreplicatedRetries(t *testing.T) {
	primary := enginetest.StartRedis(t)
	replica := enginetest.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	u := primary.RedisURL() + "?holdback=0s&wait_replicas=1&wait_timeout=100ms"
	// Until the replica is in sync, Open refuses wait_replicas=1 or WAIT
	// falls short.
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, out := runLH(t, "run", "--store", u, "-n", "warm", "--", "true")
		if code == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("run with a replica in sync: exit %d: %s", code, out)
		}
	}
	replica.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { replica.Signal(syscall.SIGCONT) })

	const wait = 3
	for what, args := range waitVariants(u, "unrepl", wait) {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			s := startLH(t, args...)
			code, took := s.exit(t, s.at, 60*time.Second)
			msg := s.stderr.String()
			if code != 75 {
				t.Errorf("%s %d: exit %d after %s, want 75 at the end of the wait: %s", what, wait, code, took.Round(time.Millisecond), msg)
			}
			if took < wait*time.Second {
				t.Errorf("%s %d: ended after %s, before its wait", what, wait, took.Round(time.Millisecond))
			}
			if !strings.Contains(msg, "acknowledged by 0 of the 1 replicas") {
				t.Errorf("%s: stderr %q: want how many replicas acknowledged", what, msg)
			}
		})
	}
}

// TestWaitSyncStandbyDown (issue 31 red team, item 4): on a PostgreSQL
// primary whose synchronous standby is down, run -w 3, run --wait 3s and
// hold -w 3 took --connect-timeout (here 30 s) + 5 s and exited 70. The
// first attempt is bounded by the wait too: they exit 75 about 3 s in,
// saying the store did not answer within the wait and why it may not.
func TestWaitSyncStandbyDown(t *testing.T) {
	u := syncStandbyDown(t)

	const wait = 3
	for what, args := range waitVariants(u, "syncwait", wait, "--connect-timeout", "30s", "--ttl", "3s") {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			s := startLH(t, args...)
			// 30 s (the connect timeout) is far from wait + 10 s.
			code, took := s.exit(t, s.at, 60*time.Second)
			msg := s.stderr.String()
			if code != 75 || took > (wait+10)*time.Second {
				t.Errorf("%s %d: exit %d after %s, want 75 within %ds: %s", what, wait, code, took.Round(time.Millisecond), wait+10, msg)
			}
			if !strings.Contains(msg, "did not answer within the wait") || !strings.Contains(msg, "synchronous_standby_names") {
				t.Errorf("%s: stderr %q: want the unanswered wait and synchronous replication named", what, msg)
			}
			if strings.Contains(msg, ranMarker) {
				t.Errorf("the command ran")
			}
		})
	}
}

// TestWaitStoreStopped (issue 31 red team, item 3): `run --wait 3s`
// waiting behind a holder when the store is stopped (SIGSTOP) returned
// after 18 s on PostgreSQL and 12 s on Redis, and SIGTERM meanwhile was
// ignored on PostgreSQL. The wait ends within its bound after D
// (documented: 2 s; checked here with 5 s), and SIGTERM ends it at once
// (143) however the store call is stuck.
func TestWaitStoreStopped(t *testing.T) {
	for _, engine := range []string{"postgres", "redis"} {
		t.Run(engine, func(t *testing.T) {
			var srv *enginetest.Server
			var u string
			if engine == "postgres" {
				srv = enginetest.StartPostgres(t)
				u = srv.PostgresURL()
			} else {
				srv = enginetest.StartRedis(t)
				u = srv.RedisURL() + "?holdback=0s"
			}
			// The holder, and the tables, made while the store answers.
			holder := startLH(t, "hold", "--store", u, "--ttl", "60s", "stopped")
			holder.waitFor(t, "holding")
			waiter := startLH(t, "run", "--verbose", "--store", u, "--wait", "3s", "stopped", "--", "echo", ranMarker)
			term := startLH(t, "run", "--verbose", "--store", u, "--wait", "10m", "stopped", "--", "echo", ranMarker)
			waiter.waitFor(t, "waiting for")
			term.waitFor(t, "waiting for")
			srv.Signal(syscall.SIGSTOP)
			stopped := time.Now()
			t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })

			code, took := waiter.exit(t, waiter.at, 3*time.Second+5*time.Second)
			if code != 75 {
				t.Errorf("run --wait 3s with the store stopped: exit %d after %s, want 75: %s", code, took.Round(time.Millisecond), waiter.stderr.String())
			}
			time.Sleep(time.Until(stopped.Add(time.Second)))
			_ = syscall.Kill(term.pid, syscall.SIGTERM)
			sent := time.Now()
			if code, took := term.exit(t, sent, 5*time.Second); code != 128+int(syscall.SIGTERM) {
				t.Errorf("SIGTERM to run --wait 10m with the store stopped: exit %d after %s, want 143: %s", code, took.Round(time.Millisecond), term.stderr.String())
			}
			for _, s := range []*started{waiter, term} {
				if strings.Contains(s.stderr.String(), ranMarker) {
					t.Errorf("a command ran")
				}
			}
		})
	}
}
