package server

import (
	"net/http"
	"strings"
)

// The HTTP API is one table: every route is a row that says its methods,
// its path pattern, the operation it is (op: the operations the RESP API
// has too are named alike), the access it needs and what that access is
// checked on (scope), and its handler. One preamble (httpAPI.serveRoute)
// does for every row, in this order: the method check (405),
// authentication and the rate limit (401, 429), the path's names, keys,
// ids and the ?prefix= / ?name= of the query (400), the permission check
// (403) and the body's size limit (413); a handler runs only with
// arguments that passed, in httpArgs. Names a handler finds in a body (a
// transaction's keys, a semaphore's permits beyond the first) it checks
// itself, with the same functions. docs/http-api.md lists the routes.

// httpScope says what a route's access is checked on.
type httpScope int

const (
	httpPublic   httpScope = iota // nothing, and no authentication: health, readiness, the dashboard's files
	httpOnName                    // the name or key in the path (httpArgs.name), or the route's on()
	httpOnPrefix                  // ?prefix= (httpArgs.prefix, "" if absent)
	httpOnEvents                  // ?name= (exact) or ?prefix=
	httpOnAny                     // some grant: the identity has the access on at least one prefix
	httpOnBody                    // names in the body: some grant here, each name by the handler
	httpOnAll                     // the whole name space: a grant on the prefix ""
)

// httpRoute is one row of the route table.
type httpRoute struct {
	methods []string
	// pattern is the path, with parameters in braces. {name}, {key} and
	// {file} may span segments (names contain '/'; at most one of them
	// per pattern); the others are one non-empty segment. The pattern is
	// also the route's label in metrics and logs.
	pattern string
	op      string
	access  Access
	scope   httpScope
	// on, with httpOnName, maps the checked arguments to the name the
	// access is checked on; nil: httpArgs.name.
	on func(h *httpAPI, a *httpArgs) string
	// dash rows are served only with a dashboard (HandlerOptions.Dashboard).
	dash bool
	// existing rows work on names that may exist (read, renew, release,
	// delete, list, watch): their {name}, {key}, ?prefix= and ?name= are
	// checked without the visible-character rule (CheckExistingName), so
	// that a name stored before that rule, or behind the server, can
	// still be read and freed. Rows that may create a name check it with
	// CheckName.
	existing bool
	// value: the body is a record's value, limited to
	// min(MaxBodyBytes, leasehold.MaxValueLen) bytes; otherwise bodies are
	// JSON limited to MaxBodyBytes.
	value  bool
	handle func(h *httpAPI, q *httpReq, a *httpArgs)

	segs  []string // the pattern split at '/'
	multi int      // the index of the segment parameter that spans segments, or -1
}

// httpArgs are a route's checked arguments, as its handler gets them.
type httpArgs struct {
	// name is the decoded and checked {name} or {key} of the path, or the
	// ?name= of an event route.
	name string
	// prefix is the checked ?prefix= of httpOnPrefix and httpOnEvents
	// routes; exact says an event route was given ?name= instead.
	prefix string
	exact  bool
	// params are the other path parameters, decoded (and checked: {id},
	// {definition}, {instance}).
	params map[string]string
}

var (
	httpRead   = []string{http.MethodGet, http.MethodHead}
	httpPost   = []string{http.MethodPost}
	httpPut    = []string{http.MethodPut}
	httpDelete = []string{http.MethodDelete}
)

// httpByName adapts a handler of one name or key.
func httpByName(f func(h *httpAPI, q *httpReq, name string)) func(*httpAPI, *httpReq, *httpArgs) {
	return func(h *httpAPI, q *httpReq, a *httpArgs) { f(h, q, a.name) }
}

// httpWorkflowKey is the record key of a workflow instance, on which the
// workflow routes' access is checked: grants on records govern workflows.
func httpWorkflowKey(h *httpAPI, a *httpArgs) string {
	def := a.params["definition"]
	if wf := h.workflows[def]; wf != nil {
		def = wf.Definition().Name
	}
	return "wf/" + def + "/i/" + a.params["instance"]
}

