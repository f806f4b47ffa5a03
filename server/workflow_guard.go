package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/resp"
	"github.com/leasehold/leasehold/workflow"
)

// The records of a configured workflow (wf/{definition}/i/{instance}, its
// history under wf/{definition}/h/ and its request ids under
// wf/{definition}/r/, see workflow/records.go) are written only through the
// workflow's transitions, which check that the transition is allowed, move
// the instance from the state it is in and record who did it. Written
// straight through /v1/records or /v1/txn, a record would skip all three:
// a writer could PUT an instance to APPROVED. So direct writes of keys under
// wf/{definition}/ of a definition this server serves need admin access on
// the key (an operator repairing a record); read access is unchanged. With
// auth off every caller has admin access, so nothing is refused.

//
// The same holds for leases under wf/{definition}/, on both protocols: the
// lock strategy's lease wf/{definition}/lock/{instance} is taken and freed
// by transitions, and a writer holding it would stall them. So acquiring,
// renewing or releasing a lease there needs admin access too (HTTP 403
// workflow-record, RESP NOPERM, both naming the transition route).

// workflowOf returns the route name and the definition name of the
// configured workflow whose records key belongs to, or ok false.
func (h *httpAPI) workflowOf(key string) (route, definition string, ok bool) {
	return workflowOf(h.workflows, key)
}

// workflowOf returns the route name (its key in workflows) and the
// definition name of the workflow whose records or leases key belongs to,
// or ok false.
func workflowOf(workflows map[string]*workflow.Workflows, key string) (route, definition string, ok bool) {
	if !strings.HasPrefix(key, "wf/") {
		return "", "", false
	}
	for name, wf := range workflows {
		if wf == nil {
			continue
		}
		def := wf.Definition().Name
		if strings.HasPrefix(key, "wf/"+def+"/") {
			return name, def, true
		}
	}
	return "", "", false
}

// workflowWrite reports whether the caller may write key directly. A key of
// a configured workflow needs admin access on it; otherwise it answers 403
// (problem type workflow-record, naming the transition route) and returns
// false. Call it after the caller's write access has been checked.
func (h *httpAPI) workflowWrite(q *httpReq, key string) bool {
	def, transition, guarded := workflowGuarded(h.workflows, q.id, key)
	if !guarded {
		return true
	}
	h.problem(q, http.StatusForbidden, "workflow-record", "Workflow record",
		fmt.Sprintf("%q is a record of workflow %q: it is written only through the workflow's transitions "+
			"(POST %s), or directly with admin access on the key; nothing was changed", key, def, transition),
		map[string]any{"key": key, "workflow": def, "transition": transition})
	return false
}

// workflowGuarded reports whether id may not write key (a record or a
// lease) directly: key is under wf/{definition}/ of a served workflow and
// id lacks admin access on it. It returns the definition's name and the
// transition route to use instead.
func workflowGuarded(workflows map[string]*workflow.Workflows, id *Identity, key string) (def, transition string, guarded bool) {
	route, def, ok := workflowOf(workflows, key)
	if !ok || id.Allowed(key, AccessAdmin) {
		return "", "", false
	}
	// wf/{definition}/{i|h|r|lock}/{instance}[/...]: name the instance's
	// route.
	instance := "{instance}"
	if segs := strings.SplitN(strings.TrimPrefix(key, "wf/"+def+"/"), "/", 3); len(segs) >= 2 && segs[1] != "" &&
		(segs[0] == "i" || segs[0] == "h" || segs[0] == "r" || segs[0] == "lock") {
		instance = url.PathEscape(segs[1])
	}
	return def, "/v1/workflows/" + url.PathEscape(route) + "/" + instance + "/transition", true
}

// workflowWrite is httpAPI.workflowWrite over RESP, for a lease: it
// replies NOPERM, naming the transition route, and returns false.
func (c *respConn) workflowWrite(verb, name string) bool {
	def, transition, guarded := workflowGuarded(c.srv.opts.Workflows, c.ident, name)
	if !guarded {
		return true
	}
	id := "anonymous"
	if c.ident != nil {
		id = c.ident.Name
	}
	c.replyError(fmt.Sprintf("%s identity %q may not %s %q: it belongs to workflow %q, whose records and leases are written only through its transitions (POST %s) or with admin access; nothing was changed",
		resp.CodeNoPerm, id, verb, name, def, transition))
	return false
}

// transitionActor returns the actor and label a transition over HTTP
// records. With auth off (id nil) they are the body's, as given. With auth
// on the actor is the authenticated identity, whatever the body says: the
// body's "actor", when it names someone else, is kept as the label (free
// text beside the identity); a body that gives both a label and another
// actor is refused, since one of them would be lost. The text given is
// refused, like a name, when it holds a character no one could see
// (CheckVisible): it is shown to whoever reads the history.
func transitionActor(id *Identity, actor, label string) (string, string, error) {
	if err := CheckVisible("actor", actor); err != nil {
		return "", "", err
	}
	if err := CheckVisible("label", label); err != nil {
		return "", "", err
	}
	if id == nil {
		return actor, label, nil
	}
	switch {
	case actor == "" || actor == id.Name:
	case label == "":
		label = actor
	default:
		return "", "", &leasehold.InvalidError{Field: "actor", Reason: fmt.Sprintf(
			"the actor recorded is the authenticated identity %q: give your own text as label, not both a label and another actor", id.Name)}
	}
	return id.Name, label, nil
}
