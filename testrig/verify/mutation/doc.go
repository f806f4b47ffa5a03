// Package mutation is suite R10 of the verification plan: deliberate bugs
// (package internal/mutation, compiled in only with the build tag
// leasehold_mutations) must each be caught by a fault suite in at least 9
// of 10 runs. TestMutationsCaught builds the quick suites of ./suites with
// the tag once, checks that each passes without a bug, and runs each bug's
// suite ten times with $LEASEHOLD_MUTATION naming the bug.
package mutation
