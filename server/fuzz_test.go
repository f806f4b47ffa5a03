package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Fuzz targets of suite R12 for the server's request decoding: names
// arriving from the network (CheckName), and whole HTTP requests fed to
// the handler over an in-memory engine. Properties: no panic, never a 5xx,
// and a refused request changes nothing.

const (
	fzAdmin  = "fz-admin"
	fzTeam   = "fz-team"
	fzReader = "fz-reader"
)

// fzTokens maps the fuzzed credential selector to an Authorization header.
var fzTokens = []string{"", "Bearer " + fzAdmin, "Bearer " + fzTeam, "Bearer " + fzReader, "Bearer nope", "Basic " + fzAdmin}

// fzHandler is the API over a fresh in-memory engine, with auth, metrics,
// and a count of the lease events that change state.
type fzHandler struct {
	eng     *Engine
	api     *httpAPI
	changes atomic.Int64 // granted, renewed, released, forced
}

func newFZHandler(f *testing.F) *fzHandler {
	f.Helper()
	h := &fzHandler{}
	eng, err := OpenEngine(EngineConfig{Hooks: Hooks{Event: func(ev Event) {
		switch ev.Type {
		case EventGranted, EventRenewed, EventReleased, EventForced:
			h.changes.Add(1)
		}
	}}})
	if err != nil {
		f.Fatal(err)
	}
	auth := testAuth(f, []TokenConfig{
		{Identity: "admin", Token: fzAdmin, Grants: []Grant{{Prefix: "", Access: "admin"}}},
		{Identity: "team", Token: fzTeam, Grants: []Grant{{Prefix: "team/", Access: "write"}, {Prefix: "team/ro/", Access: "read"}}},
		{Identity: "reader", Token: fzReader, Grants: []Grant{{Prefix: "", Access: "read"}}},
	})
	h.eng = eng
	h.api = newHTTPAPI(eng, HandlerOptions{Auth: auth, Metrics: NewMetrics(prometheus.NewRegistry())})
	f.Cleanup(func() {
		h.api.cancelDrain()
		eng.Close()
	})
	return h
}

// records returns the engine's versioned records, encoded and sorted.
func (h *fzHandler) records() string {
	e := h.eng
	e.lock()
	defer e.unlock()
	var parts []string
	e.encodeRecords(func(b []byte) { parts = append(parts, string(b)) })
	sort.Strings(parts)
	return strings.Join(parts, "\x00")
}

// serve runs req through the handler. Waits, long-polls and event streams
// are ended after a moment by cancelling the request (the client going
// away).
func (h *fzHandler) serve(req *http.Request) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	defer func() { stop.Stop(); cancel() }()
	rec := httptest.NewRecorder()
	h.api.ServeHTTP(rec, req.WithContext(ctx))
	return rec
}

// check serves req and judges the answer: no 5xx, a well-formed problem
// document for errors, and nothing changed by a refusal. (499, the client
// going away, may undo a grant made as it left: it is not judged.)
func (h *fzHandler) check(t *testing.T, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	changes, records, sessions := h.changes.Load(), h.records(), h.eng.Stats().Sessions
	desc := fmt.Sprintf("%s %q", req.Method, req.RequestURI)
	rec := h.serve(req)
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", desc, rec.Code, rec.Body)
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") && req.Method != http.MethodHead {
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || !strings.HasPrefix(p.Type, ProblemType) {
			t.Fatalf("%s: malformed problem document for %d: %q", desc, rec.Code, rec.Body)
		}
	}
	if rec.Code >= 400 && rec.Code != 499 {
		if d := h.changes.Load() - changes; d != 0 {
			t.Fatalf("%s was refused with %d but changed %d leases", desc, rec.Code, d)
		}
		if h.records() != records {
			t.Fatalf("%s was refused with %d but changed the records", desc, rec.Code)
		}
		if s := h.eng.Stats().Sessions; s > sessions {
			t.Fatalf("%s was refused with %d but opened a session", desc, rec.Code)
		}
	}
	return rec
}

