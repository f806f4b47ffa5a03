// Package workflows is suite R16 of the verification plan: several
// processes, each with its own workflow.Workflows and its own store client,
// drive one workflow instance on one store — with short deadlines, lost
// replies, killed processes and restarted engines — and a checker validates
// every answer they were given against the instance's final history, not
// only the final state.
//
// The rules (check.go): an applied entry is in the history, exactly, with
// that request id; a repeated one returns exactly the entry of that id; an
// already-done or wrong-state answer names a state and version the instance
// really had, no older than anything any process had seen finish before
// the call started, and never for a request id that was applied by then;
// a reused request id is refused with the entry it was used for; a lookup
// finds exactly the entry of its id; no transition is lost, applied twice
// or made by a request nobody sent; and a request whose reply was lost is
// resolved when it is asked again (or looked up).
package workflows
