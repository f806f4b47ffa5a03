//go:build leasehold_mutations

package suites_test

// mutated: this binary was built with the deliberate bugs available.
const mutated = true
