package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// newGuardServer serves the approval workflow with strategy to a writer
// of wf/ (token writer-secret) and an admin (root-secret).
func newGuardServer(t *testing.T, strategy workflow.Strategy) *htServer {
	t.Helper()
	auth := testAuth(t, []TokenConfig{
		{Identity: "writer", Token: "writer-secret", Grants: []Grant{{Prefix: "wf/", Access: "write"}}},
		{Identity: "root", Token: "root-secret", Grants: []Grant{{Prefix: "", Access: "admin"}}},
	})
	return newWFServer(t, strategy, auth)
}

// TestWorkflowRecordGuard: the records of a served workflow are written
// only through transitions — a writer's PUT, DELETE, add and txn on keys
// under wf/approval/ are 403 workflow-record naming the route, and change
// nothing; an admin may write them; keys of other definitions and other
// records are not affected; reads are unchanged.
func TestWorkflowRecordGuard(t *testing.T) {
	ts := newGuardServer(t, workflow.Optimistic)
	const base = "/v1/workflows/approval/doc-1"
	ts.want(ts.do("POST", base, "writer-secret", ""), 201, "")
	ts.want(ts.do("POST", base+"/transition", "writer-secret", `{"from":"DRAFT","to":"PENDING","request_id":"s"}`), 200, "")
	r := ts.do("GET", "/v1/records/wf/approval/i/doc-1", "writer-secret", "")
	ts.want(r, 200, "")
	etag := r.header.Get("ETag")
	forged := strings.Replace(string(r.body), `"PENDING"`, `"APPROVED"`, 1)

	refused := func(what string, r htResp, route string) {
		t.Helper()
		ts.want(r, 403, "workflow-record")
		if !strings.Contains(r.str("detail"), "POST "+route) || r.str("transition") != route || r.str("workflow") != "approval" {
			t.Errorf("%s: %s, want the detail and transition to name %s", what, r.body, route)
		}
	}
	const route = "/v1/workflows/approval/doc-1/transition"
	refused("PUT", ts.do("PUT", "/v1/records/wf/approval/i/doc-1", "writer-secret", forged, "If-Match", etag), route)
	refused("DELETE", ts.do("DELETE", "/v1/records/wf/approval/i/doc-1", "writer-secret", "", "If-Match", etag), route)
	refused("add", ts.do("POST", "/v1/records/wf/approval/i/doc-1/add", "writer-secret", `{"delta":1}`), route)
	refused("history PUT", ts.do("PUT", "/v1/records/wf/approval/h/doc-1/00000000000000000002", "writer-secret", "{}", "If-None-Match", "*"), route)
	refused("request PUT", ts.do("PUT", "/v1/records/wf/approval/r/doc-1/x", "writer-secret", "{}", "If-None-Match", "*"), route)
	refused("other key", ts.do("PUT", "/v1/records/wf/approval/zzz", "writer-secret", "{}", "If-None-Match", "*"),
		"/v1/workflows/approval/{instance}/transition")
	refused("txn", ts.do("POST", "/v1/txn", "writer-secret",
		`{"then":[{"key":"wf/other/x","value":"1"},{"key":"wf/approval/i/doc-1","value":"{}"}]}`), route)
	// Nothing changed: not the instance, not the txn's other key.
	r = ts.do("GET", base, "writer-secret", "")
	if r.str("state") != "PENDING" || r.num("version") != 1 {
		t.Fatalf("after the refusals: %s", r.body)
	}
	ts.want(ts.do("GET", "/v1/records/wf/other/x", "writer-secret", ""), 404, "not-found")
	// Records of definitions this server does not serve are ordinary.
	ts.want(ts.do("PUT", "/v1/records/wf/other/x", "writer-secret", "1", "If-None-Match", "*"), 201, "")
	ts.want(ts.do("PUT", "/v1/records/wf/approvals/x", "writer-secret", "1", "If-None-Match", "*"), 201, "")
	// An admin may repair a record directly.
	ts.want(ts.do("PUT", "/v1/records/wf/approval/i/doc-1", "root-secret", string(ts.do("GET", "/v1/records/wf/approval/i/doc-1", "root-secret", "").body), "If-Match", etag), 200, "")

	// With auth off every caller is an admin: nothing is refused.
	open := newWFServer(t, workflow.Optimistic, nil)
	ts.want(open.do("PUT", "/v1/records/wf/approval/i/doc-9", "", `{"state":"APPROVED"}`, "If-None-Match", "*"), 201, "")
}

// TestTransitionActor: with auth on the actor recorded is the identity and
// the body's other text becomes the label; with auth off both are as given.
func TestTransitionActor(t *testing.T) {
	alice := &Identity{Name: "alice"}
	for _, tc := range []struct {
		id                   *Identity
		actor, label         string
		wantActor, wantLabel string
		invalid              bool
	}{
		{nil, "admin", "", "admin", "", false},
		{nil, "bob", "from the CLI", "bob", "from the CLI", false},
		{alice, "", "", "alice", "", false},
		{alice, "alice", "", "alice", "", false},
		{alice, "admin", "", "alice", "admin", false},
		{alice, "alice", "night shift", "alice", "night shift", false},
		{alice, "", "night shift", "alice", "night shift", false},
		{alice, "admin", "night shift", "", "", true},
		{nil, "adm\u202ein", "", "", "", true},
		{alice, "", "night\u200bshift", "", "", true},
	} {
		actor, label, err := transitionActor(tc.id, tc.actor, tc.label)
		var inv *leasehold.InvalidError
		switch {
		case tc.invalid && !errors.As(err, &inv):
			t.Errorf("%v %q %q: %v, want an *InvalidError", tc.id, tc.actor, tc.label, err)
		case !tc.invalid && (err != nil || actor != tc.wantActor || label != tc.wantLabel):
			t.Errorf("%v %q %q: %q %q %v, want %q %q", tc.id, tc.actor, tc.label, actor, label, err, tc.wantActor, tc.wantLabel)
		}
	}
}