// httpRoutes is the route table. Where two patterns match a path, the
// first row whose methods include the request's wins; a path matched only
// by rows of other methods gets 405 with their methods.
var httpRoutes = httpTable([]*httpRoute{
	// Health and the dashboard.
	{methods: httpRead, pattern: "/healthz", op: "health", handle: (*httpAPI).healthz},
	{methods: httpRead, pattern: "/readyz", op: "ready", handle: (*httpAPI).readyz},
	{methods: httpRead, pattern: "/", op: "dashboard", dash: true, handle: (*httpAPI).dashRedirect},
	{methods: httpRead, pattern: "/dashboard", op: "dashboard", dash: true, handle: (*httpAPI).dashRedirect},
	{methods: httpRead, pattern: "/dashboard/{file}", op: "dashboard", dash: true, handle: (*httpAPI).dashboard},

	// Activity of the whole name space.
	{methods: httpRead, pattern: "/metrics", op: "metrics", access: AccessRead, scope: httpOnAll, handle: (*httpAPI).serveMetrics},
	{methods: httpRead, pattern: "/v1/stats", op: "stats", access: AccessRead, scope: httpOnAll, handle: (*httpAPI).stats},

	// Leases.
	{methods: httpRead, pattern: "/v1/leases", op: "lease.list", existing: true, access: AccessRead, scope: httpOnPrefix, handle: (*httpAPI).list},
	{methods: httpPost, pattern: "/v1/leases/{name}/acquire", op: "lease.acquire", access: AccessWrite, scope: httpOnName, handle: httpByName((*httpAPI).acquire)},
	{methods: httpPost, pattern: "/v1/leases/{name}/renew", op: "lease.renew", existing: true, access: AccessWrite, scope: httpOnName, handle: httpByName((*httpAPI).renew)},
	{methods: httpPost, pattern: "/v1/leases/{name}/release", op: "lease.release", existing: true, access: AccessWrite, scope: httpOnName, handle: httpByName((*httpAPI).release)},
	{methods: httpPost, pattern: "/v1/leases/{name}/force-release", op: "lease.forcerelease", existing: true, access: AccessAdmin, scope: httpOnName, handle: httpByName((*httpAPI).forceRelease)},
	{methods: httpRead, pattern: "/v1/leases/{name}", op: "lease.get", existing: true, access: AccessRead, scope: httpOnName, handle: httpByName((*httpAPI).get)},

	// Semaphores (access on permit 0; the handler checks the others) and
	// elections.
	{methods: httpPost, pattern: "/v1/semaphores/{name}/acquire", op: "semaphore.acquire", access: AccessWrite, scope: httpOnName,
		on: func(_ *httpAPI, a *httpArgs) string { return httpPermitName(a.name, 0) }, handle: (*httpAPI).semaphore},
	{methods: httpRead, pattern: "/v1/elections/{name}/leader", op: "election.leader", existing: true, access: AccessRead, scope: httpOnName, handle: httpByName((*httpAPI).election)},

	// Events.
	{methods: []string{http.MethodGet}, pattern: "/v1/events", op: "events.subscribe", existing: true, access: AccessRead, scope: httpOnEvents, handle: (*httpAPI).events},
	{methods: httpRead, pattern: "/v1/events/recent", op: "events.recent", existing: true, access: AccessRead, scope: httpOnEvents, handle: (*httpAPI).recent},

	// Sessions: no name to check, so write access to some prefix (as on
	// RESP).
	{methods: httpPost, pattern: "/v1/sessions", op: "session.open", access: AccessWrite, scope: httpOnAny, handle: (*httpAPI).openSession},
	{methods: httpPost, pattern: "/v1/sessions/{id}/keepalive", op: "session.keepalive", access: AccessWrite, scope: httpOnAny, handle: (*httpAPI).keepAlive},
	{methods: httpDelete, pattern: "/v1/sessions/{id}", op: "session.close", access: AccessWrite, scope: httpOnAny, handle: (*httpAPI).closeSession},

	// Records (http_records.go).
	{methods: httpPost, pattern: "/v1/records/{key}/add", op: "record.add", access: AccessWrite, scope: httpOnName, handle: httpByName((*httpAPI).addRecord)},
	{methods: httpRead, pattern: "/v1/records/{key}", op: "record.get", existing: true, access: AccessRead, scope: httpOnName, handle: httpByName((*httpAPI).getRecord)},
	{methods: httpPut, pattern: "/v1/records/{key}", op: "record.put", access: AccessWrite, scope: httpOnName, value: true, handle: httpByName((*httpAPI).putRecord)},
	{methods: httpDelete, pattern: "/v1/records/{key}", op: "record.delete", existing: true, access: AccessWrite, scope: httpOnName, handle: httpByName((*httpAPI).deleteRecord)},
	{methods: httpPost, pattern: "/v1/txn", op: "record.txn", access: AccessWrite, scope: httpOnBody, handle: func(h *httpAPI, q *httpReq, _ *httpArgs) { h.txn(q) }},

	// Workflows (http_workflows.go): access on the instance's record key.
	{methods: httpPost, pattern: "/v1/workflows/{definition}/{instance}/transition", op: "workflow.transition", access: AccessWrite, scope: httpOnName, on: httpWorkflowKey, handle: (*httpAPI).workflowRoute},
	{methods: httpRead, pattern: "/v1/workflows/{definition}/{instance}/requests/{request_id}", op: "workflow.lookup", access: AccessRead, scope: httpOnName, on: httpWorkflowKey, handle: (*httpAPI).workflowRoute},
	{methods: httpRead, pattern: "/v1/workflows/{definition}/{instance}", op: "workflow.get", access: AccessRead, scope: httpOnName, on: httpWorkflowKey, handle: (*httpAPI).workflowRoute},
	{methods: httpPost, pattern: "/v1/workflows/{definition}/{instance}", op: "workflow.create", access: AccessWrite, scope: httpOnName, on: httpWorkflowKey, handle: (*httpAPI).workflowRoute},
})

