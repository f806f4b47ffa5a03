package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Request is one transition asked of an instance: move Instance from From
// to To on behalf of Actor, once per RequestID. Every field but Label is
// required. RequestID names one intent of one caller: make it once, before
// the first attempt, and send it again with every retry of that intent.
type Request struct {
	Instance string
	From, To string
	// Actor is who asks, as recorded in the history entry (Entry.Actor) and
	// compared when a request id is asked again. A server that
	// authenticates its callers passes the authenticated identity here,
	// never a name the caller chose (see docs/workflows.md).
	Actor string
	// Label is optional free text recorded beside Actor (Entry.Label), such
	// as the name a caller gives itself; it is not compared when a request
	// id is asked again. The same rules as Actor apply when it is given.
	Label     string
	RequestID string
}

// Apply moves r.Instance from r.From to r.To on behalf of r.Actor, once per
// r.RequestID. Its answers are Transition's, except that a transition that
// does not start from the instance's state is not an error but a Result
// with Outcome WrongState, so that every "someone else moved it" answer has
// one shape (Result.Superseded: State, Version and the Entry that moved
// it). Errors are then only for requests that got no such answer: bad
// input (*leasehold.InvalidError, *NotAllowedError, a *RequestReusedError
// carrying the entry its id applied), ErrNoInstance, contention
// (*leasehold.RetriesExhaustedError, leasehold.ErrLockTimeout), store
// errors and ctx's error; none of them changed anything, except that after
// ctx's error or a store error the outcome is unknown (ask again with the
// same request, or Lookup).
func (w *Workflows) Apply(ctx context.Context, r Request) (Result, error) {
	res, err := w.transition(ctx, r)
	var ws *WrongStateError
	if errors.As(err, &ws) {
		return ws.result(), nil
	}
	return res, err
}

// Lookup returns the transition that requestID applied to instance, or an
// error matching ErrNoRequest if none was (ErrNoInstance if the instance
// does not exist). It reads; it changes nothing. A lookup that finds
// nothing while a call with that request id may still be in flight (its
// reply lost, its write not yet landed) proves only that the request was
// not applied yet: to settle the request, ask again with Transition and the
// same request id, which applies it or says what became of it.
func (w *Workflows) Lookup(ctx context.Context, instance, requestID string) (Entry, error) {
	if err := checkName("instance", instance); err != nil {
		return Entry{}, err
	}
	if requestID == "" {
		return Entry{}, &leasehold.InvalidError{Field: "request id", Reason: "must not be empty"}
	}
	if err := storekit.ValidateRequestID(requestID); err != nil {
		return Entry{}, err
	}
	e, found, err := w.readRequest(ctx, instance, requestID)
	if err != nil {
		return Entry{}, err
	}
	if found {
		return e, nil
	}
	if _, _, err := w.readInstance(ctx, instance); err != nil {
		return Entry{}, err
	}
	return Entry{}, fmt.Errorf("workflow %q instance %q request %q: %w", w.def.Name, instance, requestID, ErrNoRequest)
}
