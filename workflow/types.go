package workflow

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// Strategy is how Transition serialises writers of one instance.
type Strategy string

// The strategies. See docs/workflows.md for when to use each.
const (
	// Optimistic reads the instance, checks the transition and writes it in
	// one transaction conditioned on the version read, retrying conflicts
	// with jittered exponential backoff up to Config.MaxAttempts. The
	// callers of one instance in one process take turns (in the order
	// their request ids first arrived, waiting at most Config.LockWait), so
	// its conflicts are with other processes only.
	Optimistic Strategy = "optimistic"
	// Pessimistic locks the instance's row for the transition (SELECT ...
	// FOR UPDATE with lock_timeout) where the record store has row locks
	// (a leasehold.RecordLocker: PostgreSQL). Elsewhere there is no row
	// lock to take and it IS the Lease strategy: Workflows.Serves, the
	// Result and the history entries then say Lease, never Pessimistic.
	Pessimistic Strategy = "pessimistic"
	// Lease holds a leasehold lease on the instance for the transition; the
	// write is conditioned on the version read under it and the history
	// entry records the lease's fencing token.
	Lease Strategy = "lease"
	// Adaptive starts optimistic, measures each instance's conflict rate
	// over a sliding window, and moves an instance whose rate passes
	// Config.Threshold to fair queuing (an in-process FIFO per instance that
	// applies waiting transitions in order, several in one transaction, with
	// a FIFO lease around it when other processes may write); it moves back
	// when the rate falls below half the threshold.
	Adaptive Strategy = "adaptive"
	// Queued is not a strategy to configure: it is what Result.Strategy
	// and the metrics report for a transition that Adaptive applied through
	// the fair queue.
	Queued Strategy = "queued"
)

// Outcome says what a Transition did.
type Outcome string

const (
	// Applied: this call moved the instance.
	Applied Outcome = "applied"
	// Repeated: this request id was applied before (a retry after a lost
	// reply, say); nothing changed now and Result carries the original
	// transition.
	Repeated Outcome = "repeated"
	// AlreadyDone: the instance is already in the target state because
	// ANOTHER request moved it there; nothing changed, and Result.Entry
	// says who, with which request and when. This call did not apply
	// anything: callers whose transition is not naturally repeatable (an
	// approval that sends a mail, a payment) must not treat it as theirs.
	AlreadyDone Outcome = "already-done"
	// WrongState: the instance is not in From (nor in To, which would be
	// AlreadyDone); nothing changed. Only Apply returns it, as a Result
	// (Transition returns a *WrongStateError instead): State and Version
	// are the instance's as found, Entry the transition that left it there
	// (zero if it has not moved since it was created).
	WrongState Outcome = "wrong-state"
)

// Instance is a workflow instance as stored.
type Instance struct {
	Workflow string
	ID       string
	State    string
	// Version counts the transitions applied to the instance (0 when it is
	// created). It is also the version of its last history entry.
	Version   uint64
	Created   time.Time
	Updated   time.Time // the last transition's time (Created before any)
	LastActor string    // who made the last transition ("" before any)
	// Last is the last transition, nil before any.
	Last *Entry
}

// Entry is one transition in an instance's history.
type Entry struct {
	Instance  string    `json:"instance"`
	Version   uint64    `json:"version"` // the instance's version after it (1 for the first)
	From      string    `json:"from"`
	To        string    `json:"to"`
	Actor     string    `json:"actor"`
	Label     string    `json:"label,omitempty"` // free text given beside Actor (Request.Label); "" if none
	RequestID string    `json:"request_id"`
	At        time.Time `json:"at"`
	// Strategy is how it was applied (optimistic, pessimistic, lease or
	// queued).
	Strategy Strategy `json:"strategy"`
	// Token is the fencing token of the lease held while it was applied
	// (lease strategy, and pessimistic on stores without row locks); 0
	// otherwise.
	Token uint64 `json:"token,omitempty"`
}

