package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// htServer is the HTTP API over an in-memory Engine (the handler's
// behaviour does not depend on durability).
type htServer struct {
	t   *testing.T
	eng *Engine
	api *httpAPI
	srv *httptest.Server
	reg *prometheus.Registry
}

func newHTServer(t *testing.T, opts HandlerOptions) *htServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(reg)
	}
	eng, err := OpenEngine(EngineConfig{Hooks: opts.Metrics.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	api := newHTTPAPI(eng, opts)
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.cancelDrain()
		srv.CloseClientConnections()
		srv.Close()
		eng.Close()
	})
	return &htServer{t: t, eng: eng, api: api, srv: srv, reg: reg}
}

type htResp struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (r htResp) str(key string) string {
	v, _ := r.json[key].(string)
	return v
}

func (r htResp) num(key string) float64 {
	v, _ := r.json[key].(float64)
	return v
}

func (r htResp) problemType() string {
	return strings.TrimPrefix(r.str("type"), ProblemType)
}

// do sends a request with the raw path (nothing cleaned or re-encoded) and
// an optional bearer token and JSON body.
func (ts *htServer) do(method, path, token, body string, hdr ...string) htResp {
	ts.t.Helper()
	return ts.doCtx(context.Background(), method, path, token, body, hdr...)
}

func (ts *htServer) doCtx(ctx context.Context, method, path, token, body string, hdr ...string) htResp {
	ts.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.srv.URL, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.URL.Opaque = path // sent verbatim as the request target
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		return htResp{status: -1, body: []byte(err.Error())}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := htResp{status: res.StatusCode, header: res.Header, body: b}
	ct := res.Header.Get("Content-Type")
	if strings.Contains(ct, "json") && len(b) > 0 {
		if err := json.Unmarshal(b, &r.json); err != nil {
			ts.t.Fatalf("%s %s: bad JSON %q: %v", method, path, b, err)
		}
	}
	if strings.Contains(ct, "problem+json") {
		if int(r.num("status")) != r.status || !strings.HasPrefix(r.str("type"), ProblemType) || r.str("title") == "" {
			ts.t.Errorf("%s %s: malformed problem %s", method, path, b)
		}
	}
	return r
}

func (ts *htServer) want(r htResp, status int, problem string) {
	ts.t.Helper()
	if r.status != status || (problem != "" && r.problemType() != problem) {
		ts.t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, problem)
	}
}

// names lists every live lease straight from the engine.
func (ts *htServer) names() []string {
	recs, err := ts.eng.List(context.Background(), "")
	if err != nil {
		ts.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Name)
	}
	return out
}

func TestLeaseLifecycle(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	r := ts.do("POST", "/v1/leases/jobs/nightly/acquire", "", `{"owner":"a","ttl_ms":60000,"data":"hello","request_id":"r1"}`)
	ts.want(r, 200, "")
	tok := r.num("token")
	if r.str("name") != "jobs/nightly" || r.str("owner") != "a" || tok < 1 || r.num("ttl_ms") != 60000 ||
		r.num("remaining_ms") <= 0 || r.str("data") != "hello" {
		t.Fatalf("acquire answer %s", r.body)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.str("acquired")); err != nil {
		t.Errorf("acquired %q: %v", r.str("acquired"), err)
	}
	// A retry with the same request id gets the same grant.
	r = ts.do("POST", "/v1/leases/jobs/nightly/acquire", "", `{"owner":"a","ttl_ms":60000,"request_id":"r1"}`)
	ts.want(r, 200, "")
	if r.num("token") != tok {
		t.Errorf("retried acquire token %v, want %v", r.num("token"), tok)
	}
	// Someone else: 409 with the holder.
	r = ts.do("POST", "/v1/leases/jobs/nightly/acquire", "", `{"owner":"b","ttl_ms":60000}`)
	ts.want(r, 409, "held")
	h, _ := r.json["holder"].(map[string]any)
	if h["owner"] != "a" || h["token"] != tok || h["remaining_ms"].(float64) <= 0 || h["acquired"] == "" {
		t.Errorf("holder %v", h)
	}
	// GET: the lease and its (empty) waiters.
	r = ts.do("GET", "/v1/leases/jobs/nightly", "", "")
	ts.want(r, 200, "")
	if r.str("owner") != "a" || r.num("token") != tok {
		t.Errorf("get %s", r.body)
	}
	if w, ok := r.json["waiters"].([]any); !ok || len(w) != 0 {
		t.Errorf("waiters %v", r.json["waiters"])
	}
	// Renew.
	r = ts.do("POST", "/v1/leases/jobs/nightly/renew", "", fmt.Sprintf(`{"owner":"a","token":%v,"ttl_ms":30000}`, tok))
	ts.want(r, 200, "")
	if r.str("name") != "jobs/nightly" || r.num("token") != tok || r.num("ttl_ms") != 30000 {
		t.Errorf("renew %s", r.body)
	}
	ts.want(ts.do("POST", "/v1/leases/jobs/nightly/renew", "", fmt.Sprintf(`{"owner":"b","token":%v,"ttl_ms":30000}`, tok)), 409, "not-held")
	ts.want(ts.do("POST", "/v1/leases/jobs/nightly/release", "", fmt.Sprintf(`{"owner":"a","token":%v}`, tok+1)), 409, "not-held")
	// List.
	ts.want(ts.do("POST", "/v1/leases/jobs/other/acquire", "", `{"owner":"c","ttl_ms":60000,"data_base64":"AP8="}`), 200, "")
	ts.want(ts.do("POST", "/v1/leases/misc/acquire", "", `{"owner":"c","ttl_ms":60000}`), 200, "")
	r = ts.do("GET", "/v1/leases?prefix=jobs/", "", "")
	ts.want(r, 200, "")
	ls, _ := r.json["leases"].([]any)
	if len(ls) != 2 || ls[0].(map[string]any)["name"] != "jobs/nightly" || ls[1].(map[string]any)["data_base64"] != "AP8=" {
		t.Errorf("list %s", r.body)
	}
	// Release (twice: idempotent), then the lease is gone.
	for i := 0; i < 2; i++ {
		ts.want(ts.do("POST", "/v1/leases/jobs/nightly/release", "", fmt.Sprintf(`{"owner":"a","token":%v}`, tok)), 204, "")
	}
	ts.want(ts.do("GET", "/v1/leases/jobs/nightly", "", ""), 404, "not-found")
	// HEAD works like GET without a body.
	r = ts.do("HEAD", "/v1/leases/misc", "", "")
	if r.status != 200 || len(r.body) != 0 {
		t.Errorf("HEAD: %d %q", r.status, r.body)
	}
}

