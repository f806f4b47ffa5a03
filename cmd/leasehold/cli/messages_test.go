package cli

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/stores"
)

// flakyStore is a store whose engine can be made to stop answering.
type flakyStore struct {
	leasehold.Store
	down atomic.Bool
}

var errDown = errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")

func (f *flakyStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if f.down.Load() {
		return leasehold.Record{}, errDown
	}
	return f.Store.TryAcquire(ctx, req)
}

// TestWaitSaysStoreDown (issue 29, item 7): a waiter whose store stops
// answering says so, once, and that it keeps trying (it was silent: 45 s
// without a word while a server was down), then that the store answers
// again; the wait goes on and the lease is taken once free.
func TestWaitSaysStoreDown(t *testing.T) {
	h := newHarness(t)
	holder := h.hold("a", "other")
	flaky := &flakyStore{}
	h.open = func(ctx context.Context, url string) (leasehold.Store, error) {
		s, err := stores.Open(ctx, url)
		flaky.Store = s
		return flaky, err
	}
	stderr, done := h.start("run", "--verbose", "--store", h.url, "-w", "50", "a", "--", "echo", "ran")
	waitFor(t, stderr, "waiting for a (held by other")
	flaky.down.Store(true)
	waitFor(t, stderr, "leasehold: waiting for a: the store does not answer (since ")
	waitFor(t, stderr, "connection refused); still trying\n")
	flaky.down.Store(false)
	waitFor(t, stderr, "leasehold: waiting for a: the store answers again\n")
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := h.await(done, "run", "-w", "50", "a")
	if r.code != 0 || r.stdout != "ran\n" || strings.Count(r.stderr, "does not answer") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want the command run and one line about the outage", r.code, r.stdout, r.stderr)
	}
}

// waitFor waits (generously) until the command's stderr contains want.
func waitFor(t *testing.T, stderr interface{ String() string }, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr never said %q:\n%s", want, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatusEscapes (issue 29, item 7): status shows names and owners as
// the dashboard does, so a U+202E in a name cannot reverse its row and an
// escape sequence in an owner reaches no terminal; --json keeps them raw.
func TestStatusEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"jobs/a":          "jobs/a",
		"a\u202eb":        `a\u202Eb`,
		"caf\u00e9":       `caf\xE9`,
		"o\x1b[31m":       `o\x1B[31m`,
		`back\slash`:      `back\\slash`,
		"two words":       "two words",
		" lead":           `\x20lead`,
		"a  b":            `a\x20\x20b`,
		"tag\U000e0041":   `tag\u{E0041}`,
		"new\nline\ttab":  `new\nline\ttab`,
		"\u0430dmin":      `\u0430dmin`,
		"e\u0301":         `e\u0301`,
		"zero\u200bwidth": `zero\u200Bwidth`,
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %s, want %s", in, got, want)
		}
	}
	h := newHarness(t)
	h.hold("x/a\u202eb", "own\u202eer")
	r := h.run("status", "--store", h.url)
	if r.code != 0 || !strings.Contains(r.stdout, `x/a\u202Eb`) || !strings.Contains(r.stdout, `own\u202Eer`) || strings.ContainsRune(r.stdout, '\u202e') {
		t.Errorf("status: exit %d, stdout %q", r.code, r.stdout)
	}
	r = h.run("status", "--json", "--store", h.url)
	if r.code != 0 || !strings.Contains(r.stdout, "x/a\u202eb") {
		t.Errorf("status --json: exit %d, stdout %q; want the name as it is", r.code, r.stdout)
	}
}

