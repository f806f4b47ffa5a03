//go:build linux

package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestGiveUpHoldbackTimeLeft (issue 31 red team, #9): a `run -w` that
// runs out during PostgreSQL's hold-back after a promotion named the
// hold-back's time left at its first refusal (the whole hold-back) rather
// than at the give-up. The promotion is the epoch row of another timeline
// written by hand (as TestGiveUpNamesLatestHolder); the hold-back is 60 s
// and the wait 8 s, so the give-up must name at most 56 s (it named 60 s).
// Only the upper bound is checked: a slower machine names less.
func TestGiveUpHoldbackTimeLeft(t *testing.T) {
	base := enginetest.PostgresURL(t)
	table := "lh_test_hbleft_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		pgExec(t, base, "DROP TABLE IF EXISTS "+table+", "+table+"_queue, "+table+"_records",
			"DROP FUNCTION IF EXISTS "+table+"_wait, "+table+"_release, "+table+"_txn")
	})
	u := base + "&table=" + table + "&holdback=60s"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := leasehold(ctx, "run", "--store", u, "-n", "warm", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	pgExec(t, base, `INSERT INTO `+table+` (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at)
		VALUES (E'\x01timeline', '', '99', 7, '', 1, now(), false, now())`)

	var stderr bytes.Buffer
	w := leasehold(ctx, "run", "--store", u, "-w", "8", "hb1", "--", "true")
	w.Stderr = &stderr
	err := w.Run()
	if code := exitCode(err); code != 75 {
		t.Fatalf("run -w 8 during the hold-back: exit %d, want 75\n%s", code, stderr.String())
	}
	m := regexp.MustCompile(`gave up waiting for hb1 after 8s: PostgreSQL's timeline changed .* no lease is granted for (\S+) more`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("give-up message %q: want the hold-back and its time left", stderr.String())
	}
	left, perr := time.ParseDuration(m[1])
	if perr != nil || left > 56*time.Second {
		t.Errorf("give-up names %q left of the 60s hold-back after an 8s wait; want the time left then, at most 56s", m[1])
	}
}
