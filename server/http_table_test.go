package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
	"github.com/prometheus/client_golang/prometheus"
)

// htRole is a token of the route-table test: its access on p/ (and on the
// workflow instances wf/approval/i/p*, where workflow routes check it).
type htRole struct {
	name   string
	token  string
	access Access
	// root: the access is on the whole name space (prefix "") instead.
	root bool
}

var htRoles = []htRole{
	{"none", "tok-none", AccessNone, false},
	{"read", "tok-read", AccessRead, false},
	{"write", "tok-write", AccessWrite, false},
	{"admin", "tok-admin", AccessAdmin, false},
	{"root-read", "tok-root-read", AccessRead, true},
	{"root-admin", "tok-root-admin", AccessAdmin, true},
}

// newTableServer is the HTTP API with auth on (htRoles), the approval
// workflow, metrics and a stand-in dashboard: every row of the route
// table is served.
func newTableServer(t *testing.T) *htServer {
	t.Helper()
	var cfg AuthConfig
	for _, r := range htRoles {
		tc := TokenConfig{Identity: r.name, Token: r.token}
		switch {
		case r.root:
			tc.Grants = []Grant{{Prefix: "", Access: r.access.String()}}
		case r.access != AccessNone:
			tc.Grants = []Grant{{Prefix: "p/", Access: r.access.String()}, {Prefix: "wf/approval/i/p", Access: r.access.String()}}
		}
		cfg.Tokens = append(cfg.Tokens, tc)
	}
	auth, err := NewAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	eng, err := OpenEngine(EngineConfig{Hooks: m.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	store := StoreOf(eng)
	wf, err := workflow.New(workflow.Definition{
		Name: "approval", Initial: "DRAFT",
		Transitions: map[string][]string{"DRAFT": {"PENDING"}, "PENDING": {"APPROVED"}},
	}, workflow.Config{Records: store.(leasehold.RecordStore), Leases: store})
	if err != nil {
		t.Fatal(err)
	}
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "dashboard") })
	return htServe(t, eng, reg, HandlerOptions{Auth: auth, Metrics: m, Dashboard: dash,
		Workflows: map[string]*workflow.Workflows{"approval": wf}})
}

// htSample is a valid call of a row, on names under n + "/" (n is "p",
// inside the roles' grants, or "q", outside).
type htSample func(n string) (method, path, body string, hdr []string)

// htExpect is what a row needs, written down apart from the table: the
// access, and where (htNamed: on the name, key or prefix of the call;
// htSomewhere: on some prefix; htEverything: on the whole name space;
// htPublic: nothing, without a token), and a valid call of it.
type htExpect struct {
	need Access
	on   int
	call htSample
}

const (
	htPublic = iota
	htNamed
	htSomewhere
	htEverything
)

// htX builds an htExpect whose call's path and body contain "{n}" for
// the name's first segment.
func htX(need Access, on int, method, path, body string, hdr ...string) htExpect {
	return htExpect{need, on, func(n string) (string, string, string, []string) {
		return method, strings.ReplaceAll(path, "{n}", n), strings.ReplaceAll(body, "{n}", n), hdr
	}}
}

