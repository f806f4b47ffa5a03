package verify_test

import (
	"testing"

	"github.com/leasehold/leasehold/testrig/verify"
)

// TestCountsNote: counts are written in the order of their names.
func TestCountsNote(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int
		want   string
	}{
		{nil, ""},
		{map[string]int{"renew": 3}, "renew 3"},
		{map[string]int{"release": 1, "acquire": 12, "renew": 0}, "acquire 12, release 1, renew 0"},
	} {
		if got := verify.CountsNote(c.counts); got != c.want {
			t.Errorf("CountsNote(%v) = %q, want %q", c.counts, got, c.want)
		}
	}
}
