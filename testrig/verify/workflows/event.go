package workflows

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// Call is one operation of a worker and the answer it got, as the worker
// records it (one JSON line each). Start and End are verify.Mono readings,
// one clock for every process of the machine.
type Call struct {
	Worker string `json:"w"`
	// Op: "begin" (a transition is about to be sent: nothing else is known
	// of it if the process dies), "transition", "get", "lookup", or
	// "handoff" (a lost reply handed to another process to ask again:
	// Config.Handoff).
	Op string `json:"op"`
	// Kind says why a transition was sent: "unique" (a fresh request id),
	// "shared" (an id every process derives from the version it read, with
	// one actor: twins), "lost" (a short deadline: the reply may be lost),
	// "resolve" (the same request asked again after a lost reply), "reask"
	// (the same request id from the state read since), "impostor" (an
	// applied id reused by another actor).
	Kind      string          `json:"kind,omitempty"`
	Start     int64           `json:"start"`
	End       int64           `json:"end,omitempty"`
	From      string          `json:"from,omitempty"`
	To        string          `json:"to,omitempty"`
	Actor     string          `json:"actor,omitempty"`
	RequestID string          `json:"rid,omitempty"`
	Answer    string          `json:"answer,omitempty"`
	State     string          `json:"state,omitempty"`
	Version   uint64          `json:"version,omitempty"`
	Entry     *workflow.Entry `json:"entry,omitempty"`
	Err       string          `json:"err,omitempty"`
}

// The answers a Call can record.
const (
	AnsApplied     = "applied"
	AnsRepeated    = "repeated"
	AnsAlreadyDone = "already-done"
	AnsWrongState  = "wrong-state"
	AnsReused      = "reused"       // the request id was used for another actor or transition
	AnsRead        = "read"         // a Get
	AnsFound       = "found"        // a lookup that found the id's entry
	AnsNotFound    = "not-found"    // a lookup that did not
	AnsUnknown     = "unknown"      // the call's context ended: the outcome is unknown
	AnsLockTimeout = "lock-timeout" // no lock or lease within Config.LockWait
	AnsExhausted   = "exhausted"    // optimistic retries exhausted
	AnsInvalid     = "invalid"      // an *leasehold.InvalidError
	AnsError       = "error"        // anything else (a store error)
)

// record fills c's answer from a transition's result.
func (c *Call) record(res workflow.Result, err error) {
	if err == nil {
		c.Answer = string(res.Outcome)
		c.State, c.Version = res.State, res.Version
		e := res.Entry
		c.Entry = &e
		return
	}
	c.Err = err.Error()
	var ws *workflow.WrongStateError
	var ex *leasehold.RetriesExhaustedError
	switch {
	case errors.As(err, &ws):
		c.Answer, c.State, c.Version, c.Entry = AnsWrongState, ws.Current, ws.Version, ws.Last
		c.Err = ""
	case recordReused(c, err):
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		c.Answer = AnsUnknown
	case errors.Is(err, leasehold.ErrLockTimeout):
		c.Answer = AnsLockTimeout
	case errors.As(err, &ex):
		c.Answer = AnsExhausted
	case errors.Is(err, leasehold.ErrInvalid):
		c.Answer = AnsInvalid
	default:
		c.Answer = AnsError
	}
}

// definitive reports whether an answer tells what became of the request.
func definitive(answer string) bool {
	switch answer {
	case AnsApplied, AnsRepeated, AnsAlreadyDone, AnsWrongState, AnsReused, AnsFound, AnsNotFound, AnsRead:
		return true
	}
	return false
}