// httpMultiParams are the parameters that may span segments.
var httpMultiParams = map[string]bool{"name": true, "key": true, "file": true}

// httpTable parses the patterns and checks the rows' consistency.
func httpTable(rows []*httpRoute) []*httpRoute {
	for _, r := range rows {
		bad := func(why string) { panic("http: route table row " + r.pattern + ": " + why) }
		if r.op == "" || r.handle == nil || len(r.methods) == 0 || !strings.HasPrefix(r.pattern, "/") {
			bad("no op, handler, method or absolute pattern")
		}
		if (r.scope == httpPublic) != (r.access == AccessNone) {
			bad("a public row needs no access and every other row some")
		}
		r.segs = strings.Split(r.pattern, "/")
		r.multi = -1
		hasName := false
		for i, s := range r.segs {
			p, ok := httpParamName(s)
			if !ok {
				continue
			}
			if p == "name" || p == "key" {
				hasName = true
			}
			if httpMultiParams[p] {
				if r.multi >= 0 {
					bad("two parameters span segments")
				}
				r.multi = i
			}
		}
		if r.scope == httpOnName && !hasName && r.on == nil {
			bad("httpOnName without {name}, {key} or on")
		}
	}
	return rows
}

// httpParamName returns the name of a pattern segment "{p}".
func httpParamName(seg string) (string, bool) {
	if len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

// match matches the escaped path; it returns the path parameters, still
// escaped.
func (r *httpRoute) match(path string) (map[string]string, bool) {
	ps := strings.Split(path, "/")
	n := len(r.segs)
	if (r.multi < 0 && len(ps) != n) || len(ps) < n {
		return nil, false
	}
	var vals map[string]string
	one := func(pat, s string) bool {
		p, ok := httpParamName(pat)
		if !ok {
			return pat == s
		}
		if s == "" {
			return false
		}
		if vals == nil {
			vals = map[string]string{}
		}
		vals[p] = s
		return true
	}
	head := n
	if r.multi >= 0 {
		head = r.multi
	}
	for i := 0; i < head; i++ {
		if !one(r.segs[i], ps[i]) {
			return nil, false
		}
	}
	if r.multi >= 0 {
		tail := n - r.multi - 1
		for j := 1; j <= tail; j++ {
			if !one(r.segs[n-j], ps[len(ps)-j]) {
				return nil, false
			}
		}
		if vals == nil {
			vals = map[string]string{}
		}
		p, _ := httpParamName(r.segs[r.multi])
		vals[p] = strings.Join(ps[r.multi:len(ps)-tail], "/")
	}
	return vals, true
}

func (r *httpRoute) allows(method string) bool {
	for _, m := range r.methods {
		if m == method {
			return true
		}
	}
	return false
}

// httpOps maps every operation of the HTTP API to the access it needs.
// Operations both APIs have are named alike and need the same access
// (respOps is the RESP API's).
func httpOps() map[string]Access {
	return opsOf("http", httpRoutes, func(r *httpRoute) (string, Access) { return r.op, r.access })
}

// opsOf maps the operation of every row of an API table to the access it
// needs; one operation needing two accesses is a bug in the table.
func opsOf[R any](api string, rows []R, op func(R) (string, Access)) map[string]Access {
	m := map[string]Access{}
	for _, r := range rows {
		name, access := op(r)
		if a, ok := m[name]; ok && a != access {
			panic(api + ": operation " + name + " needs two accesses")
		}
		m[name] = access
	}
	return m
}
