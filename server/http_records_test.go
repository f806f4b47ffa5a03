package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

// recordState lists every record as key=version:value, straight from the
// engine.
func recordState(e *Engine) string {
	e.lock()
	defer e.unlock()
	var out []string
	for k, r := range e.recs.m {
		out = append(out, k+"="+itoa(r.version)+":"+r.value)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

func TestRecordsHTTPETagFlow(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	const p = "/v1/records/cfg/feature"

	// Writes without a precondition are refused.
	ts.want(ts.do("PUT", p, "", "on"), 428, "precondition-required")
	ts.want(ts.do("GET", p, "", ""), 404, "not-found")

	// Create only.
	r := ts.do("PUT", p, "", "on", "If-None-Match", "*")
	ts.want(r, 201, "")
	etag := r.header.Get("ETag")
	if etag != `"1"` || r.num("version") != 1 || r.str("key") != "cfg/feature" {
		t.Fatalf("create: ETag %s, %s", etag, r.body)
	}
	r = ts.do("PUT", p, "", "again", "If-None-Match", "*")
	ts.want(r, 412, "precondition-failed")
	if r.num("current_version") != 1 || r.num("expected_version") != 0 || r.str("key") != "cfg/feature" {
		t.Fatalf("412 body %s", r.body)
	}

	// Read: raw bytes by default, JSON when asked.
	r = ts.do("GET", p, "", "")
	ts.want(r, 200, "")
	if string(r.body) != "on" || r.header.Get("ETag") != etag || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("raw get: %q %v", r.body, r.header)
	}
	r = ts.do("GET", p, "", "", "Accept", "application/json")
	ts.want(r, 200, "")
	if r.str("value") != "on" || r.num("version") != 1 || r.str("key") != "cfg/feature" || r.header.Get("ETag") != etag {
		t.Fatalf("json get: %s", r.body)
	}
	r = ts.do("HEAD", p, "", "")
	if r.status != 200 || len(r.body) != 0 || r.header.Get("ETag") != etag {
		t.Fatalf("head: %d %q", r.status, r.body)
	}
	ts.want(ts.do("GET", p, "", "", "If-None-Match", etag), 304, "")
	ts.want(ts.do("GET", p, "", "", "If-None-Match", `W/"1", "7"`), 304, "")
	ts.want(ts.do("GET", p, "", "", "If-None-Match", `"7"`), 200, "")

	// Update with the version read.
	r = ts.do("PUT", p, "", "off", "If-Match", etag)
	ts.want(r, 200, "")
	if r.header.Get("ETag") != `"2"` || r.num("version") != 2 {
		t.Fatalf("update: %v %s", r.header, r.body)
	}
	r = ts.do("PUT", p, "", "stale", "If-Match", etag)
	ts.want(r, 412, "precondition-failed")
	if r.num("current_version") != 2 || r.num("expected_version") != 1 {
		t.Fatalf("412 body %s", r.body)
	}
	if got := recordState(ts.eng); got != "cfg/feature=2:off" {
		t.Fatalf("state %s", got)
	}

	// Malformed preconditions are 400 and change nothing.
	for _, hdr := range [][]string{
		{"If-Match", "*"},
		{"If-Match", "2"},
		{"If-Match", `W/"2"`},
		{"If-Match", `"2", "3"`},
		{"If-Match", `"0"`},
		{"If-Match", `"x"`},
		{"If-None-Match", `"2"`},
		{"If-Match", `"2"`, "If-None-Match", "*"},
	} {
		r := ts.do("PUT", p, "", "bad", hdr...)
		if r.status != 400 || r.problemType() != "invalid" {
			t.Errorf("PUT with %q: %d %s, want 400", hdr, r.status, r.body)
		}
	}
	if got := recordState(ts.eng); got != "cfg/feature=2:off" {
		t.Fatalf("state %s", got)
	}

	// Binary values: raw both ways, base64 in JSON.
	bin := "\x00\xff\xfe"
	r = ts.do("PUT", "/v1/records/bin", "", bin, "If-None-Match", "*", "Content-Type", "application/octet-stream")
	ts.want(r, 201, "")
	r = ts.do("GET", "/v1/records/bin", "", "")
	if string(r.body) != bin {
		t.Fatalf("binary raw: %q", r.body)
	}
	r = ts.do("GET", "/v1/records/bin", "", "", "Accept", "application/json")
	if r.str("value_base64") != "AP/+" || r.json["value"] != nil {
		t.Fatalf("binary json: %s", r.body)
	}
	// The body is the value whatever its type: JSON is stored as is.
	r = ts.do("PUT", "/v1/records/doc", "", `{"a":1}`, "If-None-Match", "*")
	ts.want(r, 201, "")
	if r = ts.do("GET", "/v1/records/doc", "", ""); string(r.body) != `{"a":1}` {
		t.Fatalf("json value: %q", r.body)
	}
	ts.want(ts.do("PUT", "/v1/records/gz", "", "x", "If-None-Match", "*", "Content-Encoding", "gzip"), 415, "unsupported-media-type")
	ts.want(ts.do("PUT", "/v1/records/big", "", strings.Repeat("x", leasehold.MaxValueLen+1), "If-None-Match", "*"), 413, "too-large")
	ts.want(ts.do("PUT", "/v1/records/big", "", strings.Repeat("x", leasehold.MaxValueLen), "If-None-Match", "*"), 201, "")

	// Delete.
	ts.want(ts.do("DELETE", p, "", ""), 428, "precondition-required")
	ts.want(ts.do("DELETE", p, "", "", "If-None-Match", "*"), 400, "invalid")
	r = ts.do("DELETE", p, "", "", "If-Match", etag)
	ts.want(r, 412, "precondition-failed")
	if r.num("current_version") != 2 {
		t.Fatalf("412 body %s", r.body)
	}
	ts.want(ts.do("DELETE", p, "", "", "If-Match", `"2"`), 204, "")
	ts.want(ts.do("DELETE", p, "", "", "If-Match", `"2"`), 404, "not-found")
	ts.want(ts.do("GET", p, "", ""), 404, "not-found")
	// Updating an absent record is a failed precondition, not a create.
	r = ts.do("PUT", p, "", "x", "If-Match", `"2"`)
	ts.want(r, 412, "precondition-failed")
	if r.num("current_version") != 0 {
		t.Fatalf("412 body %s", r.body)
	}
	// Its next life starts above its old versions.
	r = ts.do("PUT", p, "", "back", "If-None-Match", "*")
	ts.want(r, 201, "")
	if r.header.Get("ETag") != `"3"` {
		t.Fatalf("recreated with %s, want \"3\"", r.header.Get("ETag"))
	}

	// Methods and routes.
	ts.want(ts.do("POST", p, "", "{}"), 405, "method-not-allowed")
	ts.want(ts.do("PATCH", p, "", "{}"), 405, "method-not-allowed")
	ts.want(ts.do("GET", "/v1/txn", "", ""), 405, "method-not-allowed")
}

func TestRecordsHTTPNames(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	// One decoding: %2F is a slash; the key is the same either way.
	ts.want(ts.do("PUT", "/v1/records/a%2Fb", "", "1", "If-None-Match", "*"), 201, "")
	r := ts.do("GET", "/v1/records/a/b", "", "", "Accept", "application/json")
	ts.want(r, 200, "")
	if r.str("key") != "a/b" {
		t.Fatalf("key %q", r.str("key"))
	}
	// A key may end in /add: only a POST's last segment is an action.
	ts.want(ts.do("PUT", "/v1/records/x/add", "", "1", "If-None-Match", "*"), 201, "")
	r = ts.do("POST", "/v1/records/x/add/add", "", `{"delta":2}`)
	ts.want(r, 200, "")
	if r.str("key") != "x/add" || r.num("value") != 3 {
		t.Fatalf("add to x/add: %s", r.body)
	}
	for _, p := range []string{
		"/v1/records/a%252Fb", "/v1/records/a/../b", "/v1/records/a//b", "/v1/records/a/%2E/b",
		"/v1/records/a%zz", "/v1/records/a%00b", "/v1/records/%FF",
	} {
		r := ts.do("PUT", p, "", "x", "If-None-Match", "*")
		if r.status != 400 {
			t.Errorf("PUT %s: %d %s, want 400", p, r.status, r.body)
		}
	}
	if got := recordState(ts.eng); got != "a/b=1:1 x/add=2:3" {
		t.Fatalf("state %s", got)
	}
}

func TestRecordsHTTPAdd(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	r := ts.do("POST", "/v1/records/hits/add", "", `{"delta":5}`)
	ts.want(r, 200, "")
	if r.num("value") != 5 || r.num("version") != 1 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("add: %s", r.body)
	}
	r = ts.do("POST", "/v1/records/hits/add", "", `{"delta":-2}`)
	if r.num("value") != 3 || r.num("version") != 2 {
		t.Fatalf("add: %s", r.body)
	}
	if r = ts.do("GET", "/v1/records/hits", "", ""); string(r.body) != "3" {
		t.Fatalf("counter value %q", r.body)
	}
	ts.want(ts.do("POST", "/v1/records/hits/add", "", `{}`), 400, "invalid")
	ts.want(ts.do("POST", "/v1/records/hits/add", "", `{"delta":1.5}`), 400, "invalid")
	ts.want(ts.do("POST", "/v1/records/hits/add", "", `{"delta":1,"x":1}`), 400, "invalid")
	ts.want(ts.do("PUT", "/v1/records/word", "", "abc", "If-None-Match", "*"), 201, "")
	ts.want(ts.do("POST", "/v1/records/word/add", "", `{"delta":1}`), 400, "invalid")
	ts.want(ts.do("PUT", "/v1/records/max", "", "9223372036854775807", "If-None-Match", "*"), 201, "")
	ts.want(ts.do("POST", "/v1/records/max/add", "", `{"delta":1}`), 400, "invalid")
	if got := recordState(ts.eng); got != "hits=2:3 max=1:9223372036854775807 word=1:abc" {
		t.Fatalf("state %s", got)
	}
}

