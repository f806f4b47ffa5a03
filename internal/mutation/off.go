//go:build !leasehold_mutations

// Package mutation switches on deliberate bugs for suite R10 of the
// verification plan, in binaries built with the tag leasehold_mutations
// (see mutation.go). This build has none.
package mutation

// Env names the bug to switch on in a mutated build.
const Env = "LEASEHOLD_MUTATION"

// On reports false: this build has no bugs to switch on.
func On(name string) bool { return false }