// TestWorkflowHTTPActor: over HTTP with auth on, the entry's actor is the
// token's identity and the body's actor its label.
func TestWorkflowHTTPActor(t *testing.T) {
	auth := testAuth(t, []TokenConfig{
		{Identity: "alice", Token: "alice-secret", Grants: []Grant{{Prefix: "wf/approval/", Access: "write"}}},
	})
	ts := newWFServer(t, workflow.Optimistic, auth)
	const base = "/v1/workflows/approval/doc-3"
	ts.want(ts.do("POST", base, "alice-secret", ""), 201, "")
	r := ts.do("POST", base+"/transition", "alice-secret", `{"from":"DRAFT","to":"PENDING","actor":"admin","request_id":"s"}`)
	ts.want(r, 200, "")
	e, _ := r.json["entry"].(map[string]any)
	if r.str("by") != "alice" || e["actor"] != "alice" || e["label"] != "admin" {
		t.Fatalf("transition: %s, want by alice, label admin", r.body)
	}
	ts.want(ts.do("POST", base+"/transition", "alice-secret", `{"from":"PENDING","to":"APPROVED","actor":"admin","label":"x","request_id":"a"}`), 400, "invalid")
	r = ts.do("GET", base, "alice-secret", "")
	if r.str("last_actor") != "alice" || r.str("state") != "PENDING" {
		t.Fatalf("instance: %s", r.body)
	}
}

// TestWorkflowLeaseGuard: the lock lease of a served workflow's instance
// (wf/approval/lock/doc-1) cannot be acquired, renewed or released by a
// writer over HTTP or RESP (403 workflow-record / NOPERM naming the
// transition route), so a writer cannot stall lock-strategy transitions;
// an admin may, and leases elsewhere are not affected.
func TestWorkflowLeaseGuard(t *testing.T) {
	ts := newGuardServer(t, workflow.Lease)
	const lock, route = "wf/approval/lock/doc-1", "/v1/workflows/approval/doc-1/transition"
	ts.want(ts.do("POST", "/v1/workflows/approval/doc-1", "writer-secret", ""), 201, "")
	for _, op := range []struct{ path, body string }{
		{"/v1/leases/" + lock + "/acquire", `{"owner":"w","ttl_ms":60000}`},
		{"/v1/leases/" + lock + "/renew", `{"owner":"w","token":1,"ttl_ms":60000}`},
		{"/v1/leases/" + lock + "/release", `{"owner":"w","token":1}`},
		{"/v1/semaphores/wf/approval/lock/doc-1/acquire", `{"owner":"w","permits":1,"ttl_ms":60000}`},
	} {
		r := ts.do("POST", op.path, "writer-secret", op.body)
		ts.want(r, 403, "workflow-record")
		if r.str("transition") != route && !strings.HasPrefix(op.path, "/v1/semaphores/") {
			t.Errorf("POST %s: %s, want the transition %s", op.path, r.body, route)
		}
	}
	ts.want(ts.do("GET", "/v1/leases/"+lock, "writer-secret", ""), 404, "not-found")
	// The transitions still take the lock; leases elsewhere are ordinary.
	ts.want(ts.do("POST", route, "writer-secret", `{"from":"DRAFT","to":"PENDING","request_id":"s"}`), 200, "")
	ts.want(ts.do("POST", "/v1/leases/wf/other/lock/x/acquire", "writer-secret", `{"owner":"w","ttl_ms":60000}`), 200, "")
	// An admin may.
	a := ts.do("POST", "/v1/leases/"+lock+"/acquire", "root-secret", `{"owner":"root","ttl_ms":60000}`)
	ts.want(a, 200, "")
	ts.want(ts.do("POST", "/v1/leases/"+lock+"/release", "root-secret", fmt.Sprintf(`{"owner":"root","token":%v}`, a.num("token"))), 204, "")

	// RESP, over the same engine and workflows.
	_, addr := rtServe(t, ts.eng, RESPOptions{Auth: ts.api.auth, Workflows: ts.api.workflows})
	w, root := rtDial(t, addr), rtDial(t, addr)
	rtExpect(t, "AUTH", w.do("AUTH", "writer-secret"), "+OK")
	rtExpect(t, "root AUTH", root.do("AUTH", "root-secret"), "+OK")
	want := `-NOPERM identity "writer" may not `
	for _, cmd := range [][]string{
		{"LH.ACQUIRE", lock, "w", "60000"},
		{"LH.RENEW", lock, "w", "1", "60000"},
		{"LH.RELEASE", lock, "w", "1"},
	} {
		got := w.do(cmd...)
		rtExpect(t, cmd[0], got, want)
		if !strings.Contains(got, "POST "+route) {
			t.Errorf("%s = %q, want it to name %s", cmd[0], got, route)
		}
	}
	rtExpect(t, "GET", w.do("LH.GET", lock), "$nil")
	rtExpect(t, "ACQUIRE elsewhere", w.do("LH.ACQUIRE", "wf/other/lock/y", "w", "60000"), "[:")
	g := rtFields(root.do("LH.ACQUIRE", lock, "root", "60000"))
	rtExpect(t, "root RELEASE", root.do("LH.RELEASE", lock, "root", strings.TrimPrefix(g[0], ":")), "+OK")
}