func TestRecordsHTTPTxn(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("PUT", "/v1/records/order/1", "", "new", "If-None-Match", "*"), 201, "")
	ts.want(ts.do("POST", "/v1/records/balance/alice/add", "", `{"delta":100}`), 200, "")

	r := ts.do("POST", "/v1/txn", "", `{"if":[{"key":"order/1","version":1}],
		"then":[{"key":"order/1","value":"paid"},{"key":"balance/alice","add":-30},
		        {"key":"receipt/1","value_base64":"AP8="},{"key":"tmp","delete":true}]}`)
	ts.want(r, 200, "")
	vs, _ := r.json["versions"].(map[string]any)
	if vs["order/1"] != 2.0 || vs["balance/alice"] != 2.0 || vs["receipt/1"] != 1.0 || vs["tmp"] != 0.0 || len(vs) != 4 {
		t.Fatalf("txn: %s", r.body)
	}
	want := "balance/alice=2:70 order/1=2:paid receipt/1=1:\x00\xff"
	if got := recordState(ts.eng); got != want {
		t.Fatalf("state %q", got)
	}

	// A failed condition changes nothing and names the key.
	r = ts.do("POST", "/v1/txn", "", `{"if":[{"key":"order/1","version":2},{"key":"receipt/1","version":0}],
		"then":[{"key":"order/1","value":"refunded"},{"key":"balance/alice","add":30}]}`)
	ts.want(r, 409, "conflict")
	if r.str("key") != "receipt/1" || r.num("expected_version") != 0 || r.num("current_version") != 1 {
		t.Fatalf("conflict: %s", r.body)
	}
	// So does a failing write (an add to a non-counter) after the
	// conditions held.
	r = ts.do("POST", "/v1/txn", "", `{"if":[{"key":"order/1","version":2}],
		"then":[{"key":"order/1","value":"refunded"},{"key":"receipt/1","add":1}]}`)
	ts.want(r, 400, "invalid")
	for _, body := range []string{
		`{}`,
		`{"then":[]}`,
		`{"then":[{"key":"a","value":"x"},{"key":"a","delete":true}]}`,
		`{"then":[{"key":"a","value":"x","delete":true}]}`,
		`{"then":[{"key":"a","value":"x","value_base64":"eA=="}]}`,
		`{"then":[{"key":"a","value_base64":"%%%"}]}`,
		`{"then":[{"key":"a/../b","value":"x"}]}`,
		`{"then":[{"key":"","value":"x"}]}`,
		`{"if":[{"key":"a","version":-1}],"then":[{"key":"a","value":"x"}]}`,
		`{"then":[{"key":"a","value":"x"}],"else":[]}`,
	} {
		if r := ts.do("POST", "/v1/txn", "", body); r.status != 400 {
			t.Errorf("txn %s: %d %s, want 400", body, r.status, r.body)
		}
	}
	if got := recordState(ts.eng); got != want {
		t.Fatalf("state after refused transactions %q", got)
	}
}

