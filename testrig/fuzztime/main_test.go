package main

import "testing"

// TestCheck: what go test's -fuzztime takes and refuses, including the
// red team's cases of 2026-12-06 that the script's own check got wrong.
func TestCheck(t *testing.T) {
	for _, s := range []string{"10s", "2m", "1m30s", "500x", "+5x", "0001x", "9223372036854775807x",
		"1ns", "+5s", "5µs", "5μs", ".5s", "5.s", "1.5h", "9223372036854775807ns", "2562047h47m16.854775807s"} {
		if err := check(s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	for _, s := range []string{"", "abc", "0", "0s", "0x", "-1x", "-1s", "0.1ns", "0.5ns0.5ns", " 5s", "5s ", "5S",
		"1e3s", "1_000x", "9223372036854775808x", "9223372036854775808ns", "2562048h",
		"9223372036854775000ns500ns500ns", "2562047h47m16s854ms775us500ns500ns"} {
		if err := check(s); err == nil {
			t.Errorf("%q taken, want refused", s)
		}
	}
}