// htSamples has one entry per row, keyed by pattern and first method. A
// row without one fails TestHTTPTableRoles: add its entry here.
var htSamples = map[string]htExpect{
	"/healthz GET":          htX(AccessNone, htPublic, "GET", "/healthz", ""),
	"/readyz GET":           htX(AccessNone, htPublic, "GET", "/readyz", ""),
	"/ GET":                 htX(AccessNone, htPublic, "GET", "/", ""),
	"/dashboard GET":        htX(AccessNone, htPublic, "GET", "/dashboard", ""),
	"/dashboard/{file} GET": htX(AccessNone, htPublic, "GET", "/dashboard/index.html", ""),
	"/metrics GET":          htX(AccessRead, htEverything, "GET", "/metrics", ""),
	"/v1/stats GET":         htX(AccessRead, htEverything, "GET", "/v1/stats", ""),

	"/v1/leases GET":                       htX(AccessRead, htNamed, "GET", "/v1/leases?prefix={n}/", ""),
	"/v1/leases/{name}/acquire POST":       htX(AccessWrite, htNamed, "POST", "/v1/leases/{n}/x/acquire", `{"owner":"o","ttl_ms":60000}`),
	"/v1/leases/{name}/renew POST":         htX(AccessWrite, htNamed, "POST", "/v1/leases/{n}/x/renew", `{"owner":"o","token":1,"ttl_ms":60000}`),
	"/v1/leases/{name}/release POST":       htX(AccessWrite, htNamed, "POST", "/v1/leases/{n}/x/release", `{"owner":"o","token":1}`),
	"/v1/leases/{name}/force-release POST": htX(AccessAdmin, htNamed, "POST", "/v1/leases/{n}/x/force-release", ""),
	"/v1/leases/{name} GET":                htX(AccessRead, htNamed, "GET", "/v1/leases/{n}/x", ""),
	"/v1/semaphores/{name}/acquire POST":   htX(AccessWrite, htNamed, "POST", "/v1/semaphores/{n}/s/acquire", `{"owner":"o","permits":2,"ttl_ms":60000}`),
	"/v1/elections/{name}/leader GET":      htX(AccessRead, htNamed, "GET", "/v1/elections/{n}/x/leader", ""),
	"/v1/events GET":                       htX(AccessRead, htNamed, "GET", "/v1/events?prefix={n}/", ""),
	"/v1/events/recent GET":                htX(AccessRead, htNamed, "GET", "/v1/events/recent?name={n}/x", ""),

	"/v1/sessions POST":                htX(AccessWrite, htSomewhere, "POST", "/v1/sessions", `{"ttl_ms":15000}`),
	"/v1/sessions/{id}/keepalive POST": htX(AccessWrite, htSomewhere, "POST", "/v1/sessions/nope/keepalive", ""),
	"/v1/sessions/{id} DELETE":         htX(AccessWrite, htSomewhere, "DELETE", "/v1/sessions/nope", ""),

	"/v1/records/{key}/add POST": htX(AccessWrite, htNamed, "POST", "/v1/records/{n}/c/add", `{"delta":1}`),
	"/v1/records/{key} GET":      htX(AccessRead, htNamed, "GET", "/v1/records/{n}/r", ""),
	"/v1/records/{key} PUT":      htX(AccessWrite, htNamed, "PUT", "/v1/records/{n}/r", "v", "If-None-Match", "*"),
	"/v1/records/{key} DELETE":   htX(AccessWrite, htNamed, "DELETE", "/v1/records/{n}/r", "", "If-Match", `"1"`),
	"/v1/txn POST":               htX(AccessWrite, htNamed, "POST", "/v1/txn", `{"then":[{"key":"{n}/t","add":1}]}`),

	"/v1/workflows/{definition}/{instance}/transition POST": htX(AccessWrite, htNamed, "POST",
		"/v1/workflows/approval/{n}x/transition", `{"from":"DRAFT","to":"PENDING","request_id":"r1"}`),
	"/v1/workflows/{definition}/{instance}/requests/{request_id} GET": htX(AccessRead, htNamed, "GET",
		"/v1/workflows/approval/{n}x/requests/r1", ""),
	"/v1/workflows/{definition}/{instance} GET":  htX(AccessRead, htNamed, "GET", "/v1/workflows/approval/{n}x", ""),
	"/v1/workflows/{definition}/{instance} POST": htX(AccessWrite, htNamed, "POST", "/v1/workflows/approval/{n}x", ""),
}

// htCall sends one request and returns its status and problem type; an
// event stream is closed once its headers arrive.
func htCall(t *testing.T, ts *htServer, method, path, token, body string, hdr []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.srv.URL, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res.StatusCode, ""
	}
	b, _ := io.ReadAll(res.Body)
	var p struct{ Type string }
	if strings.Contains(res.Header.Get("Content-Type"), "problem+json") {
		json.Unmarshal(b, &p)
	}
	if res.StatusCode == 400 {
		t.Logf("%s %s: %s", method, path, b)
	}
	return res.StatusCode, strings.TrimPrefix(p.Type, ProblemType)
}

