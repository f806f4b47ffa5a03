package stepfn

import (
	"testing"

	"github.com/leasehold/leasehold/testrig/verify"
)

func cs(worker, owner string, token uint64, from, to int64) verify.Event {
	return verify.Event{E: "cs", Worker: worker, Proc: owner, Owner: owner, Key: "k", Token: token, From: from, To: to}
}

func TestTokenOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []verify.Event
		want int
	}{
		{"increasing", []verify.Event{cs("sfn", "a", 1, 0, 10), cs("go", "b", 2, 11, 20), cs("run", "c", 3, 21, 30)}, 0},
		{"lower after higher", []verify.Event{cs("sfn", "a", 5, 0, 10), cs("go", "b", 4, 11, 20)}, 1},
		{"equal, another owner", []verify.Event{cs("sfn", "a", 5, 0, 10), cs("go", "b", 5, 11, 20)}, 1},
		{"equal, same owner (a retried task)", []verify.Event{cs("sfn", "a", 5, 0, 10), cs("sfn", "a", 5, 11, 20)}, 0},
		{"same owner's old token after another's", []verify.Event{cs("sfn", "a", 5, 0, 10), cs("go", "b", 6, 11, 20), cs("sfn", "a", 5, 21, 30)}, 1},
		{"overlapping sections are the overlap check's", []verify.Event{cs("sfn", "a", 5, 0, 10), cs("go", "b", 4, 5, 20)}, 0},
	} {
		if got, first := tokenOrder(tc.evs); got != tc.want {
			t.Errorf("%s: %d, want %d (%s)", tc.name, got, tc.want, first)
		}
	}
}

func TestLeaseOf(t *testing.T) {
	l, err := leaseOf(map[string]any{"x": 1, "leasehold": map[string]any{"lock": "L", "owner": "arn:x", "token": 42.0}})
	if err != nil || l.Lock != "L" || l.Owner != "arn:x" || l.Token != 42 {
		t.Errorf("leaseOf = %+v, %v", l, err)
	}
	if _, err := leaseOf(map[string]any{"x": 1}); err == nil {
		t.Error("a payload without the lease was accepted")
	}
}
