package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
	return htServe(t, eng, reg, opts)
}

// htServe serves the API over eng (closed with the server) until the test
// ends.
func htServe(t *testing.T, eng *Engine, reg *prometheus.Registry, opts HandlerOptions) *htServer {
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
