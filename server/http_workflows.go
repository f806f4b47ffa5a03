package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
	"github.com/leasehold/leasehold/workflow"
)

// Workflow transitions over HTTP (see docs/http-api.md, "Workflows"):
//
//	POST /v1/workflows/{definition}/{instance}/transition  {"from","to","actor","request_id"} → the Result
//	POST /v1/workflows/{definition}/{instance}             create the instance in the initial state
//	GET  /v1/workflows/{definition}/{instance}             the instance
//	GET  /v1/workflows/{definition}/{instance}/requests/{request_id}  the entry the request id applied (Lookup)
//
// The definitions are those of HandlerOptions.Workflows. Access is checked
// on the instance's record key, wf/{definition}/i/{instance}: read for GET,
// write for the rest, so that grants on records govern workflows too.

func httpEntry(e workflow.Entry) httpwire.Entry {
	return httpwire.Entry{Version: e.Version, From: e.From, To: e.To, Actor: e.Actor, Label: e.Label, RequestID: e.RequestID,
		At: httpwire.Time(e.At), Strategy: string(e.Strategy), Token: e.Token}
}

func httpInstance(in workflow.Instance) httpwire.Instance {
	out := httpwire.Instance{Workflow: in.Workflow, Instance: in.ID, State: in.State, Version: in.Version,
		Created: httpwire.Time(in.Created), Updated: httpwire.Time(in.Updated), LastActor: in.LastActor}
	if in.Last != nil {
		e := httpEntry(*in.Last)
		out.Last = &e
	}
	return out
}

// workflowRoute serves the workflow rows of the route table
// (http_table.go): the preamble has checked the definition and instance
// names and the caller's access on the instance's record key.
func (h *httpAPI) workflowRoute(q *httpReq, a *httpArgs) {
	def, inst := a.params["definition"], a.params["instance"]
	wf := h.workflows[def]
	if wf == nil {
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found",
			fmt.Sprintf("no workflow definition %q on this server", def), nil)
		return
	}
	ctx := q.r.Context()
	switch {
	case q.op == "workflow.transition":
		var body httpwire.TransitionBody
		if !h.decode(q, &body) {
			return
		}
		actor, label, err := transitionActor(q.id, body.Actor, body.Label)
		if err != nil {
			h.fail(q, err)
			return
		}
		res, err := wf.Apply(ctx, workflow.Request{Instance: inst, From: body.From, To: body.To, Actor: actor, Label: label, RequestID: body.RequestID})
		if err != nil {
			h.workflowFail(q, err)
			return
		}
		if res.Outcome == workflow.WrongState {
			h.wrongState(q, res)
			return
		}
		h.json(q, http.StatusOK, httpwire.Result{
			Outcome: string(res.Outcome), Workflow: wf.Definition().Name, Instance: res.Instance,
			From: res.From, To: res.To, State: res.State, Version: res.Version,
			By: res.Entry.Actor, Entry: httpEntry(res.Entry), Strategy: string(res.Strategy),
			Attempts: res.Attempts, Summary: res.String(),
		})
	case q.op == "workflow.lookup":
		e, err := wf.Lookup(ctx, inst, a.params["request_id"])
		if err != nil {
			h.workflowFail(q, err)
			return
		}
		h.json(q, http.StatusOK, httpEntry(e))
	case q.r.Method == http.MethodPost:
		var body struct{}
		if !h.decode(q, &body) {
			return
		}
		in, err := wf.Create(ctx, inst)
		if err != nil {
			h.workflowFail(q, err)
			return
		}
		h.json(q, http.StatusCreated, httpInstance(in))
	default:
		in, err := wf.Get(ctx, inst)
		if err != nil {
			h.workflowFail(q, err)
			return
		}
		h.json(q, http.StatusOK, httpInstance(in))
	}
}