// Result reports what Transition did.
type Result struct {
	Outcome  Outcome
	Instance string
	// From and To are the transition asked for.
	From, To string
	// State and Version are the instance's after the call (for Repeated:
	// after the original transition).
	State   string
	Version uint64
	// Entry is the transition that explains the outcome: the one this call
	// made (Applied), the original one of this request id (Repeated), or
	// the one by which ANOTHER request moved the instance where it is
	// (AlreadyDone, WrongState: Entry.Actor, Entry.RequestID and Entry.At
	// say who, which request and when).
	Entry Entry
	// Strategy is how this call was served (Queued for Adaptive's fair
	// queue).
	Strategy Strategy
	// Attempts counts the conditional writes tried (1 without a conflict;
	// 0 when no write was needed).
	Attempts int
}

// Superseded reports whether other requests left the instance where this
// one could not apply, so that it changed nothing: AlreadyDone (the
// instance is in To) or WrongState (elsewhere). Both have one shape: State
// and Version as found, and Entry, the transition that moved it there.
func (r Result) Superseded() bool { return r.Outcome == AlreadyDone || r.Outcome == WrongState }

// Err is nil when this call's request is in the history — Applied (this
// call moved the instance) or Repeated (an earlier call with its request
// id did) — and otherwise the refusal as an error: a *WrongStateError
// (matching ErrWrongState) for WrongState, an error matching
// ErrAlreadyDone for AlreadyDone. Apply answers both refusals with a nil
// error, so a caller that must not take someone else's transition for its
// own checks Err (or Outcome), not only Apply's error:
//
//	res, err := w.Apply(ctx, req)
//	if err == nil {
//		err = res.Err()
//	}
func (r Result) Err() error {
	switch r.Outcome {
	case Applied, Repeated:
		return nil
	case WrongState:
		e := &WrongStateError{Instance: r.Instance, Current: r.State, Version: r.Version, From: r.From, To: r.To,
			strategy: r.Strategy, attempts: r.Attempts}
		if r.Version > 0 {
			last := r.Entry
			e.Last = &last
		}
		return e
	case AlreadyDone:
		return fmt.Errorf("%s: %w", r, ErrAlreadyDone)
	}
	return fmt.Errorf("workflow: a result with no outcome (%q)", r.Outcome)
}

func (r Result) String() string {
	switch r.Outcome {
	case WrongState:
		s := fmt.Sprintf("%s: %s → %s refused: the instance is in %s (version %d)", r.Instance, r.From, r.To, r.State, r.Version)
		if r.Version == 0 {
			return s + ", where it was created"
		}
		return s + fmt.Sprintf(", moved there by %s (request %s)", r.Entry.Actor, r.Entry.RequestID)
	case AlreadyDone:
		return fmt.Sprintf("%s: %s → %s already done by %s (request %s, version %d, %s)",
			r.Instance, r.From, r.To, r.Entry.Actor, r.Entry.RequestID, r.Entry.Version, r.Entry.At.Format(time.RFC3339Nano))
	case Repeated:
		return fmt.Sprintf("%s: %s → %s repeated: request %s was applied at version %d by %s",
			r.Instance, r.From, r.To, r.Entry.RequestID, r.Entry.Version, r.Entry.Actor)
	default:
		return fmt.Sprintf("%s: %s → %s %s at version %d", r.Instance, r.From, r.To, r.Outcome, r.Version)
	}
}

