package server

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/wire/httpwire"
)

// Sessions, semaphores, elections, health, metrics, the dashboard, and
// the documentation of the routes.

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

// TestAPIDocumented: every route the handler serves (but the
// dashboard's) is in the OpenAPI description and the API guide, and so is
// every problem type.
func TestAPIDocumented(t *testing.T) {
	openapi, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range httpRoutes {
		if r.dash {
			continue
		}
		n++
		if !strings.Contains(string(openapi), "\n  "+r.pattern+":") {
			t.Errorf("docs/openapi.yaml has no path %s", r.pattern)
		}
		if !strings.Contains(string(guide), r.pattern) {
			t.Errorf("docs/http-api.md does not mention %s", r.pattern)
		}
	}
	if n < 25 {
		t.Errorf("only %d routes", n)
	}
	for _, typ := range httpwire.ProblemTypes {
		if !strings.Contains(string(guide), "`"+typ+"`") {
			t.Errorf("docs/http-api.md does not list problem type %s", typ)
		}
		if !strings.Contains(string(openapi), "- "+ProblemType+typ+"\n") {
			t.Errorf("docs/openapi.yaml's Problem type enum has no %s", typ)
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
