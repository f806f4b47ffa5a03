// Command fuzztime checks a time per fuzz target as go test's -fuzztime
// takes it: a count of runs such as 500x (base 10, above zero) or a
// duration that time.ParseDuration takes, above zero. It exits 0 if the
// time is one, else 1 with the reason; 2 on a wrong number of arguments.
// scripts/fuzz.sh asks it before it builds anything, so that a time go
// test would refuse for every target is refused at once (the red team of
// 2026-12-06: 0.1ns, and sums of parts beyond Go's longest duration, got
// past a check of the script's own).
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fuzztime TIME")
		os.Exit(2)
	}
	if err := check(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// check mirrors the testing package's parsing of -fuzztime.
func check(s string) error {
	if n, ok := strings.CutSuffix(s, "x"); ok {
		if c, err := strconv.ParseInt(n, 10, 0); err != nil || c <= 0 {
			return fmt.Errorf("%q: not a count of runs above zero", s)
		}
		return nil
	}
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return fmt.Errorf("%q: not a duration above zero", s)
	}
	return nil
}