// workflowFail answers with the problem a workflow error stands for.
func (h *httpAPI) workflowFail(q *httpReq, err error) {
	q.err = err
	var ws *workflow.WrongStateError
	var na *workflow.NotAllowedError
	var re *leasehold.RetriesExhaustedError
	var reused *workflow.RequestReusedError
	switch {
	case errors.As(err, &reused):
		h.problem(q, http.StatusConflict, httpwire.RequestReused, "Request id already used", reused.Error(),
			map[string]any{"request_id": reused.RequestID, "actor": reused.Actor, "from": reused.From, "to": reused.To,
				"entry": httpEntry(reused.Entry)})
	case errors.Is(err, workflow.ErrNoRequest):
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found", err.Error(), nil)
	case errors.As(err, &ws):
		res := workflow.Result{Outcome: workflow.WrongState, Instance: ws.Instance, From: ws.From, To: ws.To,
			State: ws.Current, Version: ws.Version}
		if ws.Last != nil {
			res.Entry = *ws.Last
		}
		h.wrongState(q, res)
	case errors.As(err, &na):
		h.problem(q, http.StatusUnprocessableEntity, httpwire.NotAllowed, "Transition not allowed", na.Error(), nil)
	case errors.Is(err, workflow.ErrNoInstance):
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found", err.Error(), nil)
	case errors.Is(err, workflow.ErrExists):
		h.problem(q, http.StatusConflict, httpwire.Exists, "Already exists", err.Error(), nil)
	case errors.As(err, &re), errors.Is(err, leasehold.ErrLockTimeout):
		// Too many writers at once: nothing was applied by this request;
		// repeating it with the same request id is safe.
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, httpwire.Contended, "Contended",
			err.Error()+"; retry with the same request_id", nil)
	case errors.Is(err, leasehold.ErrTxnUnsupported), errors.Is(err, ErrRecordsUnsupported):
		h.recordFail(q, err, 0)
	case q.r.Method == http.MethodPost && outcomeUnknown(err):
		// The transition (or create) may or may not have been applied:
		// its lease was lost under it, or the store stopped answering.
		// A request id applies at most once: repeating it says which.
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, httpwire.OutcomeUnknown, "Outcome unknown",
			err.Error()+"; the outcome is unknown: repeat the request with the same request_id (safe: applied at most once) to learn it", nil)
	default:
		h.fail(q, err)
	}
}

// outcomeUnknown reports whether a workflow write's error leaves its
// outcome unknown: a lease lost under the transition, or an error of the
// store that is none of the answers h.fail knows (a lost connection, a
// database shutting down, a failover). Not a closed server, a timeout
// (504 timeout) or a cancelled request.
func outcomeUnknown(err error) bool {
	if errors.Is(err, leasehold.ErrLost) {
		return true
	}
	var inv *leasehold.InvalidError
	var held *leasehold.HeldError
	var quota *QuotaError
	switch {
	case errors.Is(err, leasehold.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &inv), errors.As(err, &held), errors.As(err, &quota), errors.Is(err, leasehold.ErrNotHeld),
		errors.Is(err, leasehold.ErrNotFound), errors.Is(err, ErrBadProof), errors.Is(err, ErrNoSession):
		return false
	}
	return true
}

// wrongState answers a wrong-state refusal: 409 with the instance's state
// and version as found and the entry that left it there — under the names
// of a transition's result (state, version, entry, by) and, as before,
// current_state and last.
func (h *httpAPI) wrongState(q *httpReq, res workflow.Result) {
	extra := map[string]any{"current_state": res.State, "state": res.State, "version": res.Version, "from": res.From, "to": res.To}
	if res.Version > 0 {
		e := httpEntry(res.Entry)
		extra["last"], extra["entry"], extra["by"] = e, e, res.Entry.Actor
	}
	q.err = workflow.ErrWrongState
	h.problem(q, http.StatusConflict, httpwire.WrongState, "Wrong state", res.String()+"; nothing was changed", extra)
}
