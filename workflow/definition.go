package workflow

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// MaxNameLen is the longest workflow name, instance id and state name, in
// bytes. Together with a request id (at most leasehold.MaxRequestIDLen
// bytes) they make the record keys, which are at most leasehold.MaxNameLen
// bytes.
const MaxNameLen = 48

// Definition is a state machine: its states are the keys and targets of
// Transitions, an instance starts at Initial, and a transition from → to is
// allowed only if to is listed under from.
type Definition struct {
	// Name names the workflow; it prefixes the keys of its records, so two
	// definitions with different names never share instances.
	Name string
	// Initial is the state of a newly created instance.
	Initial string
	// Transitions maps each state to the states it may move to.
	Transitions map[string][]string
}

// Validate checks the definition: a name and an initial state, every name
// valid text of at most MaxNameLen bytes without '/', the initial state
// among the states, no target listed twice.
func (d Definition) Validate() error {
	if err := checkName("workflow name", d.Name); err != nil {
		return err
	}
	if err := checkName("initial state", d.Initial); err != nil {
		return err
	}
	if len(d.Transitions) == 0 {
		return &leasehold.InvalidError{Field: "transitions", Reason: "the definition has no transitions"}
	}
	states := map[string]bool{}
	for from, tos := range d.Transitions {
		if err := checkName("state", from); err != nil {
			return err
		}
		states[from] = true
		seen := map[string]bool{}
		for _, to := range tos {
			if err := checkName("state", to); err != nil {
				return err
			}
			if seen[to] {
				return &leasehold.InvalidError{Field: "transitions", Reason: fmt.Sprintf("%q → %q is listed twice", from, to)}
			}
			seen[to] = true
			states[to] = true
		}
	}
	if !states[d.Initial] {
		return &leasehold.InvalidError{Field: "initial state", Reason: fmt.Sprintf("%q is not a state of any transition", d.Initial)}
	}
	return nil
}

// Allowed reports whether the definition allows from → to.
func (d Definition) Allowed(from, to string) bool {
	return slices.Contains(d.Transitions[from], to)
}

// States returns every state of the definition, sorted.
func (d Definition) States() []string {
	set := map[string]bool{d.Initial: true}
	for from, tos := range d.Transitions {
		set[from] = true
		for _, to := range tos {
			set[to] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (d Definition) hasState(s string) bool {
	if s == d.Initial {
		return true
	}
	if _, ok := d.Transitions[s]; ok {
		return true
	}
	for _, tos := range d.Transitions {
		if slices.Contains(tos, s) {
			return true
		}
	}
	return false
}

// checkName applies the rules of lease names, a shorter limit, and no '/'
// (the separator of the record keys).
func checkName(field, s string) error {
	if len(s) > MaxNameLen {
		// Before the lease name's rules, whose limit is longer: a name
		// of 1 MiB was refused as over 256 bytes, one of 49 as over 48.
		return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf("%d bytes is longer than the limit of %d", len(s), MaxNameLen)}
	}
	if err := storekit.ValidateName(s); err != nil {
		var inv *leasehold.InvalidError
		if errors.As(err, &inv) {
			return &leasehold.InvalidError{Field: field, Reason: inv.Reason}
		}
		return err
	}
	if strings.Contains(s, "/") {
		return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf("%q contains '/', which separates the parts of record keys", s)}
	}
	return nil
}