var (
	// ErrNoInstance reports a workflow instance that does not exist.
	ErrNoInstance = errors.New("no such workflow instance")
	// ErrExists reports a Create of an instance that exists.
	ErrExists = errors.New("workflow instance already exists")
	// ErrAlreadyDone is matched by Result.Err of an AlreadyDone result:
	// another request moved the instance into the target state.
	ErrAlreadyDone = errors.New("workflow instance already moved to the target state by another request")
	// ErrWrongState is matched (errors.Is) by every *WrongStateError.
	ErrWrongState = errors.New("workflow instance is not in the transition's source state")
	// ErrNotAllowed is matched (errors.Is) by every *NotAllowedError.
	ErrNotAllowed = errors.New("transition not allowed by the workflow definition")
	// ErrRequestReused is matched (errors.Is) by every *RequestReusedError.
	ErrRequestReused = errors.New("request id already used for another transition or actor")
	// ErrNoRequest reports (from Lookup) that no transition of the instance
	// was applied with the request id.
	ErrNoRequest = errors.New("no transition was applied with this request id")
)

// RequestReusedError refuses a transition whose request id was already
// applied to the instance by another actor or for another transition.
// Nothing changed. Entry is the transition the request id applied: a caller
// that asks again after a lost reply, from whatever state it read since,
// learns from it what became of its request. It also matches
// leasehold.ErrInvalid.
type RequestReusedError struct {
	Workflow, Instance string
	// RequestID, Actor, From and To are what this call asked.
	RequestID, Actor, From, To string
	// Entry is the transition the request id applied before.
	Entry Entry
}

func (e *RequestReusedError) Error() string {
	what := "for the transition"
	if e.Entry.Actor != e.Actor {
		what = "by another actor,"
	}
	return fmt.Sprintf("workflow %q instance %q: request id %q was already used %s %s: %q → %q (version %d); "+
		"this call asks %s: %q → %q; nothing changed",
		e.Workflow, e.Instance, e.RequestID, what, e.Entry.Actor, e.Entry.From, e.Entry.To, e.Entry.Version, e.Actor, e.From, e.To)
}

// Is makes errors.Is(err, ErrRequestReused) and errors.Is(err,
// leasehold.ErrInvalid) true.
func (e *RequestReusedError) Is(target error) bool {
	return target == ErrRequestReused || target == leasehold.ErrInvalid
}

// WrongStateError refuses a transition that does not start from the
// instance's current state (and whose target the instance is not in).
// Nothing changed.
type WrongStateError struct {
	Workflow, Instance string
	Current            string // the instance's state
	Version            uint64 // the instance's version
	From, To           string // the transition refused
	// Last is the transition that left the instance in Current (nil if it
	// has not moved since it was created).
	Last *Entry

	strategy Strategy // how the refusal was served
	attempts int
}

// result is the refusal as Apply returns it.
func (e *WrongStateError) result() Result {
	r := Result{Outcome: WrongState, Instance: e.Instance, From: e.From, To: e.To, State: e.Current,
		Version: e.Version, Strategy: e.strategy, Attempts: e.attempts}
	if e.Last != nil {
		r.Entry = *e.Last
	}
	return r
}

func (e *WrongStateError) Error() string {
	s := fmt.Sprintf("instance %q: transition %q → %q refused: the instance is in %q (version %d), not %q",
		e.Instance, e.From, e.To, e.Current, e.Version, e.From)
	if e.Workflow != "" { // Result.Err does not know it
		s = fmt.Sprintf("workflow %q ", e.Workflow) + s
	}
	if e.Last != nil {
		s += fmt.Sprintf(" (moved there by %s, request %s)", e.Last.Actor, e.Last.RequestID)
	}
	return s
}

// Is makes errors.Is(err, ErrWrongState) true.
func (e *WrongStateError) Is(target error) bool { return target == ErrWrongState }

// NotAllowedError refuses a transition the definition does not have (or a
// state it does not know). Nothing changed.
type NotAllowedError struct {
	Workflow string
	From, To string
	Reason   string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("workflow %q: transition %q → %q is not allowed: %s", e.Workflow, e.From, e.To, e.Reason)
}

// Is makes errors.Is(err, ErrNotAllowed) true.
func (e *NotAllowedError) Is(target error) bool { return target == ErrNotAllowed }
