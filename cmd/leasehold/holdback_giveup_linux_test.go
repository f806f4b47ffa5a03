//go:build linux

package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"
)

// TestGiveUpHoldbackTimeLeft (issue 31 red team, #9): a `run -w` that
// runs out during PostgreSQL's hold-back after a promotion named the
// hold-back's time left at its first refusal (the whole hold-back) rather
// than at the give-up. The promotion is the epoch row of another timeline
// written by hand (as TestGiveUpNamesLatestHolder); the hold-back is 60 s
// and the wait 8 s, so the give-up must name at most 56 s (it named 60 s).
// Only the upper bound is checked: a slower machine names less.
func TestGiveUpHoldbackTimeLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, u := promotedStore(ctx, t, "lh_test_hbleft_", "60s")

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
