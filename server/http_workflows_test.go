package server

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// newWFServer is the HTTP API over an engine with the approval workflow of
// document 004 (DRAFT → PENDING → APPROVED | REJECTED) on the engine's
// records and leases.
func newWFServer(t *testing.T, strategy workflow.Strategy, auth *Auth) *htServer {
	t.Helper()
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	store := StoreOf(eng)
	wf, err := workflow.New(workflow.Definition{
		Name:    "approval",
		Initial: "DRAFT",
		Transitions: map[string][]string{
			"DRAFT":    {"PENDING"},
			"PENDING":  {"APPROVED", "REJECTED"},
			"REJECTED": {"DRAFT"},
		},
	}, workflow.Config{Records: store.(leasehold.RecordStore), Leases: store, Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	api := newHTTPAPI(eng, HandlerOptions{Auth: auth, Workflows: map[string]*workflow.Workflows{"approval": wf}})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.cancelDrain()
		srv.CloseClientConnections()
		srv.Close()
	})
	return &htServer{t: t, eng: eng, api: api, srv: srv}
}

func TestWorkflowHTTP(t *testing.T) {
	for _, s := range []workflow.Strategy{workflow.Optimistic, workflow.Pessimistic, workflow.Lease, workflow.Adaptive} {
		t.Run(string(s), func(t *testing.T) {
			ts := newWFServer(t, s, nil)
			const base = "/v1/workflows/approval/doc-1"
			r := ts.do("POST", base, "", "")
			ts.want(r, 201, "")
			if r.str("state") != "DRAFT" || r.num("version") != 0 || r.str("instance") != "doc-1" || r.str("workflow") != "approval" {
				t.Fatalf("create: %s", r.body)
			}
			ts.want(ts.do("POST", base, "", ""), 409, "exists")

			submit := `{"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"submit-1"}`
			r = ts.do("POST", base+"/transition", "", submit)
			ts.want(r, 200, "")
			if r.str("outcome") != "applied" || r.str("by") != "alice" || r.str("state") != "PENDING" || r.num("version") != 1 {
				t.Fatalf("submit: %s", r.body)
			}
			// The same request again: repeated, with the original entry.
			r = ts.do("POST", base+"/transition", "", submit)
			ts.want(r, 200, "")
			if r.str("outcome") != "repeated" || r.str("by") != "alice" || r.num("version") != 1 {
				t.Fatalf("repeat: %s", r.body)
			}

			// Twenty administrators approve at once: one applies, every
			// other one is told who did.
			const admins = 20
			var wg sync.WaitGroup
			results := make([]htResp, admins)
			for i := range admins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = ts.do("POST", base+"/transition", "",
						fmt.Sprintf(`{"from":"PENDING","to":"APPROVED","actor":"admin-%d","request_id":"approve-%d"}`, i, i))
				}()
			}
			wg.Wait()
			winner := ""
			for _, r := range results {
				if r.status != 200 {
					t.Fatalf("approve: %d %s", r.status, r.body)
				}
				if r.str("outcome") == "applied" {
					if winner != "" {
						t.Fatalf("applied twice: by %s and %s", winner, r.str("by"))
					}
					winner = r.str("by")
				}
			}
			if winner == "" {
				t.Fatal("nobody applied the approval")
			}
			for _, r := range results {
				if r.str("outcome") == "applied" {
					continue
				}
				if r.str("outcome") != "already-done" || r.str("by") != winner || r.str("state") != "APPROVED" || !strings.Contains(r.str("summary"), "already done by "+winner) {
					t.Errorf("loser told %s", r.body)
				}
			}
			r = ts.do("GET", base, "", "")
			ts.want(r, 200, "")
			if r.str("state") != "APPROVED" || r.num("version") != 2 || r.str("last_actor") != winner {
				t.Fatalf("instance after the approvals: %s", r.body)
			}

			// A transition that does not start from the current state.
			r = ts.do("POST", base+"/transition", "", `{"from":"PENDING","to":"REJECTED","actor":"bob","request_id":"reject-1"}`)
			ts.want(r, 409, "wrong-state")
			if r.str("current_state") != "APPROVED" || r.num("version") != 2 {
				t.Fatalf("wrong state: %s", r.body)
			}
			if last, _ := r.json["last"].(map[string]any); last["actor"] != winner {
				t.Fatalf("wrong state without the last transition: %s", r.body)
			}
			ts.want(ts.do("POST", base+"/transition", "", `{"from":"DRAFT","to":"APPROVED","actor":"bob","request_id":"x"}`), 422, "not-allowed")
			ts.want(ts.do("POST", base+"/transition", "", `{"from":"PENDING","to":"APPROVED","actor":"bob"}`), 400, "invalid")
			ts.want(ts.do("POST", base+"/transition", "", `{"from":"PENDING","to":"APPROVED","actor":"bob","request_id":"y","x":1}`), 400, "invalid")
			ts.want(ts.do("POST", "/v1/workflows/approval/nope/transition", "", `{"from":"DRAFT","to":"PENDING","actor":"a","request_id":"r"}`), 404, "not-found")
			ts.want(ts.do("GET", "/v1/workflows/approval/nope", "", ""), 404, "not-found")
			ts.want(ts.do("GET", "/v1/workflows/other/doc-1", "", ""), 404, "not-found")
			ts.want(ts.do("GET", "/v1/workflows/approval/a%2Fb", "", ""), 400, "invalid")
			ts.want(ts.do("GET", "/v1/workflows/approval/a%252Fb", "", ""), 400, "invalid")
			ts.want(ts.do("GET", "/v1/workflows/approval/doc-1/transition", "", ""), 405, "method-not-allowed")
			ts.want(ts.do("GET", "/v1/workflows/approval", "", ""), 404, "no-route")
		})
	}
}

