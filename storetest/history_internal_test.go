package storetest

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A history the checker cannot decide in its time (a loaded machine, the
// other histories' checks beside it) is looked at again, alone, with more
// time, after every history has run; one still undecided never passes.
// Before, the first look's Unknown was final: CI run 17 failed a proxy
// conformance run on "195 ok, 0 illegal, 5 undecided".
func TestUndecidedLookedAtAgain(t *testing.T) {
	var mu sync.Mutex
	looks := map[int][]time.Duration{} // by history (its one operation's client id)
	hr := historyRun{
		histories: 4, clients: 1, parallel: 2, timeout: time.Second,
		model: LeaseModel(),
		client: func(ctx context.Context, h, c int, r *rand.Rand) []porcupine.Operation {
			return []porcupine.Operation{{ClientId: h}}
		},
		tally:    func([]porcupine.Operation) {},
		describe: func(h int, ops []porcupine.Operation) string { return "history " + string(rune('0'+h)) },
		check: func(_ porcupine.Model, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
			h := ops[0].ClientId
			mu.Lock()
			looks[h] = append(looks[h], timeout)
			n := len(looks[h])
			mu.Unlock()
			switch {
			case h == 0: // decided at once
				return porcupine.Ok
			case h == 1: // undecided at first, then linearizable
				if n == 1 {
					return porcupine.Unknown
				}
				return porcupine.Ok
			case h == 2: // undecided at first, then illegal
				if n == 1 {
					return porcupine.Unknown
				}
				return porcupine.Illegal
			default: // never decided
				return porcupine.Unknown
			}
		},
	}
	var v Verdicts
	hr.run(context.Background(), &v)
	if v.Ok != 2 || v.Illegal != 1 || v.Undecided != 1 || v.Relooked != 2 {
		t.Errorf("verdicts %+v, want 2 ok, 1 illegal, 1 undecided, 2 decided at the second look", v)
	}
	if v.Passed() {
		t.Error("a run with an undecided and an illegal history passed")
	}
	if !strings.HasPrefix(v.FirstBad, "history 2") {
		t.Errorf("first bad history %q, want history 2 (found illegal at the second look)", v.FirstBad)
	}
	// Without an illegal history, the one still undecided is listed (CI
	// run 75: a run failed on one undecided history, and nothing said which).
	hr.histories = 2
	hr.check = func(_ porcupine.Model, ops []porcupine.Operation, _ time.Duration) porcupine.CheckResult {
		if ops[0].ClientId == 1 {
			return porcupine.Unknown
		}
		return porcupine.Ok
	}
	var u Verdicts
	hr.run(context.Background(), &u)
	if u.Ok != 1 || u.Undecided != 1 || u.Passed() {
		t.Errorf("verdicts %+v, want 1 ok, 1 undecided, not passed", u)
	}
	if u.FirstBad != "undecided even at the second look: history 1" {
		t.Errorf("FirstBad %q, want the undecided history listed", u.FirstBad)
	}
	for h, want := range map[int][]time.Duration{0: {time.Second}, 1: {time.Second, relookFactor * time.Second}, 3: {time.Second, relookFactor * time.Second}} {
		if got := looks[h]; len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("history %d checked with timeouts %v, want %v", h, got, want)
		}
	}
}
