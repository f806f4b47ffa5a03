package abuse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/verify"
)

// The identities of the test servers. tenant may write under tenant-a/
// only; the admin holds other/secret, which the abuse aims at.
const (
	adminToken  = "r11-admin-0f3c9a7d"
	tenantToken = "r11-tenant-5b21e8c4"
	politeToken = "r11-polite-9d7a3f10"
	floodToken  = "r11-flood-4e6b2c88"

	politePrefix = "polite/"
)

// headerTimeout is the servers' ReadHeaderTimeout (the default is 5s; a
// shorter one keeps the slow-headers case short).
const headerTimeout = time.Second

func newAuth(t *testing.T) *server.Auth {
	t.Helper()
	a, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "admin", Token: adminToken, Grants: []server.Grant{{Prefix: "", Access: "admin"}}},
		{Identity: "tenant", Token: tenantToken, Grants: []server.Grant{{Prefix: "tenant-a/", Access: "write"}}},
		{Identity: "polite", Token: politeToken, Grants: []server.Grant{{Prefix: politePrefix, Access: "write"}}},
		{Identity: "flood", Token: floodToken, Grants: []server.Grant{{Prefix: "flood/", Access: "write"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testServer is a real server (listener, http.Server, auth, engine) in
// this process.
type testServer struct {
	t    *testing.T
	url  string
	addr string
	// events counts the engine's events on names outside polite/: any
	// grant, renewal, release or expiry the abuse caused there.
	events  atomic.Int64
	evMu    sync.Mutex
	evLast  []server.Event
	client  *http.Client
	maxBody int64
}

func startServer(t *testing.T, limits *server.Limits) *testServer {
	t.Helper()
	ts := &testServer{t: t, maxBody: server.DefaultMaxBodyBytes}
	eng, err := server.OpenEngine(server.EngineConfig{Hooks: server.Hooks{Event: func(ev server.Event) {
		if strings.HasPrefix(ev.Name, politePrefix) {
			return
		}
		ts.events.Add(1)
		ts.evMu.Lock()
		ts.evLast = append(ts.evLast, ev)
		ts.evMu.Unlock()
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	srv, err := server.NewServer(eng, server.Config{
		HTTPListener: ln, Auth: newAuth(t), Limits: limits, ReadHeaderTimeout: headerTimeout,
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		ln.Close()
		eng.Close()
		t.Fatal(err)
	}
	runServer(t, srv)
	ts.addr = srv.HTTPAddr().String()
	ts.url = "http://" + ts.addr
	ts.client = newClient()
	t.Cleanup(ts.client.CloseIdleConnections)
	return ts
}

// runServer runs srv until the test ends, and then fails the test if it
// did not stop cleanly.
func runServer(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
}

func newClient() *http.Client {
	return &http.Client{
		Timeout:       30 * time.Second,
		Transport:     &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// request is one HTTP request and the statuses it may get.
type request struct {
	method, path string // path is sent verbatim (nothing cleaned or re-encoded)
	auth         string // the Authorization header ("" for none)
	body         []byte
	chunked      bool // send the body without a Content-Length
	want         []int
}

func bearer(token string) string { return "Bearer " + token }

type response struct {
	status int
	header http.Header
	body   []byte
}

func (ts *testServer) do(c *http.Client, r request) (response, error) {
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, ts.url, rd)
	if err != nil {
		return response{}, err
	}
	req.URL.Opaque = r.path
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
		if r.chunked {
			req.Body = io.NopCloser(bytes.NewReader(r.body)) // hides the length
			req.ContentLength = -1
		}
	}
	if r.auth != "" {
		req.Header.Set("Authorization", r.auth)
	}
	res, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// lease is a lease as GET /v1/leases shows it.
type lease struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
	TTLMS int64  `json:"ttl_ms"`
}

// state lists every lease outside polite/, as the admin sees it.
func (ts *testServer) state() []lease {
	ts.t.Helper()
	res, err := ts.do(ts.client, request{method: "GET", path: "/v1/leases", auth: bearer(adminToken)})
	if err != nil || res.status != 200 {
		ts.t.Fatalf("admin list: %d %s %v", res.status, res.body, err)
	}
	var out struct{ Leases []lease }
	if err := json.Unmarshal(res.body, &out); err != nil {
		ts.t.Fatalf("admin list: %v", err)
	}
	var ls []lease
	for _, l := range out.Leases {
		if !strings.HasPrefix(l.Name, politePrefix) {
			ls = append(ls, l)
		}
	}
	return ls
}

// acquire takes a lease (setup); it returns the token.
func (ts *testServer) acquire(token, name, owner string) uint64 {
	ts.t.Helper()
	res, err := ts.do(ts.client, request{method: "POST", path: "/v1/leases/" + name + "/acquire", auth: bearer(token),
		body: fmt.Appendf(nil, `{"owner":%q,"ttl_ms":%d}`, owner, (24 * time.Hour).Milliseconds())})
	if err != nil || res.status != 200 {
		ts.t.Fatalf("acquire %s: %d %s %v", name, res.status, res.body, err)
	}
	var l lease
	if err := json.Unmarshal(res.body, &l); err != nil {
		ts.t.Fatal(err)
	}
	return l.Token
}

// The leases the abuse aims at, set up on each server: the admin's
// other/secret and the tenant's own tenant-a/job. Their tokens are filled
// in at setup.
var secretToken, jobToken uint64

func setup(ts *testServer) {
	secretToken = ts.acquire(adminToken, "other/secret", "admin")
	jobToken = ts.acquire(tenantToken, "tenant-a/job", "tenant")
}

// --- the polite client ---

// polite acquires and releases polite/p in a loop and records each
// request's latency.
type polite struct {
	ts     *testServer
	client *http.Client

	mu        sync.Mutex
	latencies []time.Duration
	requests  int
	wrong     []string // unexpected answers
}

func newPolite(ts *testServer) *polite { return &polite{ts: ts, client: newClient()} }

func (p *polite) call(r request) (response, bool) {
	start := time.Now()
	res, err := p.ts.do(p.client, r)
	d := time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if err != nil || !slices.Contains(r.want, res.status) {
		p.wrong = append(p.wrong, fmt.Sprintf("%s %s: %d %s %v", r.method, r.path, res.status, bytes.TrimSpace(res.body), err))
		return res, false
	}
	p.latencies = append(p.latencies, d)
	return res, true
}

// run does acquire+release cycles until ctx ends or ops cycles are done
// (ops <= 0: no limit).
func (p *polite) run(ctx context.Context, ops int) {
	for i := 0; (ops <= 0 || i < ops) && ctx.Err() == nil; i++ {
		res, ok := p.call(request{method: "POST", path: "/v1/leases/polite/p/acquire", auth: bearer(politeToken),
			body: []byte(`{"owner":"polite","ttl_ms":60000}`), want: []int{200}})
		if !ok {
			continue
		}
		var l lease
		json.Unmarshal(res.body, &l)
		p.call(request{method: "POST", path: "/v1/leases/polite/p/release", auth: bearer(politeToken),
			body: fmt.Appendf(nil, `{"owner":"polite","token":%d}`, l.Token), want: []int{204}})
	}
}

// take returns and resets what was recorded.
func (p *polite) take() (lat []time.Duration, requests int, wrong []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lat, requests, wrong = p.latencies, p.requests, p.wrong
	p.latencies, p.requests, p.wrong = nil, 0, nil
	return lat, requests, wrong
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := (len(s)*99+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// --- the cases ---

// abuseCase is one kind of abuse: n requests, each with the statuses the
// server is designed to give it.
type abuseCase struct {
	name string
	// next returns the i-th abusive request.
	next func(i int) request
	// check, if set, judges the answers (replaces the per-request status
	// check) and the state; it returns the violations it found.
	check func(t *testing.T, ts *testServer, answers []response, before []lease) int
}

var (
	acquireBody = []byte(`{"owner":"abuser","ttl_ms":60000}`)
	tenantAuth  = bearer(tenantToken)
)

func releaseSecretBody() []byte {
	return fmt.Appendf(nil, `{"owner":"admin","token":%d}`, secretToken)
}

func releaseJobBody() []byte {
	return fmt.Appendf(nil, `{"owner":"tenant","token":%d}`, jobToken)
}

// cycle returns the i-th of reqs (modulo).
func cycle(reqs func() []request) func(int) request {
	var once sync.Once
	var rs []request
	return func(i int) request {
		once.Do(func() { rs = reqs() })
		return rs[i%len(rs)]
	}
}

// withAuth gives every request of a shape list the Authorization header.
func shapes(auth string, want int) []request {
	return []request{
		{method: "POST", path: "/v1/leases/tenant-a/new/acquire", auth: auth, body: acquireBody, want: []int{want}},
		{method: "POST", path: "/v1/leases/tenant-a/job/release", auth: auth, body: releaseJobBody(), want: []int{want}},
		{method: "POST", path: "/v1/leases/tenant-a/job/renew", auth: auth, body: fmt.Appendf(nil, `{"owner":"tenant","token":%d,"ttl_ms":1000}`, jobToken), want: []int{want}},
		{method: "POST", path: "/v1/leases/other/secret/release", auth: auth, body: releaseSecretBody(), want: []int{want}},
		{method: "POST", path: "/v1/leases/other/secret/force-release", auth: auth, want: []int{want}},
		{method: "GET", path: "/v1/leases/other/secret", auth: auth, want: []int{want}},
		{method: "GET", path: "/v1/leases", auth: auth, want: []int{want}},
		{method: "GET", path: "/v1/stats", auth: auth, want: []int{want}},
	}
}

func unauthenticated() []abuseCase {
	return []abuseCase{
		{name: "missing-credentials", next: cycle(func() []request { return shapes("", 401) })},
		{name: "bad-credentials", next: cycle(func() []request {
			var rs []request
			for _, auth := range []string{
				bearer("wrong"),
				bearer(adminToken + "x"),
				bearer(adminToken[:len(adminToken)-1]),
				bearer(strings.ToUpper(adminToken)),
				bearer(strings.Repeat("A", 4096)),
				"Basic " + adminToken,
				"Token " + tenantToken,
				"Bearer",
				bearer(""),
				adminToken,
			} {
				for _, r := range shapes(auth, 401) {
					// Wrong tokens from one address are throttled as
					// RESP's AUTH is: 401 until its failures pass the
					// limit, then 429 (both refuse and change nothing).
					r.want = []int{401, 429}
					rs = append(rs, r)
				}
			}
			return rs
		})},
	}
}

// escapes are requests with the tenant's token for names outside
// tenant-a/, or names made to look inside it, by kind.
func escapes() []abuseCase {
	post := func(path string, body []byte, want int) request {
		return request{method: "POST", path: path, auth: tenantAuth, body: body, want: []int{want}}
	}
	get := func(path string, want int) request {
		return request{method: "GET", path: path, auth: tenantAuth, want: []int{want}}
	}
	return []abuseCase{
		{name: "dot-segments", next: cycle(func() []request {
			return []request{
				post("/v1/leases/tenant-a/../other/secret/release", releaseSecretBody(), 400),
				post("/v1/leases/tenant-a/../other/secret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/%2E%2E/other/secret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/%2e%2e%2fother/secret/force-release", nil, 400),
				post("/v1/leases/tenant-a/x/../../other/secret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/./job/release", releaseJobBody(), 400),
				post("/v1/leases/tenant-a//job/acquire", acquireBody, 400),
				post("/v1/leases/../../other/secret/acquire", acquireBody, 400),
				get("/v1/leases/tenant-a/../other/secret", 400),
				get("/v1/leases?prefix=tenant-a/../other/", 400),
			}
		})},
		{name: "encoded-slash", next: cycle(func() []request {
			return []request{
				post("/v1/leases/other%2Fsecret/release", releaseSecretBody(), 403),
				post("/v1/leases/other%2fsecret/acquire", acquireBody, 403),
				post("/v1/leases/other%2Fsecret/force-release", nil, 403),
				post("/v1/leases/tenant-a%2F..%2Fother%2Fsecret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a%2F..%2Fother%2Fsecret/release", releaseSecretBody(), 400),
				post("/v1/leases/%2Ftenant-a/job/release", releaseJobBody(), 403),
				post("/v1/leases/tenant-a%2F%2Fjob/release", releaseJobBody(), 400),
				get("/v1/leases/other%2Fsecret", 403),
				get("/v1/leases?prefix=other%2F", 403),
				get("/v1/leases?prefix=tenant-a%2F..%2Fother", 400),
			}
		})},
		{name: "double-encoding", next: cycle(func() []request {
			return []request{
				post("/v1/leases/tenant-a%252F..%252Fother%252Fsecret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a%252F..%252Fother%252Fsecret/release", releaseSecretBody(), 400),
				post("/v1/leases/other%252Fsecret/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/%252E%252E/other/secret/force-release", nil, 400),
				post("/v1/leases/tenant-a%25252F..%25252Fother/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/x%25zz%252F/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/job%252F/release", releaseJobBody(), 400),
				get("/v1/leases/tenant-a%252F..%252Fother%252Fsecret", 400),
				get("/v1/leases?prefix=tenant-a%252F..%252Fother", 400),
				get("/v1/leases?prefix=other%252F", 400),
			}
		})},
		{name: "nul", next: cycle(func() []request {
			return []request{
				post("/v1/leases/tenant-a/job%00/release", releaseJobBody(), 400),
				post("/v1/leases/other/secret%00/release", releaseSecretBody(), 400),
				post("/v1/leases/tenant-a%00/../other/secret/acquire", acquireBody, 400),
				post("/v1/leases/%00other/secret/force-release", nil, 400),
				post("/v1/leases/tenant-a/%00/acquire", acquireBody, 400),
				post("/v1/leases/tenant-a/nul/acquire", []byte(`{"owner":"x\u0000y","ttl_ms":60000}`), 400),
				post("/v1/leases/tenant-a/job/release", fmt.Appendf(nil, `{"owner":"tenant\u0000","token":%d}`, jobToken), 400),
				post("/v1/leases/tenant-a/nul/acquire", []byte(`{"owner":"x","ttl_ms":60000,"request_id":"r\u0000"}`), 400),
				get("/v1/leases/other/secret%00", 400),
				get("/v1/leases?prefix=tenant-a/%00", 400),
			}
		})},
		{name: "look-alikes", next: cycle(func() []request {
			return []request{
				post("/v1/leases/tenant-a%EF%BC%8Fjob/acquire", acquireBody, 403),      // fullwidth solidus U+FF0F
				post("/v1/leases/tenant-a%E2%88%95job/acquire", acquireBody, 403),      // division slash U+2215
				post("/v1/leases/ten%D0%B0nt-a/job/release", releaseJobBody(), 403),    // Cyrillic а U+0430
				post("/v1/leases/t%D0%B5nant-a/new/acquire", acquireBody, 403),         // Cyrillic е U+0435
				post("/v1/leases/tenant%E2%80%90a/new/acquire", acquireBody, 403),      // hyphen U+2010
				post("/v1/leases/%EF%BD%94enant-a/new/acquire", acquireBody, 403),      // fullwidth t U+FF54
				post("/v1/leases/tenant-a%CC%B8/new/acquire", acquireBody, 403),        // combining solidus overlay
				post("/v1/leases/TENANT-A/new/acquire", acquireBody, 403),              // case
				post("/v1/leases/oth%D0%B5r/secret/release", releaseSecretBody(), 403), // Cyrillic е in other/
				post("/v1/leases/other%EF%BC%8Fsecret/force-release", nil, 403),        // fullwidth solidus
				get("/v1/leases?prefix=ten%D0%B0nt-a/", 403),
				get("/v1/leases/other%E2%88%95secret", 403),
			}
		})},
	}
}

// oversized sends bodies over the server's limit: 413, and the lease
// they would release or take is untouched.
func oversized(maxBody int64) abuseCase {
	pad := func(body []byte, size int64) []byte {
		// Valid JSON up to the limit and beyond: whitespace after the value.
		return append(slices.Clone(body), bytes.Repeat([]byte(" "), int(size)-len(body))...)
	}
	data := func(size int64) []byte {
		b := []byte(`{"owner":"abuser","ttl_ms":60000,"data":"`)
		b = append(b, bytes.Repeat([]byte("x"), int(size)-len(b)-2)...)
		return append(b, '"', '}')
	}
	return abuseCase{name: "oversized-bodies", next: cycle(func() []request {
		var rs []request
		for _, size := range []int64{maxBody + 1, maxBody + 4096, 2 * maxBody, 8 * maxBody} {
			for _, chunked := range []bool{false, true} {
				rs = append(rs,
					request{method: "POST", path: "/v1/leases/tenant-a/big/acquire", auth: tenantAuth, body: data(size), chunked: chunked, want: []int{413}},
					request{method: "POST", path: "/v1/leases/tenant-a/job/release", auth: tenantAuth, body: pad(releaseJobBody(), size), chunked: chunked, want: []int{413}},
				)
			}
		}
		return rs
	})}
}

// floodCase sends n acquires of distinct names under flood/ with the flood
// token to a server whose limit lets burst of them through (and refills
// too slowly to matter): exactly burst get 200, the rest 429 with
// Retry-After, and exactly the granted names exist afterwards.
func floodCase(burst int) abuseCase {
	return abuseCase{
		name: "rate-limit",
		next: func(i int) request {
			return request{method: "POST", path: fmt.Sprintf("/v1/leases/flood/%d/acquire", i), auth: bearer(floodToken),
				body: []byte(`{"owner":"flood","ttl_ms":86400000}`), want: []int{200, 429}}
		},
		check: func(t *testing.T, ts *testServer, answers []response, before []lease) int {
			violations := 0
			granted := map[string]bool{}
			n429 := 0
			for i, a := range answers {
				switch a.status {
				case 200:
					granted[fmt.Sprintf("flood/%d", i)] = true
				case 429:
					n429++
					if a.header.Get("Retry-After") == "" {
						violations++
						t.Errorf("429 without Retry-After")
					}
				default:
					violations++
					t.Errorf("flood request %d: %d %s", i, a.status, a.body)
				}
			}
			if len(granted) != burst || n429 != len(answers)-burst {
				violations++
				t.Errorf("%d requests at twice the limit: %d granted and %d refused with 429, want %d and %d",
					len(answers), len(granted), n429, burst, len(answers)-burst)
			}
			after := ts.state()
			var extra []lease
			for _, l := range after {
				if strings.HasPrefix(l.Name, "flood/") {
					if !granted[l.Name] {
						violations++
						t.Errorf("lease %s exists but its request was refused", l.Name)
					}
					delete(granted, l.Name)
					continue
				}
				extra = append(extra, l)
			}
			if len(granted) > 0 {
				violations++
				t.Errorf("%d granted leases are missing", len(granted))
			}
			if !slices.Equal(extra, before) {
				violations++
				t.Errorf("state outside flood/ changed: %v, was %v", extra, before)
			}
			return violations
		},
	}
}

// result is what one case did.
type result struct {
	abusive, politeReqs int
	wrong, changes      int
	statuses            map[int]int
	alone, under        time.Duration
	politeN             int
}

// runCase sends n abusive requests from workers goroutines while the
// polite client runs (at most politeOps cycles; 0: until the abuse ends),
// then checks the answers and that nothing changed.
func runCase(t *testing.T, ts *testServer, p *polite, c abuseCase, n, workers, politeOps int) result {
	t.Helper()
	before := ts.state()
	eventsBefore := ts.events.Load()
	ctx, stop := context.WithCancel(context.Background())
	var pw sync.WaitGroup
	pw.Add(1)
	go func() { defer pw.Done(); p.run(ctx, politeOps) }()

	answers := make([]response, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	client := newClient()
	defer client.CloseIdleConnections()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				answers[i], errs[i] = ts.do(client, c.next(i))
			}
		}()
	}
	wg.Wait()
	stop()
	pw.Wait()

	res := result{abusive: n, statuses: map[int]int{}}
	for i := range answers {
		if errs[i] != nil {
			res.wrong++
			if res.wrong <= 5 {
				t.Errorf("%s: request %d (%s %s): %v", c.name, i, c.next(i).method, c.next(i).path, errs[i])
			}
			continue
		}
		res.statuses[answers[i].status]++
		if c.check != nil {
			continue
		}
		r := c.next(i)
		if !slices.Contains(r.want, answers[i].status) {
			res.wrong++
			if res.wrong <= 5 {
				t.Errorf("%s: %s %s: %d %s, want %v", c.name, r.method, r.path, answers[i].status, bytes.TrimSpace(answers[i].body), r.want)
			}
		}
		if answers[i].status == 401 && !strings.HasPrefix(answers[i].header.Get("WWW-Authenticate"), "Bearer") {
			res.wrong++
			t.Errorf("%s: 401 without WWW-Authenticate: Bearer", c.name)
		}
	}
	if c.check != nil {
		res.changes += c.check(t, ts, answers, before)
	} else {
		if after := ts.state(); !slices.Equal(after, before) {
			res.changes++
			t.Errorf("%s changed the leases: %v, was %v", c.name, after, before)
		}
		if d := ts.events.Load() - eventsBefore; d != 0 {
			res.changes += int(d)
			ts.evMu.Lock()
			t.Errorf("%s caused %d lease events, the latest %v", c.name, d, ts.evLast[len(ts.evLast)-1])
			ts.evMu.Unlock()
		}
	}
	lat, reqs, wrong := p.take()
	res.politeReqs, res.under, res.politeN = reqs, p99(lat), len(lat)
	if len(wrong) > 0 {
		res.wrong += len(wrong)
		t.Errorf("%s: the polite client got %d wrong answers, e.g. %s", c.name, len(wrong), wrong[0])
	}
	return res
}

func report(t *testing.T, c string, res result, alone time.Duration, aloneN int) {
	t.Helper()
	codes := make([]int, 0, len(res.statuses))
	for code := range res.statuses {
		codes = append(codes, code)
	}
	sort.Ints(codes)
	var answers []string
	for _, code := range codes {
		answers = append(answers, fmt.Sprintf("%d×%d", code, res.statuses[code]))
	}
	checker := "ok"
	if res.wrong+res.changes > 0 {
		checker = "failed"
	}
	verify.Report(t, verify.Row{
		Suite: "R11", Store: "server", Ops: res.abusive + res.politeReqs, Faults: res.abusive,
		Violations: res.wrong + res.changes, Checker: checker,
		Note: fmt.Sprintf("%s: answers %s; polite p99 %s alone (n=%d), %s under abuse (n=%d)",
			c, strings.Join(answers, " "), round(alone), aloneN, round(res.under), res.politeN),
	})
	if res.wrong+res.changes != 0 {
		t.Errorf("%s: %d wrong answers, %d state changes", c, res.wrong, res.changes)
	}
}

// baseline measures the polite client alone, after a few cycles that
// open its connection and warm the server up.
func baseline(t *testing.T, p *polite, ops int) (time.Duration, int) {
	t.Helper()
	warm := min(10, ops/4)
	p.run(context.Background(), warm)
	p.take()
	p.run(context.Background(), ops-warm)
	lat, _, wrong := p.take()
	if len(wrong) > 0 {
		t.Fatalf("the polite client alone got wrong answers: %v", wrong[0])
	}
	return p99(lat), len(lat)
}

// TestR11 runs every case against one server (auth on, no rate limit),
// and the rate-limit case against a second one with a limit.
func TestR11(t *testing.T) {
	n := verify.Size(200, 1000)
	const workers = 8

	t.Run("open", func(t *testing.T) {
		ts := startServer(t, nil)
		setup(ts)
		p := newPolite(ts)
		alone, aloneN := baseline(t, p, verify.Size(200, 500))
		cases := append(unauthenticated(), escapes()...)
		cases = append(cases, oversized(ts.maxBody))
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				report(t, c.name, runCase(t, ts, p, c, n, workers, 0), alone, aloneN)
			})
		}
		t.Run("slow-headers", func(t *testing.T) {
			report(t, "slow-headers", slowHeaders(t, ts, p, n), alone, aloneN)
		})
		t.Run("slow-body", func(t *testing.T) {
			slowBody(t, ts, p, verify.Size(20, 100), alone, aloneN)
		})
	})

	// Issue 15: `leasehold serve` processes with their default bounds.
	t.Run("auth-off", func(t *testing.T) {
		p := startServeProc(t, false)
		p.acquire("", "other/secret", "admin")
		t.Run("resp-cross-protocol", func(t *testing.T) { crossProtocol(t, p, n) })
		t.Run("resp-cross-protocol-browser", func(t *testing.T) { browserCrossProtocol(t, p) })
		t.Run("http-dns-rebinding", func(t *testing.T) { rebinding(t, p, n) })
	})
	t.Run("resp-bounds", func(t *testing.T) {
		p := startServeProc(t, true, "--resp-auth-timeout", "2m")
		p.acquire(adminToken, "other/secret", "admin")
		t.Run("resp-conn-flood", func(t *testing.T) { connFlood(t, p, verify.Size(2000, 3000)) })
		t.Run("resp-pre-auth-memory", func(t *testing.T) { preAuthMemory(t, p, 3, 300) })
		t.Run("resp-unread-replies", func(t *testing.T) { unreadReplies(t, p, 300) })
		t.Run("resp-auth-guessing", func(t *testing.T) { authGuessing(t, p, 2000) })
	})

	t.Run("limited", func(t *testing.T) {
		// Twice the limit: n requests where burst = n/2 are allowed. The
		// bucket refills at one token per ~30 years, so the count is
		// exact. Every identity has that budget, so the polite client
		// does at most burst/4 cycles (burst/2 requests) alone and as many
		// under abuse.
		burst := n / 2
		ts := startServer(t, &server.Limits{PerSecond: 1e-9, Burst: burst})
		setup(ts)
		p := newPolite(ts)
		alone, aloneN := baseline(t, p, burst/4)
		report(t, "rate-limit", runCase(t, ts, p, floodCase(burst), n, workers, burst/4), alone, aloneN)
	})
}

// slowHeaders opens n connections that send a request's headers one byte
// at a time, never finishing them: the server must close every one (its
// header timeout), answer nothing else, and keep serving the polite
// client meanwhile.
func slowHeaders(t *testing.T, ts *testServer, p *polite, n int) result {
	t.Helper()
	before := ts.state()
	eventsBefore := ts.events.Load()
	ctx, stop := context.WithCancel(context.Background())
	var pw sync.WaitGroup
	pw.Add(1)
	go func() { defer pw.Done(); p.run(ctx, 0) }()

	res := result{abusive: n, statuses: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// The server must have closed a connection long before this; it is a
	// bound for a hung test, not a timing check.
	giveUp := time.Now().Add(30*headerTimeout + 30*time.Second)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := slowConn(ts.addr, i, giveUp)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				res.wrong++
				if res.wrong <= 5 {
					t.Errorf("slow connection %d: %v", i, err)
				}
			case status != 0 && status != http.StatusRequestTimeout && status != http.StatusBadRequest:
				res.wrong++
				t.Errorf("slow connection %d: answered %d", i, status)
			default:
				res.statuses[status]++
			}
		}()
	}
	wg.Wait()
	stop()
	pw.Wait()
	if after := ts.state(); !slices.Equal(after, before) {
		res.changes++
		t.Errorf("slow headers changed the leases: %v, was %v", after, before)
	}
	if d := ts.events.Load() - eventsBefore; d != 0 {
		res.changes += int(d)
		t.Errorf("slow headers caused %d lease events", d)
	}
	lat, reqs, wrong := p.take()
	res.politeReqs, res.under, res.politeN = reqs, p99(lat), len(lat)
	if len(wrong) > 0 {
		res.wrong += len(wrong)
		t.Errorf("slow headers: the polite client got %d wrong answers, e.g. %s", len(wrong), wrong[0])
	}
	return res
}

// slowConn sends the start of a request to release the tenant's
// lease, then one more header byte every 50ms, until the server closes the
// connection. It returns the status of anything the server answered
// before closing: 0 when it closed without an answer (net/http's usual
// reaction to its header timeout) or net/http's own plain "400 Bad
// Request", which it sends to a few of the connections when hundreds time
// out at once.
func slowConn(addr string, i int, giveUp time.Time) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /v1/leases/tenant-a/job/release HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n", addr, tenantToken)
	if _, err := io.WriteString(conn, head); err != nil {
		return 0, fmt.Errorf("write the request line: %w", err)
	}
	closed := make(chan struct{})
	var status int
	var readErr error
	go func() {
		defer close(closed)
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) || isReset(err) {
				return // closed without an answer
			}
			readErr = err
			return
		}
		if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &status); err != nil {
			readErr = fmt.Errorf("answer %q", line)
		}
		io.Copy(io.Discard, br) // until the server closes
	}()
	slow := fmt.Sprintf("X-Slow-%d: ", i)
	for j := 0; ; j++ {
		select {
		case <-closed:
			return status, readErr
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(giveUp) {
			return 0, errors.New("the server kept the connection open")
		}
		// A write may fail once the server has closed: the reader then
		// reports how it ended.
		conn.Write([]byte{slow[j%len(slow)]})
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && (strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe"))
}