func TestProblems(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{MaxBodyBytes: 1024})
	cases := []struct {
		method, path, body string
		hdr                []string
		status             int
		typ, field         string
	}{
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"bogus":1}`, nil, 400, "invalid", "bogus"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a",`, nil, 400, "invalid", "body"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":"x"}`, nil, 400, "invalid", "ttl_ms"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000} {}`, nil, 400, "invalid", "body"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":1}`, nil, 400, "invalid", "ttl"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":9223372036854775807}`, nil, 400, "invalid", "ttl"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"","ttl_ms":60000}`, nil, 400, "invalid", "owner"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"data":"x","data_base64":"eA=="}`, nil, 400, "invalid", "data"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"data_base64":"!!"}`, nil, 400, "invalid", "data_base64"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"wait_ms":300001}`, nil, 400, "invalid", "wait_ms"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"wait_ms":-1}`, nil, 400, "invalid", "wait_ms"},
		{"POST", "/v1/leases/p/renew", `{"owner":"a","token":-1,"ttl_ms":60000}`, nil, 400, "invalid", "token"},
		{"POST", "/v1/leases/p/renew", `{"owner":"a","token":0,"ttl_ms":60000}`, nil, 400, "invalid", "token"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"data":"` + strings.Repeat("x", 2000) + `"}`, nil, 413, "too-large", ""},
		{"POST", "/v1/leases/p/acquire", `owner=a`, []string{"Content-Type", "text/plain"}, 415, "unsupported-media-type", ""},
		{"POST", "/v1/leases/p/acquire", `<owner>a</owner>`, []string{"Content-Type", "application/xml"}, 415, "unsupported-media-type", ""},
		{"POST", "/v1/leases/p/acquire", `owner=a`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 400, "invalid", "body"},
		{"POST", "/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"session":"nope"}`, nil, 404, "no-session", ""},
		{"GET", "/v1/nothing", "", nil, 404, "no-route", ""},
		{"GET", "/v1/leases/p/acquire/x/../", "", nil, 400, "invalid", "name"},
		{"PUT", "/v1/leases/p/acquire", "{}", nil, 405, "method-not-allowed", ""},
		{"POST", "/v1/leases/p/frobnicate", "{}", nil, 405, "method-not-allowed", ""},
		{"DELETE", "/v1/leases", "", nil, 405, "method-not-allowed", ""},
		{"POST", "/healthz", "", nil, 405, "method-not-allowed", ""},
		{"GET", "/v1/leases?prefix=a%00", "", nil, 400, "invalid", "name"},
		{"GET", "/v1/events/recent?n=0", "", nil, 400, "invalid", "n"},
		{"GET", "/v1/events?name=a&prefix=b", "", nil, 400, "invalid", "name"},
	}
	for _, c := range cases {
		r := ts.do(c.method, c.path, "", c.body, c.hdr...)
		if r.status != c.status || r.problemType() != c.typ || (c.field != "" && r.str("field") != c.field) {
			t.Errorf("%s %s %.60s: got %d %s, want %d %s field %q", c.method, c.path, c.body, r.status, r.body, c.status, c.typ, c.field)
		}
		if !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, r.header.Get("Content-Type"))
		}
		if c.typ == "invalid" && r.str("reason") == "" {
			t.Errorf("%s %s: no reason in %s", c.method, c.path, r.body)
		}
	}
	if n := ts.names(); len(n) != 0 {
		t.Errorf("refused requests left leases: %v", n)
	}
	// A missing content type is accepted, and so is curl's default for -d
	// with a JSON body.
	r := ts.do("POST", "/v1/leases/p/acquire", "", `{"owner":"a","ttl_ms":60000}`, "Content-Type", "")
	ts.want(r, 200, "")
	r = ts.do("POST", "/v1/leases/q/acquire", "", `{"owner":"a","ttl_ms":60000}`, "Content-Type", "application/x-www-form-urlencoded")
	ts.want(r, 200, "")
}