// TestDurationsRounded (issue 29, item 7): durations print rounded to a
// sensible unit (16.666666ms, 651.666667ms before).
func TestDurationsRounded(t *testing.T) {
	for in, want := range map[time.Duration]string{
		50 * time.Millisecond / 3:             "17ms",
		651666667 * time.Nanosecond:           "652ms",
		1500 * time.Millisecond:               "1.5s",
		5*time.Second + 123*time.Millisecond:  "5.1s",
		90*time.Second + 400*time.Millisecond: "1m30s",
	} {
		if got := shortDuration(in).String(); got != want {
			t.Errorf("shortDuration(%v) = %s, want %s", in, got, want)
		}
	}
	h := newHarness(t)
	r := h.run("run", "--store", h.url, "--ttl", "1s", "--grace", "900ms", "a", "--", "true")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "(652ms)") {
		t.Errorf("grace too long: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestHoldbackExplained (issue 29, item 7): a Redis store holding back
// grants after a restart is explained in words, not shown as a holder
// named "(redis restarted: holding back)" with token 0.
func TestHoldbackExplained(t *testing.T) {
	h := &leasehold.HeldError{Name: "job", Owner: redis.HoldbackOwner, Remaining: 21 * time.Second}
	for _, line := range []string{statusLine("job", h, time.Second), heldMessage("job", h)} {
		if strings.Contains(line, redis.HoldbackOwner) || strings.Contains(line, "token 0") ||
			!strings.Contains(line, "Redis restarted recently, and no lease is granted for 2") ||
			!strings.Contains(line, "may have been lost by Redis while its holder still runs") {
			t.Errorf("hold-back line %q", line)
		}
	}
	// After a promotion (issue 31 red team, Sentinel item 5) it says the
	// primary changed, not that Redis restarted.
	f := &leasehold.HeldError{Name: "job", Owner: redis.FailoverHoldbackOwner, Remaining: 21 * time.Second}
	for _, line := range []string{statusLine("job", f, time.Second), heldMessage("job", f)} {
		if strings.Contains(line, redis.FailoverHoldbackOwner) || strings.Contains(line, "restarted") ||
			!strings.Contains(line, "Redis primary changed (failover) recently, and no lease is granted for 2") {
			t.Errorf("failover hold-back line %q", line)
		}
	}
	// A replication change on a server that never restarted (issue 31,
	// #11) and a durable server without the store's marker (item 2) say
	// what was seen, not that Redis restarted.
	for owner, want := range map[string]string{
		redis.ReplicationHoldbackOwner: "Redis's replication changed (a new replication id: a replica attached or was detached) recently, and no lease is granted for 2",
		redis.LostHoldbackOwner:        "Redis came up without the store's marker (a first use, or its data set was lost) recently, and no lease is granted for 2",
	} {
		r := &leasehold.HeldError{Name: "job", Owner: owner, Remaining: 21 * time.Second}
		for _, line := range []string{statusLine("job", r, time.Second), heldMessage("job", r)} {
			if strings.Contains(line, owner) || strings.Contains(line, "restarted") || !strings.Contains(line, want) {
				t.Errorf("hold-back line %q; want %q", line, want)
			}
		}
	}
	// PostgreSQL's hold-back after a promotion (red team of issue 31,
	// item 10) was shown as a holder "(postgres timeline changed:
	// holding back)" with token 0, without a word of why.
	p := &leasehold.HeldError{Name: "job", Owner: postgres.HoldbackOwner, Remaining: 21 * time.Second}
	for _, line := range []string{statusLine("job", p, time.Second), heldMessage("job", p)} {
		if strings.Contains(line, postgres.HoldbackOwner) || strings.Contains(line, "token 0") || strings.Contains(line, "Redis") ||
			!strings.Contains(line, "PostgreSQL's timeline changed (a replica was promoted) recently, and no lease is granted for 2") ||
			!strings.Contains(line, "(the URL's holdback= sets how long)") {
			t.Errorf("PostgreSQL hold-back line %q", line)
		}
	}
	if line := statusLine("job", &leasehold.HeldError{Owner: "alice", Token: 3, Remaining: time.Minute}, 0); !strings.Contains(line, "held by alice, token 3") {
		t.Errorf("a holder's line: %q", line)
	}
}

// TestNoAnswerMessage: an unanswered long-poll says the wait it asked
// for; an unanswered try (wait 0, the first request of a Client's wait)
// says it was a request, not "a wait of 0s".
func TestNoAnswerMessage(t *testing.T) {
	at := time.Date(2026, 12, 5, 6, 30, 0, 0, time.Local)
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{
		{time.Second, "no answer to a wait of 1s asked at 06:30:00"},
		{0, "no answer to a request asked at 06:30:00"},
	} {
		if got := (&noAnswerError{wait: tc.wait, sent: at}).Error(); got != tc.want {
			t.Errorf("wait %s: %q; want %q", tc.wait, got, tc.want)
		}
	}
}
