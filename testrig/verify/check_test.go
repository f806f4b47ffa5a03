package verify_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// TestCheckShowsTheViolation: the window a failure shows ends at the
// operation the history cannot explain, not at an earlier answer that
// only a later-called operation explains. CI run 101's R3 failure showed
// an acquire told "held by" a grant whose request was called after it: a
// legal answer, shown because the window was cut at that acquire's call.
func TestCheckShowsTheViolation(t *testing.T) {
	ttl := int64(time.Second)
	var h verify.History
	seq := int64(0)
	op := func(w, key, kind, owner string, tok uint64, call, ret int64, ok bool, out uint64, holder string) {
		seq++
		h.Events = append(h.Events,
			verify.Event{E: "call", Worker: w, Proc: w, Seq: seq, Key: key, Op: kind, Owner: owner, ReqID: owner, Token: tok, TTL: ttl, T: call},
			verify.Event{E: "ret", Worker: w, Proc: w, Seq: seq, T: ret, OK: ok, Out: out, Holder: holder})
	}
	op("w0", "k", "acquire", "a", 0, 0, 10, true, 1, "")
	op("w0", "k", "release", "a", 1, 20, 21, true, 0, "")
	// b is told "held by c/2": c's acquire was called after b's, and
	// granted before b's answer. Legal.
	op("w1", "k", "acquire", "b", 0, 100, 200, false, 2, "c")
	op("w2", "k", "acquire", "c", 0, 150, 160, true, 2, "")
	// The violation: e is granted while c's lease runs. (With five
	// operations, the search's first cut is at b's call.)
	op("w3", "k", "acquire", "e", 0, 400, 410, true, 3, "")

	res := verify.Check(&h, verify.CheckOptions{})
	if res.Illegal != 1 {
		t.Fatalf("Illegal = %d, want 1: %s", res.Illegal, res)
	}
	lines := strings.Split(strings.TrimSpace(res.FirstBad), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "e acquire") || !strings.Contains(last, "token 3") {
		t.Fatalf("the window ends with %q, want e's grant (token 3):\n%s", last, res.FirstBad)
	}
	if len(res.IllegalKeys) != 1 || res.IllegalKeys[0] != "k" {
		t.Fatalf("IllegalKeys = %q, want [k]", res.IllegalKeys)
	}
	if whole := h.DescribeKey("k"); strings.Count(whole, "\n") != 5 || !strings.Contains(whole, "b acquire") {
		t.Fatalf("the whole history of k, described:\n%s", whole)
	}
	if !strings.Contains(res.FirstBad, "c acquire") {
		t.Fatalf("the window lacks c's grant:\n%s", res.FirstBad)
	}

	// Without the violation, the same history is linearizable.
	h.Events = h.Events[:len(h.Events)-2]
	if res := verify.Check(&h, verify.CheckOptions{}); !res.Passed() {
		t.Fatalf("the history without e's grant: %s", res)
	}
}
