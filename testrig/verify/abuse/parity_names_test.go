package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/wire/resp"
	"github.com/leasehold/leasehold/workflow"
)

// The names and workflow cases of issue 15: names that look like others
// (a zero-width space, a bidi override) are refused on both ports; a
// writer of a workflow's records cannot write an instance straight to
// APPROVED; and the actor a transition records is who authenticated, not
// what the body says.

const (
	namesAdminToken = "r11-names-admin-6c1d0e93"
	namesAliceToken = "r11-names-alice-27f4b8a5"
)

// namesServer is a server in this process with both ports, auth on (an
// admin, and alice, who may write under names/ and wf/approval/) and the
// approval workflow on the engine's records.
type namesServer struct {
	*testServer
	eng  *server.Engine
	resp string
}

func startNamesServer(t *testing.T) *namesServer {
	t.Helper()
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	store := server.StoreOf(eng)
	wf, err := workflow.New(workflow.Definition{
		Name:    "approval",
		Initial: "DRAFT",
		Transitions: map[string][]string{
			"DRAFT":    {"PENDING"},
			"PENDING":  {"APPROVED", "REJECTED"},
			"REJECTED": {"DRAFT"},
		},
	}, workflow.Config{Records: store.(leasehold.RecordStore), Leases: store, Strategy: workflow.Optimistic})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "admin", Token: namesAdminToken, Grants: []server.Grant{{Prefix: "", Access: "admin"}}},
		{Identity: "alice", Token: namesAliceToken, Grants: []server.Grant{
			{Prefix: "names/", Access: "write"}, {Prefix: "wf/approval/", Access: "write"}}},
	}})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		eng.Close()
		t.Fatal(err)
	}
	srv, err := server.NewServer(eng, server.Config{
		HTTPListener: hl, RESPListener: rl, Auth: auth, ShutdownTimeout: 5 * time.Second,
		Workflows: map[string]*workflow.Workflows{"approval": wf},
	})
	if err != nil {
		hl.Close()
		rl.Close()
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	runServer(t, srv)
	ns := &namesServer{
		testServer: &testServer{t: t, addr: srv.HTTPAddr().String(), url: "http://" + srv.HTTPAddr().String(),
			client: newClient(), maxBody: server.DefaultMaxBodyBytes},
		eng: eng, resp: rl.Addr().String(),
	}
	t.Cleanup(ns.client.CloseIdleConnections)
	return ns
}

// call makes one request (path sent verbatim, hdr as name, value pairs)
// and decodes a JSON answer (nil if none).
func (ns *namesServer) call(method, path, token, body string, hdr ...string) (response, map[string]any) {
	ns.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ns.url, rd)
	if err != nil {
		ns.t.Fatal(err)
	}
	req.URL.Opaque = path
	req.Header.Set("Authorization", bearer(token))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := ns.client.Do(req)
	if err != nil {
		ns.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return response{status: res.StatusCode, header: res.Header, body: b}, m
}