func TestRecordsHTTPAuth(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{Auth: htAuth(t)})
	ts.want(ts.do("PUT", "/v1/records/team/a", htTeam, "v", "If-None-Match", "*"), 201, "")
	ts.want(ts.do("PUT", "/v1/records/other/a", htOther, "v", "If-None-Match", "*"), 201, "")
	before := recordState(ts.eng)
	for _, c := range []struct {
		method, path, token, body string
		hdr                       []string
		status                    int
	}{
		{"GET", "/v1/records/team/a", "", "", nil, 401},
		{"PUT", "/v1/records/team/a", "wrong", "x", []string{"If-Match", `"1"`}, 401},
		{"PUT", "/v1/records/team/a", htRead, "x", []string{"If-Match", `"1"`}, 403},       // read-only token
		{"PUT", "/v1/records/team/ro/a", htTeam, "x", []string{"If-None-Match", "*"}, 403}, // most specific grant: read
		{"PUT", "/v1/records/other/a", htTeam, "x", []string{"If-Match", `"1"`}, 403},      // outside the prefix
		{"PUT", "/v1/records/other%2Fa", htTeam, "x", []string{"If-Match", `"1"`}, 403},
		{"PUT", "/v1/records/team/../other/a", htTeam, "x", []string{"If-Match", `"1"`}, 400},
		{"PUT", "/v1/records/team/a", htRead, "x", nil, 403}, // refused before the precondition is looked at
		{"DELETE", "/v1/records/team/a", htRead, "", []string{"If-Match", `"1"`}, 403},
		{"DELETE", "/v1/records/other/a", htTeam, "", []string{"If-Match", `"1"`}, 403},
		{"POST", "/v1/records/team/a/add", htRead, `{"delta":1}`, nil, 403},
		{"POST", "/v1/records/other/n/add", htTeam, `{"delta":1}`, nil, 403},
		{"GET", "/v1/records/other/a", htTeam, "", nil, 403},
		{"POST", "/v1/txn", htRead, `{"then":[{"key":"team/a","value":"x"}]}`, nil, 403},
		// Writes inside the grant with one outside it: all refused.
		{"POST", "/v1/txn", htTeam, `{"then":[{"key":"team/a","value":"x"},{"key":"other/a","value":"x"}]}`, nil, 403},
		// A condition needs read access.
		{"POST", "/v1/txn", htTeam, `{"if":[{"key":"other/a","version":1}],"then":[{"key":"team/a","value":"x"}]}`, nil, 403},
		{"POST", "/v1/txn", "", `{"then":[{"key":"team/a","value":"x"}]}`, nil, 401},
	} {
		r := ts.do(c.method, c.path, c.token, c.body, c.hdr...)
		if r.status != c.status {
			t.Errorf("%s %s (token %q): %d %s, want %d", c.method, c.path, c.token, r.status, r.body, c.status)
		}
	}
	if got := recordState(ts.eng); got != before {
		t.Fatalf("refused requests changed the records: %s, was %s", got, before)
	}
	// What is allowed is allowed.
	ts.want(ts.do("GET", "/v1/records/team/a", htRead, ""), 200, "")
	ts.want(ts.do("GET", "/v1/records/team/a", htTeam, ""), 200, "")
	ts.want(ts.do("PUT", "/v1/records/team/a", htTeam, "w", "If-Match", `"1"`), 200, "")
	r := ts.do("POST", "/v1/txn", htTeam, `{"if":[{"key":"team/ro/x","version":0}],"then":[{"key":"team/b","value":"x"}]}`)
	ts.want(r, 200, "")
}

// A proxy in front of a store without records answers 501, clearly.
func TestRecordsHTTPUnsupported(t *testing.T) {
	p := pxNew(t, pxNoRecords{memory.New()}, ProxyConfig{})
	srv := httptest.NewServer(NewHandler(p, HandlerOptions{}))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(context.Background(), "PUT", srv.URL+"/v1/records/a", strings.NewReader("x"))
	req.Header.Set("If-None-Match", "*")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 501 {
		t.Fatalf("PUT through a proxy without records: %d", res.StatusCode)
	}
}
