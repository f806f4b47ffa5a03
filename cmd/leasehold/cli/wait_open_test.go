//go:build unix

package cli

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/silent"
)

// withQuery appends the query parameter kv to the store URL u.
func withQuery(u, kv string) string {
	if strings.Contains(u, "?") {
		return u + "&" + kv
	}
	return u + "?" + kv
}

// checkWaitBoundsOpen runs args (a run or hold with --wait 2s on a store
// that does not answer, whose connect_timeout= is 60s) and checks that
// the wait ended it: exit 75 within a generous D + 5s, saying the store
// did not answer within the wait.
func checkWaitBoundsOpen(t *testing.T, args ...string) {
	t.Helper()
	code, took, stderr := timedRun(t, args...)
	if code != ExitNotAcquired {
		t.Errorf("%q: exit %d, want %d; stderr %q", args, code, ExitNotAcquired, stderr)
	}
	if took > 7*time.Second {
		t.Errorf("%q: ended after %s, want within --wait 2s + 5s (the connect timeout is 60s)", args, took)
	}
	if msg := stderr.String(); !strings.Contains(msg, "did not answer within the wait") || strings.Contains(msg, "sekrit-pass-1") ||
		strings.Contains(msg, "1m0s") {
		t.Errorf("%q: stderr %q; want a wait that ran out with the store not answering (no secrets, no connect timeout)", args, msg)
	}
}

// TestWaitBoundsOpen (issue 31 red team, #8): --wait D bounds opening the
// store too, for every networked store: a server that accepts and never
// answers, with connect_timeout=60s, ends run and hold --wait 2s with exit
// 75 (the wait ran out, the store not answering), not exit 70 after the
// connect timeout.
func TestWaitBoundsOpen(t *testing.T) {
	srv := silent.Listen(t)
	urls := silentStores(srv.Addr())
	urls["etcd"] = "etcd://" + srv.Addr()
	for scheme, url := range urls {
		url := withQuery(url, "connect_timeout=60s")
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			checkWaitBoundsOpen(t, "run", "--wait", "2s", "--store", url, "job", "--", "true")
			checkWaitBoundsOpen(t, "hold", "-w", "2", "--store", url, "job")
		})
	}
}

// TestWaitBoundsOpenStoppedRedis (issue 31 red team, #8, as reported): a
// Redis stopped with SIGSTOP before "run --wait 2s" ends it with 75 within
// the wait and its grace, not after the connect timeout.
func TestWaitBoundsOpenStoppedRedis(t *testing.T) {
	srv := enginetest.StartRedis(t)
	srv.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })
	checkWaitBoundsOpen(t, "run", "--wait", "2s", "--store", withQuery(srv.RedisURL(), "connect_timeout=60s"), "job", "--", "true")
}

// TestTinyWaitTriesOnce (issue 31 red team, #10): a wait shorter than a
// round trip (-w 1ns, -w 1us) still makes one attempt, as -n does: on a
// free lease the command runs (it exited 75, "the store did not answer
// within the wait"); on a held one it gives up naming the holder. On
// SQLite and on a networked store (Redis).
func TestTinyWaitTriesOnce(t *testing.T) {
	h := newHarness(t)
	name := fmt.Sprintf("tiny/%d", time.Now().UnixNano())
	for store, url := range map[string]string{"sqlite": h.url, "redis": enginetest.RedisURL(t)} {
		for _, w := range []string{"1ns", "1us"} {
			if r := h.run("run", "-w", w, "--store", url, name, "--", "true"); r.code != ExitOK {
				t.Errorf("%s: run -w %s on a free lease: exit %d, stderr %q; want 0", store, w, r.code, r.stderr)
			}
		}
		l := holdIn(t, url, name, "tiny-holder")
		r := h.run("run", "-w", "1ns", "--store", url, name, "--", "true")
		if r.code != ExitNotAcquired || !strings.Contains(r.stderr, "held by tiny-holder") {
			t.Errorf("%s: run -w 1ns on a held lease: exit %d, stderr %q; want %d naming the holder", store, r.code, r.stderr, ExitNotAcquired)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// holdIn takes name in the store at url for owner (TTL one minute) and
// releases it when the test ends, if not before.
func holdIn(t *testing.T, url, name, owner string) *leasehold.Lease {
	t.Helper()
	s, err := stores.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := leasehold.New(s, leasehold.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), name, leasehold.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}