// TestR11NamesAndWorkflows: the look-alike names, workflow bypass and
// actor cases of issue 15, one R11 row each.
func TestR11NamesAndWorkflows(t *testing.T) {
	ns := startNamesServer(t)

	t.Run("look-alike-names", func(t *testing.T) {
		c := &tally{}
		rc, err := dialRESP(ns.resp, "127.0.0.1", namesAliceToken)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.nc.Close()
		for _, odd := range []string{"\u200b", "\u202e", "\u2066", "\u00a0", "\ufeff"} {
			name := "names/admin" + odd
			esc := url.PathEscape(name)
			want := fmt.Sprintf("%U", []rune(odd)[0])
			res, body := ns.call("POST", "/v1/leases/"+esc+"/acquire", namesAliceToken, `{"owner":"alice","ttl_ms":60000}`)
			c.ops++
			if res.status != 400 || !strings.Contains(fmt.Sprint(body["detail"]), want) {
				c.errorf(t, "HTTP acquire of %q: %d %s, want 400 naming %s", name, res.status, res.body, want)
			}
			res, body = ns.call("PUT", "/v1/records/"+esc, namesAliceToken, "v", "If-None-Match", "*")
			c.ops++
			if res.status != 400 || !strings.Contains(fmt.Sprint(body["detail"]), want) {
				c.errorf(t, "HTTP record PUT of %q: %d %s, want 400 naming %s", name, res.status, res.body, want)
			}
			v, err := rc.do("LH.ACQUIRE", name, "alice", "60000")
			c.ops++
			if err != nil || v.Type != resp.Error || !strings.Contains(string(v.Str), want) {
				c.errorf(t, "RESP LH.ACQUIRE of %q: %c %q %v, want an error naming %s", name, v.Type, v.Str, err, want)
			}
		}
		// Nothing was created; names of letters in any script still are.
		if recs, err := ns.eng.List(context.Background(), "names/"); err != nil || len(recs) != 0 {
			c.errorf(t, "after the refusals the engine holds %v (%v), want nothing under names/", recs, err)
		}
		if rec, err := ns.eng.GetRecord(context.Background(), "names/admin\u200b"); err == nil {
			c.errorf(t, "the record names/admin+U+200B exists: %+v", rec)
		}
		for _, ok := range []string{"names/admin", "names/café", "names/任务"} {
			res, _ := ns.call("POST", "/v1/leases/"+url.PathEscape(ok)+"/acquire", namesAliceToken, `{"owner":"alice","ttl_ms":60000}`)
			c.ops++
			if res.status != 200 {
				c.errorf(t, "HTTP acquire of %q: %d %s, want 200", ok, res.status, res.body)
			}
		}
		if v, err := rc.do("LH.ACQUIRE", "names/ü", "alice", "60000"); err != nil || v.Type == resp.Error {
			c.errorf(t, "RESP LH.ACQUIRE of names/ü: %q %v, want a grant", v.Str, err)
		}
		c.ops++
		c.row(t, "look-alike-names",
			"U+200B, U+202E, U+2066, U+00A0, U+FEFF names refused on HTTP (leases, records) and RESP naming the character; nothing created; letters of any script granted")
	})

	const inst = "/v1/workflows/approval/doc-1"
	const recPath = "/v1/records/wf/approval/i/doc-1"
	t.Run("workflow-record-bypass", func(t *testing.T) {
		c := &tally{}
		if res, _ := ns.call("POST", inst, namesAliceToken, ""); res.status != 201 {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		res, _ := ns.call("POST", inst+"/transition", namesAliceToken, `{"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"submit-1"}`)
		if res.status != 200 {
			t.Fatalf("submit: %d %s", res.status, res.body)
		}
		// alice may read the instance record...
		res, _ = ns.call("GET", recPath, namesAliceToken, "")
		if res.status != 200 {
			t.Fatalf("GET %s: %d %s", recPath, res.status, res.body)
		}
		etag := res.header.Get("ETag")
		var rec map[string]any
		if err := json.Unmarshal(res.body, &rec); err != nil {
			t.Fatalf("the instance record: %v", err)
		}
		rec["state"] = "APPROVED"
		forged, _ := json.Marshal(rec)
		// ...but not write it, delete it, add to it or write it in a
		// transaction.
		wfProblem := func(what string, res response, body map[string]any) {
			t.Helper()
			c.ops++
			if res.status != 403 || body["type"] != server.ProblemType+"workflow-record" ||
				!strings.Contains(fmt.Sprint(body["detail"]), "POST /v1/workflows/approval/doc-1/transition") {
				c.errorf(t, "%s: %d %s, want 403 workflow-record naming the transition route", what, res.status, res.body)
			}
		}
		res, body := ns.call("PUT", recPath, namesAliceToken, string(forged), "If-Match", etag)
		wfProblem("PUT of the instance to APPROVED", res, body)
		res, body = ns.call("DELETE", recPath, namesAliceToken, "", "If-Match", etag)
		wfProblem("DELETE of the instance", res, body)
		res, body = ns.call("POST", recPath+"/add", namesAliceToken, `{"delta":1}`)
		wfProblem("add to the instance", res, body)
		txn, _ := json.Marshal(map[string]any{"then": []map[string]any{{"key": "wf/approval/i/doc-1", "value": string(forged)}}})
		res, body = ns.call("POST", "/v1/txn", namesAliceToken, string(txn))
		wfProblem("txn writing the instance", res, body)
		hist, _ := json.Marshal(map[string]any{"then": []map[string]any{{"key": "wf/approval/h/doc-1/00000000000000000002", "value": "{}"}}})
		res, body = ns.call("POST", "/v1/txn", namesAliceToken, string(hist))
		wfProblem("txn writing a history entry", res, body)
		// The instance is as the transition left it.
		res, body = ns.call("GET", inst, namesAliceToken, "")
		c.ops++
		if res.status != 200 || body["state"] != "PENDING" || body["version"] != float64(1) {
			c.errorf(t, "after the refused writes the instance is %d %s, want PENDING at version 1", res.status, res.body)
		}
		// The transition route still works.
		res, body = ns.call("POST", inst+"/transition", namesAliceToken, `{"from":"PENDING","to":"APPROVED","actor":"alice","request_id":"approve-1"}`)
		c.ops++
		if res.status != 200 || body["outcome"] != "applied" || body["state"] != "APPROVED" {
			c.errorf(t, "approve through the route: %d %s, want applied", res.status, res.body)
		}
		c.row(t, "workflow-record-bypass",
			"a writer's PUT/DELETE/add/txn of wf/approval/ records answered 403 workflow-record naming the transition route; the instance stayed PENDING; the route then approved it")
	})

	t.Run("workflow-actor", func(t *testing.T) {
		c := &tally{}
		const inst2 = "/v1/workflows/approval/doc-2"
		if res, _ := ns.call("POST", inst2, namesAliceToken, ""); res.status != 201 {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		res, body := ns.call("POST", inst2+"/transition", namesAliceToken, `{"from":"DRAFT","to":"PENDING","actor":"admin","request_id":"as-admin"}`)
		c.ops++
		entry, _ := body["entry"].(map[string]any)
		if res.status != 200 || body["by"] != "alice" || entry["actor"] != "alice" || entry["label"] != "admin" {
			c.errorf(t, "alice's transition with actor \"admin\": %d %s, want by alice, label admin", res.status, res.body)
		}
		res, body = ns.call("GET", inst2+"/requests/as-admin", namesAdminToken, "")
		c.ops++
		if res.status != 200 || body["actor"] != "alice" || body["label"] != "admin" {
			c.errorf(t, "the recorded entry: %d %s, want actor alice, label admin", res.status, res.body)
		}
		res, body = ns.call("GET", inst2, namesAdminToken, "")
		c.ops++
		if res.status != 200 || body["last_actor"] != "alice" {
			c.errorf(t, "the instance: %d %s, want last_actor alice", res.status, res.body)
		}
		c.row(t, "workflow-actor",
			`identity alice sending actor "admin" is recorded as actor alice, label admin (result, lookup, instance)`)
	})
}