// TestHTTPTableRoles walks the route table: every row, called by every
// role on a name inside its grants and on one outside, is refused (401 or
// 403) exactly when the role's access there is below the row's, and
// served otherwise; without a token every row but the public ones is 401.
func TestHTTPTableRoles(t *testing.T) {
	ts := newTableServer(t)
	calls := 0
	for _, row := range httpRoutes {
		key := row.pattern + " " + row.methods[0]
		exp, ok := htSamples[key]
		if !ok {
			t.Errorf("row %q (%s) has no sample in htSamples: add one", key, row.op)
			continue
		}
		if exp.need != row.access {
			t.Errorf("row %q needs %v, want %v", key, row.access, exp.need)
		}
		for _, n := range []string{"p", "q"} {
			method, path, body, hdr := exp.call(n)
			// No token.
			code, typ := htCall(t, ts, method, path, "", body, hdr)
			if refused := code == 401; refused != (exp.on != htPublic) {
				t.Errorf("no token: %s %s (%s) = %d %s", method, path, row.op, code, typ)
			}
			calls++
			for _, role := range htRoles {
				have := role.access
				switch exp.on {
				case htPublic:
					have = AccessAdmin
				case htEverything:
					if !role.root {
						have = AccessNone
					}
				case htNamed:
					if n != "p" && !role.root {
						have = AccessNone
					}
				}
				code, typ := htCall(t, ts, method, path, role.token, body, hdr)
				calls++
				wantRefused := have < exp.need
				if refused := code == 401 || code == 403; refused != wantRefused {
					t.Errorf("%s: %s %s (%s, needs %v) = %d %s; want refused: %v", role.name, method, path, row.op, exp.need, code, typ, wantRefused)
					continue
				}
				if wantRefused && code != 403 {
					t.Errorf("%s: %s %s = %d, want 403", role.name, method, path, code)
				}
				if !wantRefused && (code == 400 || code == 405 || typ == "no-route") {
					t.Errorf("%s: %s %s = %d %s: the sample is not a valid call", role.name, method, path, code, typ)
				}
			}
		}
	}
	if want := len(httpRoutes) * 2 * (len(htRoles) + 1); calls != want || len(httpRoutes) < 25 {
		t.Errorf("%d calls over %d rows, want %d", calls, len(httpRoutes), want)
	}
	for key := range htSamples {
		found := false
		for _, row := range httpRoutes {
			found = found || row.pattern+" "+row.methods[0] == key
		}
		if !found {
			t.Errorf("sample %q has no row", key)
		}
	}
}

// TestHTTPOps: the operations both APIs have need these accesses over
// HTTP, and are named as on RESP.
func TestHTTPOps(t *testing.T) { wantSharedOps(t, "httpOps()", httpOps()) }

// sharedOps are the operations both APIs have, with the access each needs.
var sharedOps = map[string]Access{
	"lease.acquire": AccessWrite, "lease.renew": AccessWrite, "lease.release": AccessWrite,
	"lease.get": AccessRead, "lease.list": AccessRead, "lease.forcerelease": AccessAdmin,
	"session.open": AccessWrite, "session.keepalive": AccessWrite, "session.close": AccessWrite,
	"events.subscribe": AccessRead, "ready": AccessNone, "semaphore.acquire": AccessWrite,
}

// wantSharedOps checks that ops, an API's operations (what), has every
// operation of sharedOps with its access.
func wantSharedOps(t *testing.T, what string, ops map[string]Access) {
	t.Helper()
	for op, a := range sharedOps {
		if got, ok := ops[op]; !ok || got != a {
			t.Errorf("%s[%q] = %v, %v; want %v", what, op, got, ok, a)
		}
	}
}

// TestHTTPRouting: the table's matching — names with '/', the first row
// of the request's method, 405 with every method of the path.
func TestHTTPRouting(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("POST", "/v1/leases/a/renew/acquire", "", `{"owner":"o","ttl_ms":60000}`), 200, "")
	r := ts.do("GET", "/v1/leases/a/renew", "", "")
	ts.want(r, 200, "")
	if r.str("name") != "a/renew" {
		t.Errorf("GET /v1/leases/a/renew: %s", r.body)
	}
	r = ts.do("PATCH", "/v1/leases/a/renew", "", "")
	ts.want(r, 405, "method-not-allowed")
	if got := r.header.Get("Allow"); got != "POST, GET, HEAD" {
		t.Errorf("Allow %q", got)
	}
	r = ts.do("POST", "/v1/records/k", "", "{}")
	ts.want(r, 405, "method-not-allowed")
	if got := r.header.Get("Allow"); got != "GET, HEAD, PUT, DELETE" {
		t.Errorf("Allow %q", got)
	}
	for _, p := range []string{"/v1/sessions/", "/v1/sessions/a/b", "/v1/semaphores/x", "/v1/elections/x", "/v1/workflows/a", "/v1/workflows/a/b/c", "/dashboard"} {
		ts.want(ts.do("GET", p, "", ""), 404, "no-route")
	}
	ts.want(ts.do("GET", "/v1/leases/", "", ""), 400, "invalid")
	ts.want(ts.do("DELETE", "/v1/sessions/%FF", "", ""), 400, "invalid")
	ts.want(ts.do("GET", "/v1/workflows/a%2Fb/c", "", ""), 400, "invalid")
}