// FuzzHTTPRequest feeds arbitrary requests (method, request target,
// credentials, content type and body, assembled as bytes on the wire and
// parsed by net/http as the server would) to the API.
func FuzzHTTPRequest(f *testing.F) {
	acq := `{"owner":"x","ttl_ms":60000}`
	seeds := []struct {
		method, target string
		who            byte
		ctype, body    string
	}{
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", acq},
		{"POST", "/v1/leases/team/a/acquire", 2, "", `{"owner":"x","ttl_ms":60000,"request_id":"r1","data":"d"}`},
		{"POST", "/v1/leases/team/a/acquire", 1, "application/json", `{"owner":"x","ttl_ms":100,"wait_ms":50}`},
		{"POST", "/v1/leases/team/a/renew", 2, "application/json", `{"owner":"x","token":1,"ttl_ms":60000}`},
		{"POST", "/v1/leases/team/a/release", 2, "application/json", `{"owner":"x","token":1}`},
		{"POST", "/v1/leases/team/a/force-release", 1, "", ""},
		{"GET", "/v1/leases/team/a", 3, "", ""},
		{"HEAD", "/v1/leases/team/a", 3, "", ""},
		{"GET", "/v1/leases?prefix=team/", 2, "", ""},
		{"GET", "/v1/events?prefix=team/", 2, "", ""},
		{"GET", "/v1/events/recent?n=5", 1, "", ""},
		{"POST", "/v1/sessions", 1, "application/json", `{"ttl_ms":60000}`},
		{"POST", "/v1/sessions/abc/keepalive", 1, "", ""},
		{"DELETE", "/v1/sessions/abc", 1, "", ""},
		{"POST", "/v1/semaphores/team/s/acquire", 2, "application/json", `{"owner":"x","ttl_ms":60000,"permits":2}`},
		{"GET", "/v1/elections/team/e/leader", 2, "", ""},
		{"PUT", "/v1/records/team/r", 2, "application/json", `{"value":"v"}`},
		{"GET", "/v1/records/team/r", 2, "", ""},
		{"POST", "/v1/records/team/c/add", 2, "application/json", `{"delta":1}`},
		{"POST", "/v1/txn", 1, "application/json", `{"ops":[{"op":"add","key":"c","delta":1}]}`},
		{"GET", "/v1/stats", 3, "", ""},
		{"GET", "/metrics", 1, "", ""},
		{"GET", "/healthz", 0, "", ""},
		{"GET", "/readyz", 0, "", ""},
		{"POST", "/v1/leases/team/../other/acquire", 2, "application/json", acq},
		{"POST", "/v1/leases/team%252Fa/acquire", 2, "application/json", acq},
		{"POST", "/v1/leases/team%EF%BC%8Fa/acquire", 2, "application/json", acq},
		{"POST", "/v1/leases/team/a%00/acquire", 2, "application/json", acq},
		{"POST", "/v1/leases/team/a/acquire", 4, "application/json", acq},
		{"POST", "/v1/leases/team/a/acquire", 5, "text/plain", acq},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", `{"owner":"x","ttl_ms":1e99}`},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", `{"owner":"x","ttl_ms":60000}{}`},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", `{"owner":"x","ttl_ms":60000,"data":"a","data_base64":"YQ=="}`},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", `{"owner":"x","ttl_ms":-9223372036854775808,"wait_ms":-1}`},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json", `{"owner":"x","ttl_ms":60000,"session":"nope"}`},
		{"OPTIONS", "*", 0, "", ""},
		{"GET", "http://evil.example/v1/leases", 1, "", ""},
		{"POST", "/v1/leases/team/a/acquire", 2, "application/json\r\nOrigin: http://evil.example", acq},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, s.who, s.ctype, []byte(s.body))
	}
	h := newFZHandler(f)
	f.Fuzz(func(t *testing.T, method, target string, who byte, ctype string, body []byte) {
		var raw bytes.Buffer
		fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: leasehold.test\r\n", method, target)
		if a := fzTokens[int(who)%len(fzTokens)]; a != "" {
			fmt.Fprintf(&raw, "Authorization: %s\r\n", a)
		}
		if ctype != "" {
			fmt.Fprintf(&raw, "Content-Type: %s\r\n", ctype)
		}
		fmt.Fprintf(&raw, "Content-Length: %d\r\n\r\n", len(body))
		raw.Write(body)
		req, err := http.ReadRequest(bufio.NewReader(&raw))
		if err != nil {
			return // net/http refuses it before any handler runs
		}
		h.check(t, req)
	})
}

