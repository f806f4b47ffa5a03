//go:build !leasehold_mutations

package suites_test

const mutated = false