const (
	htAdmin = "admin-secret"
	htTeam  = "team-secret"
	htRead  = "read-secret"
	htOther = "other-secret"
)

func htAuth(t *testing.T) *Auth {
	t.Helper()
	a, err := NewAuth(AuthConfig{Tokens: []TokenConfig{
		{Identity: "admin", Token: htAdmin, Grants: []Grant{{Prefix: "", Access: "admin"}}},
		// team may write under team/, but only read under team/ro/ (the
		// most specific prefix wins).
		{Identity: "team", Token: htTeam, Grants: []Grant{{Prefix: "team/", Access: "write"}, {Prefix: "team/ro/", Access: "read"}}},
		{Identity: "reader", Token: htRead, Grants: []Grant{{Prefix: "", Access: "read"}}},
		{Identity: "other", Token: htOther, Grants: []Grant{{Prefix: "other/", Access: "write"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAuthRefusals: every refused request gets 400, 401 or 403 (never a
// redirect, never a success) and changes nothing.
func TestAuthRefusals(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	body := `{"owner":"x","ttl_ms":60000}`
	cases := []struct {
		path, token string
		status      int
	}{
		{"/v1/leases/team/a/acquire", "", 401},
		{"/v1/leases/team/a/acquire", "wrong", 401},
		{"/v1/leases/other/a/acquire", htTeam, 403},
		{"/v1/leases/team/ro/a/acquire", htTeam, 403}, // most specific grant: read only
		{"/v1/leases/team/a/acquire", htRead, 403},
		{"/v1/leases/team/../other/a/acquire", htTeam, 400},
		{"/v1/leases/team/%2E%2E/other/a/acquire", htTeam, 400},
		{"/v1/leases/team%2F..%2Fother%2Fa/acquire", htTeam, 400},
		{"/v1/leases/team/./a/acquire", htTeam, 400},
		{"/v1/leases/team//a/acquire", htTeam, 400},
		{"/v1/leases/other%2Fa/acquire", htTeam, 403},
		{"/v1/leases/team%252Fa/acquire", htTeam, 400},          // double encoding
		{"/v1/leases/team/a%252F..%252Fb/acquire", htTeam, 400}, // double encoding
		{"/v1/leases/team/x%zz%2F/acquire", htTeam, 400},        // malformed escape
		{"/v1/leases/team/x%25zz%252F/acquire", htTeam, 400},    // decodes to "x%zz%2F": refused (every '%' is checked)
		{"/v1/leases/team/a%00b/acquire", htTeam, 400},
		{"/v1/leases/team/a%0Ab/acquire", htTeam, 400},
		{"/v1/leases/team/%FF/acquire", htTeam, 400},       // not UTF-8
		{"/v1/leases/team%EF%BC%8Fa/acquire", htTeam, 403}, // look-alike "／": another name, outside team/
		{"/v1/leases/../../etc/passwd/acquire", htTeam, 400},
		{"/v1/leases/team/a/force-release", htTeam, 403},
		{"/v1/semaphores/team/ro/s/acquire", htTeam, 403},
		{"/v1/semaphores/other/s/acquire", htTeam, 403},
		{"/v1/sessions", htRead, 403},
	}
	for _, c := range cases {
		b := body
		if strings.HasPrefix(c.path, "/v1/semaphores/") {
			b = `{"owner":"x","ttl_ms":60000,"permits":2}`
		}
		if c.path == "/v1/sessions" {
			b = `{"ttl_ms":60000}`
		}
		r := ts.do("POST", c.path, c.token, b)
		if r.status != c.status {
			t.Errorf("POST %s (token %q): %d %s, want %d", c.path, c.token, r.status, r.body, c.status)
		}
		if r.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer")
		}
	}
	// Reads outside the grants.
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/v1/leases/other/a", htTeam, 403},
		{"/v1/leases?prefix=", htTeam, 403},
		{"/v1/leases?prefix=other/", htTeam, 403},
		{"/v1/leases?prefix=team%2F..%2Fother", htTeam, 400},
		{"/v1/leases?prefix=team%252F", htTeam, 400},
		{"/v1/events?prefix=other/", htTeam, 403},
		{"/v1/events?name=other/a", htTeam, 403},
		{"/v1/events/recent?prefix=other/", htTeam, 403},
		{"/v1/elections/other/e/leader", htTeam, 403},
		{"/v1/leases", "", 401},
		{"/v1/stats", "", 401},
		{"/metrics", "wrong", 401},
	} {
		r := ts.do("GET", c.path, c.token, "")
		if r.status != c.status {
			t.Errorf("GET %s (token %q): %d %s, want %d", c.path, c.token, r.status, r.body, c.status)
		}
	}
	if n := ts.names(); len(n) != 0 {
		t.Fatalf("refused requests changed the state: %v", n)
	}
	// The admin's list (through the API) agrees.
	r := ts.do("GET", "/v1/leases", htAdmin, "")
	ts.want(r, 200, "")
	if ls := r.json["leases"].([]any); len(ls) != 0 {
		t.Fatalf("admin list after refusals: %s", r.body)
	}

	// What is allowed is allowed: single encoding of '/' is the same name.
	r = ts.do("POST", "/v1/leases/team%2Fa/acquire", htTeam, body)
	ts.want(r, 200, "")
	if r.str("name") != "team/a" {
		t.Errorf("name %q, want team/a", r.str("name"))
	}
	ts.want(ts.do("GET", "/v1/leases/team/ro/x", htTeam, ""), 404, "not-found") // read is allowed
	r = ts.do("GET", "/v1/leases?prefix=team/", htTeam, "")
	ts.want(r, 200, "")
	// A token limited to team/ lists only what it may read, even when the
	// admin holds more.
	ts.want(ts.do("POST", "/v1/leases/other/z/acquire", htOther, body), 200, "")
	r = ts.do("GET", "/v1/leases?prefix=team/", htTeam, "")
	if ls := r.json["leases"].([]any); len(ls) != 1 {
		t.Errorf("team's list: %s", r.body)
	}
	r = ts.do("GET", "/v1/leases", htRead, "")
	if ls := r.json["leases"].([]any); len(ls) != 2 {
		t.Errorf("reader's list: %s", r.body)
	}
	// Force release is the admin's.
	ts.want(ts.do("POST", "/v1/leases/team/a/force-release", htTeam, ""), 403, "forbidden")
	r = ts.do("POST", "/v1/leases/team/a/force-release", htAdmin, "")
	ts.want(r, 200, "")
	if r.str("name") != "team/a" || r.str("owner") != "x" {
		t.Errorf("force release answer %s", r.body)
	}
	ts.want(ts.do("POST", "/v1/leases/team/a/force-release", htAdmin, ""), 404, "not-found")
	if n := ts.names(); strings.Join(n, ",") != "other/z" {
		t.Errorf("leases at the end: %v", n)
	}
}

// TestCrossOrigin: a browser's cross-site POST (a web page aiming at a
// server its visitor can reach) is refused and changes nothing; the
// dashboard's same-origin requests and non-browser clients pass.
func TestCrossOrigin(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	body := `{"owner":"x","ttl_ms":60000}`
	ts.want(ts.do("POST", "/v1/leases/c/acquire", "", body, "Sec-Fetch-Site", "cross-site"), 403, "forbidden")
	ts.want(ts.do("POST", "/v1/leases/c/acquire", "", body, "Origin", "http://evil.example"), 403, "forbidden")
	if n := ts.names(); len(n) != 0 {
		t.Fatalf("cross-origin requests changed the state: %v", n)
	}
	ts.want(ts.do("GET", "/v1/leases", "", "", "Sec-Fetch-Site", "cross-site"), 200, "") // reads are safe
	ts.want(ts.do("POST", "/v1/leases/c/acquire", "", body, "Sec-Fetch-Site", "same-origin"), 200, "")
	// DNS rebinding: a page on a name re-pointed at the server is
	// same-origin to the browser. With auth off, browsers change leases
	// only through localhost or an IP address.
	ts.want(ts.do("POST", "/v1/leases/d/acquire", "", body, "Sec-Fetch-Site", "same-origin", "Host", "rebind.example:7070"), 403, "forbidden")
	ts.want(ts.do("POST", "/v1/leases/d/acquire", "", body, "Host", "rebind.example:7070"), 421, "misdirected-host") // any client: Host not served with auth off
	ts.want(ts.do("POST", "/v1/leases/e/acquire", "", body, "Sec-Fetch-Site", "same-origin", "Host", "localhost:7070"), 200, "")
	ts.want(ts.do("GET", "/v1/leases", "", "", "Sec-Fetch-Site", "same-origin", "Host", "rebind.example:7070"), 421, "misdirected-host")
	if n := ts.names(); strings.Join(n, ",") != "c,e" {
		t.Errorf("leases: %v", n)
	}
	// With auth on, the token protects: a host name is fine.
	ta := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	ta.want(ta.do("POST", "/v1/leases/team/d/acquire", htTeam, body, "Sec-Fetch-Site", "same-origin", "Host", "leases.example:7070"), 200, "")
}

func TestRateLimit(t *testing.T) {
	limits := &Limits{PerSecond: 1e-6, Burst: 2}
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t), Limits: limits})
	for i := 0; i < 2; i++ {
		ts.want(ts.do("POST", fmt.Sprintf("/v1/leases/team/%d/acquire", i), htTeam, `{"owner":"x","ttl_ms":60000}`), 200, "")
	}
	for i := 2; i < 4; i++ {
		r := ts.do("POST", fmt.Sprintf("/v1/leases/team/%d/acquire", i), htTeam, `{"owner":"x","ttl_ms":60000}`)
		ts.want(r, 429, "rate-limited")
		if r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	// Another identity has its own budget.
	r := ts.do("GET", "/v1/leases", htAdmin, "")
	ts.want(r, 200, "")
	if ls := r.json["leases"].([]any); len(ls) != 2 {
		t.Errorf("leases after rate limiting: %s", r.body)
	}
	var sb strings.Builder
	mr := ts.do("GET", "/metrics", htAdmin, "")
	sb.Write(mr.body)
	if !strings.Contains(sb.String(), "leasehold_rate_limited_total 2") {
		t.Errorf("metrics do not count 2 rate-limited requests")
	}
}

func TestWaitLongPoll(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	r := ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"holder","ttl_ms":60000}`)
	ts.want(r, 200, "")
	tok := r.num("token")
	// A short wait times out with the holder.
	ts.want(ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"w0","ttl_ms":60000,"wait_ms":20}`), 409, "held")

	got := make(chan htResp, 1)
	go func() {
		got <- ts.do("POST", "/v1/leases/w/acquire", "", `{"owner":"w1","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 1 })
	r = ts.do("GET", "/v1/leases/w", "", "")
	ws, _ := r.json["waiters"].([]any)
	if len(ws) != 1 {
		t.Fatalf("waiters %s", r.body)
	}
	w0 := ws[0].(map[string]any)
	if w0["owner"] != "w1" || w0["since"] == "" || w0["waited_ms"].(float64) < 0 {
		t.Errorf("waiter %v", w0)
	}
	ts.want(ts.do("POST", "/v1/leases/w/release", "", fmt.Sprintf(`{"owner":"holder","token":%v}`, tok)), 204, "")
	r = <-got
	ts.want(r, 200, "")
	if r.str("owner") != "w1" || r.num("token") <= tok {
		t.Errorf("waiter's grant %s", r.body)
	}

	// A client that goes away leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan htResp, 1)
	go func() {
		done <- ts.doCtx(ctx, "POST", "/v1/leases/w/acquire", "", `{"owner":"w2","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 1 })
	cancel()
	<-done
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("w")) == 0 })
	if rec, err := ts.eng.Get(context.Background(), "w"); err != nil || rec.Owner != "w1" {
		t.Errorf("after the waiter left: %+v, %v", rec, err)
	}
}

// TestDrain: a graceful shutdown ends long-polls with 503 at once.
func TestDrain(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("POST", "/v1/leases/d/acquire", "", `{"owner":"holder","ttl_ms":60000}`), 200, "")
	got := make(chan htResp, 1)
	go func() {
		got <- ts.do("POST", "/v1/leases/d/acquire", "", `{"owner":"w","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("d")) == 1 })
	ts.api.cancelDrain()
	r := <-got
	ts.want(r, 503, "unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if rec, err := ts.eng.Get(context.Background(), "d"); err != nil || rec.Owner != "holder" {
		t.Errorf("holder after drain: %+v, %v", rec, err)
	}
}

// htSSE reads a server-sent event stream.
type htSSE struct {
	cancel context.CancelFunc
	events chan [2]string // event, data
}

func (ts *htServer) subscribe(query, token string) *htSSE {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.srv.URL+"/v1/events?"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		ts.t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	s := &htSSE{cancel: cancel, events: make(chan [2]string, 100)}
	go func() {
		defer res.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				s.events <- [2]string{ev, v}
			}
		}
	}()
	ts.t.Cleanup(cancel)
	return s
}

func (s *htSSE) next(t *testing.T) (string, map[string]any) {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			t.Fatal("event stream ended")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(e[1]), &m); err != nil {
			t.Fatalf("event data %q: %v", e[1], err)
		}
		return e[0], m
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return "", nil
}

func TestEvents(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	all := ts.subscribe("prefix=team/", htTeam)
	one := ts.subscribe("name=team/a", htTeam)
	body := `{"owner":"x","ttl_ms":60000}`
	ts.want(ts.do("POST", "/v1/leases/team/ab/acquire", htTeam, body), 200, "")
	ts.want(ts.do("POST", "/v1/leases/other/a/acquire", htOther, body), 200, "")
	r := ts.do("POST", "/v1/leases/team/a/acquire", htTeam, body)
	ts.want(r, 200, "")
	ts.want(ts.do("POST", "/v1/leases/team/a/release", htTeam, fmt.Sprintf(`{"owner":"x","token":%v}`, r.num("token"))), 204, "")

	var seen []string
	for i := 0; i < 3; i++ {
		ev, m := all.next(t)
		if ev != m["type"] {
			t.Errorf("event %q with data type %v", ev, m["type"])
		}
		seen = append(seen, fmt.Sprintf("%s %s", ev, m["name"]))
	}
	if strings.Join(seen, ",") != "granted team/ab,granted team/a,released team/a" {
		t.Errorf("prefix stream: %v", seen)
	}
	seen = nil
	for i := 0; i < 2; i++ {
		ev, m := one.next(t)
		seen = append(seen, fmt.Sprintf("%s %s", ev, m["name"]))
		if m["time"] == "" || m["owner"] != "x" {
			t.Errorf("event data %v", m)
		}
	}
	if strings.Join(seen, ",") != "granted team/a,released team/a" {
		t.Errorf("name stream: %v", seen)
	}
	// Recent: the caller sees only what it may read.
	r = ts.do("GET", "/v1/events/recent?n=100", htRead, "")
	ts.want(r, 200, "")
	if evs := r.json["events"].([]any); len(evs) != 4 {
		t.Errorf("reader's recent events: %s", r.body)
	}
	r = ts.do("GET", "/v1/events/recent?n=100&prefix=team/", htTeam, "")
	ts.want(r, 200, "")
	if evs := r.json["events"].([]any); len(evs) != 3 {
		t.Errorf("team's recent events: %s", r.body)
	}
	r = ts.do("GET", "/v1/events/recent?n=1", htRead, "")
	if evs := r.json["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["type"] != "released" {
		t.Errorf("the latest event: %s", r.body)
	}
}

func TestSessionsHTTP(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	r := ts.do("POST", "/v1/sessions", htTeam, `{"ttl_ms":60000}`)
	ts.want(r, 201, "")
	id := r.str("id")
	if id == "" || r.num("ttl_ms") != 60000 || r.num("remaining_ms") <= 0 {
		t.Fatalf("session %s", r.body)
	}
	r = ts.do("POST", "/v1/leases/team/s/acquire", htTeam, fmt.Sprintf(`{"owner":"x","ttl_ms":60000,"session":%q}`, id))
	ts.want(r, 200, "")
	if r.str("session") != id {
		t.Errorf("acquire in session %s", r.body)
	}
	r = ts.do("POST", "/v1/sessions/"+id+"/keepalive", htTeam, "")
	ts.want(r, 200, "")
	if r.num("leases") != 1 {
		t.Errorf("keepalive %s", r.body)
	}
	ts.want(ts.do("DELETE", "/v1/sessions/"+id, htRead, ""), 403, "forbidden")
	// Another identity cannot use, keep alive or close the session: to it,
	// the session does not exist.
	ts.want(ts.do("POST", "/v1/leases/other/s/acquire", htOther, fmt.Sprintf(`{"owner":"x","ttl_ms":60000,"session":%q}`, id)), 404, "no-session")
	ts.want(ts.do("POST", "/v1/semaphores/other/s/acquire", htOther, fmt.Sprintf(`{"owner":"x","permits":1,"ttl_ms":60000,"session":%q}`, id)), 404, "no-session")
	ts.want(ts.do("POST", "/v1/sessions/"+id+"/keepalive", htOther, ""), 404, "no-session")
	ts.want(ts.do("DELETE", "/v1/sessions/"+id, htOther, ""), 404, "no-session")
	ts.want(ts.do("DELETE", "/v1/sessions/"+id, htTeam, ""), 204, "")
	ts.want(ts.do("GET", "/v1/leases/team/s", htTeam, ""), 404, "not-found")
	ts.want(ts.do("DELETE", "/v1/sessions/"+id, htTeam, ""), 404, "no-session")
	ts.want(ts.do("POST", "/v1/sessions/"+id+"/keepalive", htTeam, ""), 404, "no-session")
	ts.want(ts.do("POST", "/v1/sessions/nope/keepalive", htTeam, ""), 404, "no-session")
	ts.want(ts.do("GET", "/v1/sessions/nope/keepalive", htTeam, ""), 405, "method-not-allowed")
	ts.want(ts.do("POST", "/v1/sessions", htTeam, `{"ttl_ms":0}`), 400, "invalid")
}

func TestSemaphoreHTTP(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	acq := func(owner, extra string) htResp {
		return ts.do("POST", "/v1/semaphores/pool/db/acquire", "", fmt.Sprintf(`{"owner":%q,"permits":2,"ttl_ms":60000%s}`, owner, extra))
	}
	a := acq("a", `,"request_id":"ra"`)
	ts.want(a, 200, "")
	b := acq("b", "")
	ts.want(b, 200, "")
	names := []string{a.str("name"), b.str("name")}
	sort.Strings(names)
	if strings.Join(names, ",") != "pool/db/permit/0,pool/db/permit/1" {
		t.Fatalf("permits %v", names)
	}
	if p, _ := a.json["permit"].(float64); fmt.Sprintf("pool/db/permit/%v", p) != a.str("name") {
		t.Errorf("permit index %v for %s", a.json["permit"], a.str("name"))
	}
	// A retry of a's request gets a's permit back.
	again := acq("a", `,"request_id":"ra"`)
	ts.want(again, 200, "")
	if again.str("name") != a.str("name") || again.num("token") != a.num("token") {
		t.Errorf("retried semaphore acquire %s, want %s", again.body, a.body)
	}
	c := acq("c", "")
	ts.want(c, 409, "held")
	if c.num("permits") != 2 || c.json["holder"] == nil {
		t.Errorf("all held: %s", c.body)
	}
	ts.want(acq("c", `,"permits":0`), 400, "invalid")
	ts.want(ts.do("POST", "/v1/semaphores/pool/db/acquire", "", `{"owner":"c","permits":1025,"ttl_ms":60000}`), 400, "invalid")

	got := make(chan htResp, 1)
	go func() { got <- acq("c", `,"wait_ms":60000`) }()
	// Give the waiter time to subscribe; either way it must get b's permit.
	time.Sleep(50 * time.Millisecond)
	ts.want(ts.do("POST", "/v1/leases/"+b.str("name")+"/release", "", fmt.Sprintf(`{"owner":"b","token":%v}`, b.num("token"))), 204, "")
	r := <-got
	ts.want(r, 200, "")
	if r.str("name") != b.str("name") || r.str("owner") != "c" {
		t.Errorf("waiter got %s", r.body)
	}
	// Permits at or above N are not handed out.
	ts.want(ts.do("POST", "/v1/semaphores/pool/db/acquire", "", `{"owner":"d","permits":1,"ttl_ms":60000}`), 409, "held")
}

func TestElectionHTTP(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("GET", "/v1/elections/svc/primary/leader", "", ""), 404, "not-found")
	r := ts.do("POST", "/v1/leases/svc/primary/acquire", "", `{"owner":"node-1","ttl_ms":60000,"data":"10.0.0.1:8080"}`)
	ts.want(r, 200, "")
	l := ts.do("GET", "/v1/elections/svc/primary/leader", "", "")
	ts.want(l, 200, "")
	if l.str("owner") != "node-1" || l.num("term") != r.num("token") || l.str("data") != "10.0.0.1:8080" {
		t.Errorf("leader %s", l.body)
	}
	ts.want(ts.do("GET", "/v1/elections/svc/primary", "", ""), 404, "no-route")
	ts.want(ts.do("POST", "/v1/elections/svc/primary/leader", "", ""), 405, "method-not-allowed")
}

func TestHealthMetricsStats(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("GET", "/healthz", "", ""), 200, "")
	ts.want(ts.do("GET", "/readyz", "", ""), 200, "")
	r := ts.do("POST", "/v1/leases/m/acquire", "", `{"owner":"a","ttl_ms":60000}`)
	ts.want(r, 200, "")
	tok := r.num("token")
	ts.want(ts.do("POST", "/v1/leases/m/renew", "", fmt.Sprintf(`{"owner":"a","token":%v,"ttl_ms":60000}`, tok)), 200, "")
	ts.want(ts.do("POST", "/v1/leases/m/renew", "", fmt.Sprintf(`{"owner":"b","token":%v,"ttl_ms":60000}`, tok)), 409, "not-held")
	r = ts.do("GET", "/v1/stats", "", "")
	ts.want(r, 200, "")
	if r.num("held") != 1 || r.json["durable"] != false {
		t.Errorf("stats %s", r.body)
	}
	m := ts.do("GET", "/metrics", "", "")
	ts.want(m, 200, "")
	text := string(m.body)
	for _, want := range []string{
		"leasehold_grants_total 1", "leasehold_renewals_total 1", "leasehold_lost_total 1",
		"leasehold_held_leases 1", "leasehold_waiters 0", "leasehold_sessions 0",
		`leasehold_http_requests_total{code="200",route="/v1/leases/{name}/acquire"} 1`,
		`leasehold_http_requests_total{code="409",route="/v1/leases/{name}/renew"} 1`,
		"leasehold_handoff_seconds_bucket", "leasehold_sync_seconds_bucket",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	ts.eng.Close()
	ts.want(ts.do("GET", "/readyz", "", ""), 503, "unavailable")
	ts.want(ts.do("GET", "/healthz", "", ""), 200, "")
	ts.want(ts.do("POST", "/v1/leases/m2/acquire", "", `{"owner":"a","ttl_ms":60000}`), 503, "unavailable")
}

func TestHandoffMetric(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	r := ts.do("POST", "/v1/leases/h/acquire", "", `{"owner":"a","ttl_ms":60000}`)
	ts.want(r, 200, "")
	got := make(chan htResp, 1)
	go func() {
		got <- ts.do("POST", "/v1/leases/h/acquire", "", `{"owner":"b","ttl_ms":60000,"wait_ms":60000}`)
	}()
	htWaitFor(t, func() bool { return len(ts.eng.Waiters("h")) == 1 })
	ts.want(ts.do("POST", "/v1/leases/h/release", "", fmt.Sprintf(`{"owner":"a","token":%v}`, r.num("token"))), 204, "")
	ts.want(<-got, 200, "")
	m := ts.do("GET", "/metrics", "", "")
	if !regexp.MustCompile(`leasehold_handoff_seconds_count 1\b`).Match(m.body) || !strings.Contains(string(m.body), "leasehold_waits_total 1") {
		t.Errorf("handoff not measured:\n%s", htGrep(string(m.body), "handoff|waits"))
	}
}

func htGrep(s, pat string) string {
	re := regexp.MustCompile(pat)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestDashboardMount(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, "dashboard")
	})
	ts := newHTServer(t, HandlerOptions{Dashboard: dash, Auth: htAuth(t)})
	r := ts.do("GET", "/", "", "")
	if r.status != http.StatusFound || r.header.Get("Location") != "/dashboard/" {
		t.Errorf("GET /: %d %s", r.status, r.header.Get("Location"))
	}
	r = ts.do("GET", "/dashboard/app.js", "", "")
	if r.status != 200 || string(r.body) != "dashboard" {
		t.Errorf("dashboard: %d %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/dashboard/app.js" {
		t.Errorf("dashboard saw %v", paths)
	}
}

// TestRoutesDocumented: every route the handler serves is in the OpenAPI
// description and the API guide.
func TestRoutesDocumented(t *testing.T) {
	openapi, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	routes := []string{
		"/healthz", "/readyz", "/metrics", "/v1/stats", "/v1/leases",
		"/v1/leases/{name}", "/v1/leases/{name}/acquire", "/v1/leases/{name}/renew",
		"/v1/leases/{name}/release", "/v1/leases/{name}/force-release",
		"/v1/events", "/v1/events/recent", "/v1/sessions", "/v1/sessions/{id}",
		"/v1/sessions/{id}/keepalive", "/v1/semaphores/{name}/acquire", "/v1/elections/{name}/leader",
	}
	for _, r := range routes {
		if !strings.Contains(string(openapi), "\n  "+r+":") {
			t.Errorf("docs/openapi.yaml has no path %s", r)
		}
		if !strings.Contains(string(guide), r) {
			t.Errorf("docs/http-api.md does not mention %s", r)
		}
	}
	for _, typ := range []string{"held", "not-held", "not-found", "invalid", "unauthorized", "forbidden",
		"too-large", "rate-limited", "no-session", "unavailable", "timeout", "internal", "no-route",
		"method-not-allowed", "unsupported-media-type"} {
		if !strings.Contains(string(guide), "`"+typ+"`") || !strings.Contains(string(openapi), typ) {
			t.Errorf("problem type %s is not documented in both files", typ)
		}
	}
}

func htWaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