// FuzzHTTPAcquireBody feeds arbitrary bodies to one acquire: it is granted
// (and then the grant names the lease of the path, with a TTL in range)
// or refused without a change.
func FuzzHTTPAcquireBody(f *testing.F) {
	for _, b := range []string{
		`{"owner":"x","ttl_ms":60000}`, `{"owner":"x","ttl_ms":10}`, `{"owner":"x","ttl_ms":9}`, `{"owner":"x","ttl_ms":86400001}`,
		`{"owner":"","ttl_ms":60000}`, `{"owner":"x\u0000","ttl_ms":60000}`, `{"owner":"x","ttl_ms":"60000"}`,
		`{"owner":"x","ttl_ms":60000,"request_id":"r","data":"ünïcode"}`, `{"owner":"x","ttl_ms":60000,"data_base64":"AAE="}`,
		`{"owner":"x","ttl_ms":60000,"data_base64":"!!"}`, `{"owner":"x","ttl_ms":60000,"wait_ms":300001}`,
		`{"owner":"x","ttl_ms":60000,"extra":1}`, `[]`, `null`, ``, `   `, `{`, `{"owner":"x","ttl_ms":60000}garbage`,
		`{"owner":"x","owner":"y","ttl_ms":60000}`, `{"OWNER":"x","TTL_MS":60000}`,
	} {
		f.Add([]byte(b))
	}
	h := newFZHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/leases/fuzz/x/acquire", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+fzAdmin)
		req.Header.Set("Content-Type", "application/json")
		rec := h.check(t, req)
		if rec.Code != 200 {
			return
		}
		var l httpwire.Lease
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			t.Fatalf("grant: %v %q", err, rec.Body)
		}
		ttl := time.Duration(l.TTLMS) * time.Millisecond
		if l.Name != "fuzz/x" || l.Token == 0 || ttl < leasehold.MinTTL || ttl > leasehold.MaxTTL {
			t.Fatalf("grant %+v for body %q", l, body)
		}
		if _, err := h.eng.ForceRelease(context.Background(), "fuzz/x"); err != nil && !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatal(err)
		}
	})
}

// FuzzCheckName: a name the server accepts satisfies its documented
// rules (storekit.ValidateName, no percent-encoded sequence, no "." or
// ".." segment, no empty segment between slashes), a refusal is an
// *InvalidError, and an accepted name reaches the API, percent-encoded in
// the path, as exactly itself.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{
		"a", "team/a", "/a", "a/", "a/../b", "a/./b", "..", ".", "a//b", "%2F", "a%2fb", "%252F", "%zz", "100%",
		"a%", "a%4", "é", "team／a", "a\x00", "a\tb", "\xff", "x/acquire", "a?b#c", "a b", strings.Repeat("a", 257),
	} {
		f.Add(s)
	}
	h := newFZHandler(f)
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckName(name)
		perr := CheckPrefix(name)
		if (err == nil) != (perr == nil) && name != "" {
			t.Fatalf("CheckName %v but CheckPrefix %v", err, perr)
		}
		if name == "" && perr != nil {
			t.Fatalf("CheckPrefix refused the empty prefix: %v", perr)
		}
		if err != nil {
			var inv *leasehold.InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, leasehold.ErrInvalid) || inv.Reason == "" {
				t.Fatalf("refused with %T %v, want an *InvalidError", err, err)
			}
			return
		}
		if verr := storekit.ValidateName(name); verr != nil {
			t.Fatalf("accepted a name ValidateName refuses: %v", verr)
		}
		for i := 0; i+2 < len(name); i++ {
			if name[i] == '%' && ishex(name[i+1]) && ishex(name[i+2]) {
				t.Fatalf("accepted %q, which holds a percent-encoded sequence", name)
			}
		}
		segs := strings.Split(name, "/")
		for i, seg := range segs {
			if seg == "." || seg == ".." || seg == "" && i > 0 && i < len(segs)-1 {
				t.Fatalf("accepted %q, which has a %q segment", name, seg)
			}
		}
		// Through the API: acquire by the escaped path, read it back.
		// A 499 is the harness giving up after 100 ms (a loaded machine):
		// ask again with the same request id, which is idempotent.
		esc := url.PathEscape(name)
		var rec *httptest.ResponseRecorder
		for attempt := 0; attempt < 50 && (rec == nil || rec.Code == 499); attempt++ {
			req := httptest.NewRequest("POST", "/", strings.NewReader(`{"owner":"fz","ttl_ms":60000,"request_id":"fz-check-name"}`))
			req.URL = &url.URL{Path: "/v1/leases/" + name + "/acquire", RawPath: "/v1/leases/" + esc + "/acquire"}
			req.RequestURI = req.URL.RequestURI()
			req.Header.Set("Authorization", "Bearer "+fzAdmin)
			rec = h.check(t, req)
		}
		var l httpwire.Lease
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &l) != nil || l.Name != name {
			t.Fatalf("acquire of accepted name %q (path %q): %d %s", name, esc, rec.Code, rec.Body)
		}
		if _, err := h.eng.ForceRelease(context.Background(), name); err != nil {
			t.Fatalf("force release %q: %v", name, err)
		}
	})
}
