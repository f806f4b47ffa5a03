package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestHTTPStrictJSON: keys that differ from a field only in case,
// duplicate keys, unknown keys (nested ones too), invalid UTF-8 and lone
// surrogate escapes are refused with 400 and change nothing.
func TestHTTPStrictJSON(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	cases := []struct{ path, body, field, reason string }{
		{"/v1/leases/p/acquire", `{"owner":"a","OWNER":"b","ttl_ms":60000}`, "OWNER", `did you mean "owner"`},
		{"/v1/leases/p/acquire", `{"Owner":"a","ttl_ms":60000}`, "Owner", "case-sensitive"},
		{"/v1/leases/p/acquire", `{"owner":"a","owner":"b","ttl_ms":60000}`, "owner", "duplicate"},
		{"/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"ttl_ms":60000}`, "ttl_ms", "duplicate"},
		{"/v1/leases/p/acquire", "{\"owner\":\"a\xff\",\"ttl_ms\":60000}", "body", "UTF-8"},
		{"/v1/leases/p/acquire", "{\"owner\":\"a\",\"ttl_ms\":60000}\xc0", "body", "UTF-8"},
		{"/v1/leases/p/acquire", `{"owner":"a\ud800","ttl_ms":60000}`, "body", "surrogate"},
		{"/v1/leases/p/acquire", `{"owner":"a\udc00\ud800","ttl_ms":60000}`, "body", "surrogate"},
		{"/v1/leases/p/acquire", `{"owner":"a","ttl_ms":60000,"bogus":{"x":1}}`, "bogus", "unknown field"},
		{"/v1/sessions", `{"TTL_MS":15000}`, "TTL_MS", "case-sensitive"},
		{"/v1/records/c/add", `{"delta":1,"Delta":2}`, "Delta", "case-sensitive"},
		{"/v1/txn", `{"then":[{"key":"k","VALUE":"x"}]}`, "then[0].VALUE", "case-sensitive"},
		{"/v1/txn", `{"then":[{"key":"k","value":"x","key":"j"}]}`, "then[0].key", "duplicate"},
		{"/v1/txn", `{"then":[{"key":"k","value":"x","extra":1}]}`, "then[0].extra", "unknown field"},
		{"/v1/txn", `{"then":[],"then":[{"key":"k","value":"x"}]}`, "then", "duplicate"},
		{"/v1/leases/p/force-release", `{"force":true}`, "force", "unknown field"},
		// The semaphore's body embeds the acquire's: its fields are checked too.
		{"/v1/semaphores/s/acquire", `{"permits":2,"owner":"a","Owner":"b","ttl_ms":60000}`, "Owner", `did you mean "owner"`},
		{"/v1/semaphores/s/acquire", `{"permits":2,"owner":5,"ttl_ms":60000}`, "owner", "want a JSON string"},
		{"/v1/semaphores/s/acquire", `{"permits":2,"owner":"a","ttl_ms":60000,"AcquireBody":{}}`, "AcquireBody", "unknown field"},
	}
	for _, c := range cases {
		r := ts.do("POST", c.path, "", c.body)
		if r.status != 400 || r.problemType() != "invalid" || r.str("field") != c.field || !strings.Contains(r.str("reason"), c.reason) {
			t.Errorf("POST %s %q: %d %s; want 400 invalid, field %q, reason with %q", c.path, c.body, r.status, r.body, c.field, c.reason)
		}
	}
	if n := ts.names(); len(n) != 0 {
		t.Errorf("refused bodies left leases: %v", n)
	}
	if s := recordState(ts.eng); s != "" {
		t.Errorf("refused bodies left records: %s", s)
	}
	// Escaped surrogate pairs, escaped backslashes before a u, and keys
	// inside values (data) are fine.
	r := ts.do("POST", "/v1/leases/p/acquire", "", `{"owner":"a\ud83d\ude00","ttl_ms":60000,"data":"{\"OWNER\":1,\"owner\":2} \\ud800"}`)
	ts.want(r, 200, "")
	if r.str("owner") != "a\U0001F600" || r.str("data") != `{"OWNER":1,"owner":2} \ud800` {
		t.Errorf("acquire %s", r.body)
	}
}

// TestHTTPStrictJSONEveryRoute: every row that takes a JSON body (the
// POST rows) refuses a duplicate key and invalid UTF-8 through the one
// decode path, and is left unchanged.
func TestHTTPStrictJSONEveryRoute(t *testing.T) {
	ts := newTableServer(t)
	const tok = "tok-root-admin"
	n := 0
	for _, row := range httpRoutes {
		if row.methods[0] != "POST" {
			continue
		}
		exp := htSamples[row.pattern+" POST"]
		if exp.call == nil {
			t.Errorf("no sample for %s", row.pattern)
			continue
		}
		method, path, body, hdr := exp.call("p")
		bad := []string{"{\"\xff\":1}", `{"nope":1}`}
		if body != "" {
			// The body with its first member repeated.
			dec := json.NewDecoder(strings.NewReader(body))
			dec.Token()
			k, _ := dec.Token()
			var v json.RawMessage
			dec.Decode(&v)
			kb, _ := json.Marshal(k)
			bad = append(bad, "{"+string(kb)+":"+string(v)+","+body[1:])
			bad = append(bad, "{"+string(bytes.ToUpper(kb))+":"+string(v)+","+body[1:])
		}
		for _, b := range bad {
			code, typ := htCall(t, ts, method, path, tok, b, hdr)
			if code != 400 || typ != "invalid" {
				t.Errorf("%s %s %q: %d %s, want 400 invalid", method, path, b, code, typ)
			}
			n++
		}
	}
	if len(ts.names()) != 0 || recordState(ts.eng) != "" {
		t.Errorf("refused bodies changed state: leases %v, records %s", ts.names(), recordState(ts.eng))
	}
	if n < 30 {
		t.Errorf("only %d calls", n)
	}
}