func TestWorkflowHTTPAuth(t *testing.T) {
	auth := testAuth(t, []TokenConfig{
		{Identity: "approver", Token: "approver-secret", Grants: []Grant{{Prefix: "wf/approval/", Access: "write"}}},
		{Identity: "viewer", Token: "viewer-secret", Grants: []Grant{{Prefix: "wf/", Access: "read"}}},
		{Identity: "team", Token: "team-secret", Grants: []Grant{{Prefix: "team/", Access: "write"}}},
	})
	ts := newWFServer(t, workflow.Optimistic, auth)
	const base = "/v1/workflows/approval/doc-9"
	submit := `{"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"s"}`
	ts.want(ts.do("POST", base, "", ""), 401, "unauthorized")
	ts.want(ts.do("POST", base, "viewer-secret", ""), 403, "forbidden")
	ts.want(ts.do("POST", base, "approver-secret", ""), 201, "")
	ts.want(ts.do("POST", base+"/transition", "team-secret", submit), 403, "forbidden")
	ts.want(ts.do("POST", base+"/transition", "viewer-secret", submit), 403, "forbidden")
	ts.want(ts.do("GET", base, "team-secret", ""), 403, "forbidden")
	r := ts.do("GET", base, "viewer-secret", "")
	ts.want(r, 200, "")
	if r.str("state") != "DRAFT" {
		t.Fatalf("refused transitions changed the instance: %s", r.body)
	}
	r = ts.do("POST", base+"/transition", "approver-secret", submit)
	ts.want(r, 200, "")
	if r.str("outcome") != "applied" {
		t.Fatalf("transition: %s", r.body)
	}
}

// TestWorkflowHTTPRequests: a request id resolves over HTTP — looked up
// (the entry, or 404), and reused by another actor or for another
// transition it is refused (409 request-reused) with the entry it applied.
// Nothing changes.
func TestWorkflowHTTPRequests(t *testing.T) {
	for _, s := range []workflow.Strategy{workflow.Optimistic, workflow.Pessimistic, workflow.Lease, workflow.Adaptive} {
		t.Run(string(s), func(t *testing.T) {
			ts := newWFServer(t, s, nil)
			const base = "/v1/workflows/approval/doc-2"
			ts.want(ts.do("POST", base, "", ""), 201, "")
			submit := `{"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"submit-2"}`
			ts.want(ts.do("POST", base+"/transition", "", submit), 200, "")
			r := ts.do("GET", base+"/requests/submit-2", "", "")
			ts.want(r, 200, "")
			if r.str("actor") != "alice" || r.num("version") != 1 || r.str("to") != "PENDING" || r.str("request_id") != "submit-2" {
				t.Fatalf("lookup: %s", r.body)
			}
			ts.want(ts.do("GET", base+"/requests/never", "", ""), 404, "not-found")
			ts.want(ts.do("GET", "/v1/workflows/approval/nope/requests/submit-2", "", ""), 404, "not-found")
			ts.want(ts.do("GET", base+"/requests/a%00b", "", ""), 400, "invalid")
			ts.want(ts.do("POST", base+"/requests/submit-2", "", ""), 405, "method-not-allowed")
			for _, body := range []string{
				`{"from":"DRAFT","to":"PENDING","actor":"mallory","request_id":"submit-2"}`,  // another actor
				`{"from":"PENDING","to":"APPROVED","actor":"alice","request_id":"submit-2"}`, // another transition
			} {
				r = ts.do("POST", base+"/transition", "", body)
				ts.want(r, 409, "request-reused")
				if e, _ := r.json["entry"].(map[string]any); e["actor"] != "alice" || e["version"] != float64(1) || r.str("request_id") != "submit-2" {
					t.Fatalf("reused: %s", r.body)
				}
			}
			// A wrong-state refusal names the state, version and entry as a
			// transition's result does (and current_state, last as before).
			r = ts.do("POST", base+"/transition", "", `{"from":"REJECTED","to":"DRAFT","actor":"bob","request_id":"redraft-3"}`)
			ts.want(r, 409, "wrong-state")
			if e, _ := r.json["entry"].(map[string]any); r.str("state") != "PENDING" || r.str("current_state") != "PENDING" ||
				r.num("version") != 1 || r.str("by") != "alice" || e["request_id"] != "submit-2" || r.json["last"] == nil {
				t.Fatalf("wrong state: %s", r.body)
			}
			r = ts.do("GET", base, "", "")
			if r.str("state") != "PENDING" || r.num("version") != 1 {
				t.Fatalf("refusals changed the instance: %s", r.body)
			}
		})
	}
}
