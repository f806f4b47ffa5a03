package abuse

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/testrig/verify"
)

// The HTTP half of issue 15's parity gaps and holder spoofing, against a
// `leasehold serve` process with auth on: JSON bodies whose keys differ
// from a field only in case, repeat, are unknown, or whose bytes are not
// UTF-8; a reader of one prefix reading the whole server's activity in
// /v1/stats and /metrics; a writer of a prefix releasing or renewing
// another holder's lease with the owner and token GET shows it; and a
// list of more leases than one page holds.

func TestR11HTTPParity(t *testing.T) {
	p := startParityServe(t, false)
	t.Run("http-strict-json", func(t *testing.T) { parityStrictJSON(t, p) })
	t.Run("http-stats-reader", func(t *testing.T) { parityStats(t, p) })
	t.Run("http-holder-spoofing", func(t *testing.T) { parityHTTPSpoofing(t, p) })
	t.Run("http-list-pages", func(t *testing.T) { parityListPages(t, p, verify.Size(20000, 50000)) })
}

// leaseJSON is a lease as the HTTP API shows it, with the secret of an
// acquire answer.
type leaseJSON struct {
	Name   string `json:"name"`
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	TTLMS  int64  `json:"ttl_ms"`
	Data   string `json:"data"`
	Secret string `json:"secret"`
}

// getLease reads name as the admin; ok is false if it is not live.
func getLease(t *testing.T, p *serveProc, name string) (leaseJSON, bool) {
	t.Helper()
	res, err := p.do(p.client, request{method: "GET", path: "/v1/leases/" + name, auth: bearer(adminToken)})
	if err != nil {
		t.Fatal(err)
	}
	var l leaseJSON
	if res.status != 200 || json.Unmarshal(res.body, &l) != nil {
		return leaseJSON{}, false
	}
	return l, true
}

// parityStrictJSON: every body is 400 and changes nothing — neither the
// lease an acquire would take nor the one a renew or release would touch.
func parityStrictJSON(t *testing.T, p *serveProc) {
	res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/p/strict/held/acquire", auth: bearer(parityHolder),
		body: []byte(`{"owner":"holder","ttl_ms":600000,"data":"original"}`)})
	var held leaseJSON
	if err != nil || res.status != 200 || json.Unmarshal(res.body, &held) != nil {
		t.Fatalf("holder acquire: %d %s %v", res.status, res.body, err)
	}
	tok := held.Token
	cases := []struct{ what, path, body string }{
		{"case-variant key", "/v1/leases/p/strict/new/acquire", `{"owner":"holder","OWNER":"evil","ttl_ms":600000}`},
		{"case-variant key only", "/v1/leases/p/strict/new/acquire", `{"Owner":"evil","TTL_MS":600000}`},
		{"duplicate key", "/v1/leases/p/strict/new/acquire", `{"owner":"holder","ttl_ms":600000,"owner":"evil"}`},
		{"invalid UTF-8", "/v1/leases/p/strict/new/acquire", "{\"owner\":\"ev\xffil\",\"ttl_ms\":600000}"},
		{"lone surrogate", "/v1/leases/p/strict/new/acquire", `{"owner":"ev\udc00il","ttl_ms":600000}`},
		{"unknown key", "/v1/leases/p/strict/new/acquire", `{"owner":"holder","ttl_ms":600000,"ttl":1}`},
		{"case-variant key on renew", "/v1/leases/p/strict/held/renew",
			fmt.Sprintf(`{"owner":"holder","token":%d,"ttl_ms":600000,"TTL_MS":10,"secret":%q}`, tok, held.Secret)},
		{"duplicate key on renew", "/v1/leases/p/strict/held/renew",
			fmt.Sprintf(`{"owner":"holder","token":%d,"ttl_ms":600000,"ttl_ms":10,"secret":%q}`, tok, held.Secret)},
		{"invalid UTF-8 on release", "/v1/leases/p/strict/held/release",
			fmt.Sprintf("{\"owner\":\"holder\",\"token\":%d,\"secret\":%q,\"x\":\"\xc0\"}", tok, held.Secret)},
		{"duplicate key on release", "/v1/leases/p/strict/held/release",
			fmt.Sprintf(`{"owner":"holder","token":%d,"token":%d,"secret":%q}`, tok, tok, held.Secret)},
	}
	violations := 0
	for _, c := range cases {
		res, err := p.do(p.client, request{method: "POST", path: c.path, auth: bearer(parityHolder), body: []byte(c.body)})
		if err != nil || res.status != 400 || !strings.Contains(string(res.body), "urn:leasehold:problem:invalid") {
			violations++
			t.Errorf("%s: %q → %d %s %v, want 400 invalid", c.what, c.body, res.status, res.body, err)
		}
		if l, ok := getLease(t, p, "p/strict/new"); ok {
			violations++
			t.Errorf("%s: p/strict/new was taken: %+v", c.what, l)
		}
		if l, ok := getLease(t, p, "p/strict/held"); !ok || l.Owner != "holder" || l.Token != tok || l.TTLMS != 600000 || l.Data != "original" {
			violations++
			t.Errorf("%s: p/strict/held is %+v (live %v), want the holder's, token %d, ttl 600000", c.what, l, ok, tok)
		}
	}
	hdRow(t, "http-strict-json", len(cases), len(cases), violations,
		"acquire, renew and release bodies with a key differing from a field only in case (OWNER), a repeated key, an unknown key, invalid UTF-8 or a lone surrogate escape: 400 invalid each time, no lease taken, the held one unchanged")
}

// parityStats: the server's activity is for readers of the whole name
// space only.
func parityStats(t *testing.T, p *serveProc) {
	violations, ops := 0, 0
	for _, path := range []string{"/v1/stats", "/metrics"} {
		res, err := p.do(p.client, request{method: "GET", path: path, auth: bearer(parityReader)})
		ops++
		if err != nil || res.status != 403 {
			violations++
			t.Errorf("reader of p/: GET %s = %d %.200s %v, want 403", path, res.status, res.body, err)
		}
		res, err = p.do(p.client, request{method: "GET", path: path, auth: bearer(adminToken)})
		ops++
		if err != nil || res.status != 200 {
			violations++
			t.Errorf("admin: GET %s = %d %v, want 200", path, res.status, err)
		}
	}
	hdRow(t, "http-stats-reader", ops, ops/2, violations,
		"a reader of p/ asks for /v1/stats and /metrics (the activity of every prefix): 403; an identity with a grant on the whole name space gets them")
}

// parityHTTPSpoofing: the spy reads the holder's lease (owner and token,
// no secret) and tries to release and renew it with them: 403 bad-proof
// each time, the lease unchanged; the holder, with its secret, can.
func parityHTTPSpoofing(t *testing.T, p *serveProc) {
	res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/p/victim/acquire", auth: bearer(parityHolder),
		body: []byte(`{"owner":"holder-1","ttl_ms":600000}`)})
	var g leaseJSON
	if err != nil || res.status != 200 || json.Unmarshal(res.body, &g) != nil {
		t.Fatalf("holder acquire: %d %s %v", res.status, res.body, err)
	}
	violations, ops := 0, 1
	if g.Secret == "" {
		violations++
		t.Errorf("the acquire answer %s carries no secret", res.body)
	}
	seen, err := p.do(p.client, request{method: "GET", path: "/v1/leases/p/victim", auth: bearer(paritySpy)})
	ops++
	var l leaseJSON
	if err != nil || seen.status != 200 || json.Unmarshal(seen.body, &l) != nil || l.Owner != "holder-1" || l.Token != g.Token {
		t.Fatalf("spy GET: %d %s %v", seen.status, seen.body, err)
	}
	if g.Secret != "" && strings.Contains(string(seen.body), g.Secret) || strings.Contains(string(seen.body), `"secret"`) {
		violations++
		t.Errorf("GET shows the secret: %s", seen.body)
	}
	// A grant of the spy's own, whose secret it legitimately has.
	res, err = p.do(p.client, request{method: "POST", path: "/v1/leases/p/spy-own/acquire", auth: bearer(paritySpy),
		body: []byte(`{"owner":"holder-1","ttl_ms":600000}`)})
	var own leaseJSON
	if err != nil || res.status != 200 || json.Unmarshal(res.body, &own) != nil {
		t.Fatalf("spy acquire: %d %s %v", res.status, res.body, err)
	}
	proofs := []string{"", `,"secret":""`, `,"secret":"guessed-secret"`, fmt.Sprintf(`,"secret":%q`, own.Secret),
		fmt.Sprintf(`,"secret":%q`, strings.ToUpper(g.Secret))}
	attempts := 0
	for _, proof := range proofs {
		for _, a := range []struct{ action, body string }{
			{"release", fmt.Sprintf(`{"owner":%q,"token":%d%s}`, l.Owner, l.Token, proof)},
			{"renew", fmt.Sprintf(`{"owner":%q,"token":%d,"ttl_ms":1000%s}`, l.Owner, l.Token, proof)},
		} {
			res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/p/victim/" + a.action, auth: bearer(paritySpy), body: []byte(a.body)})
			ops++
			attempts++
			if err != nil || res.status != 403 || !strings.Contains(string(res.body), "urn:leasehold:problem:bad-proof") {
				violations++
				t.Errorf("spy %s %s: %d %s %v, want 403 bad-proof", a.action, a.body, res.status, res.body, err)
			}
			if after, ok := getLease(t, p, "p/victim"); !ok || after.Owner != "holder-1" || after.Token != g.Token || after.TTLMS != 600000 {
				violations++
				t.Errorf("after spy %s %s the lease is %+v (live %v), want the holder's with ttl 600000", a.action, a.body, after, ok)
			}
		}
	}
	// The holder, with its secret, renews and releases.
	for _, a := range []struct {
		action, body string
		want         int
	}{
		{"renew", fmt.Sprintf(`{"owner":"holder-1","token":%d,"ttl_ms":300000,"secret":%q}`, g.Token, g.Secret), 200},
		{"release", fmt.Sprintf(`{"owner":"holder-1","token":%d,"secret":%q}`, g.Token, g.Secret), 204},
	} {
		res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/p/victim/" + a.action, auth: bearer(parityHolder), body: []byte(a.body)})
		ops++
		if err != nil || res.status != a.want {
			violations++
			t.Errorf("holder %s with its secret: %d %s %v, want %d", a.action, res.status, res.body, err, a.want)
		}
	}
	if after, ok := getLease(t, p, "p/victim"); ok {
		violations++
		t.Errorf("after the holder's release the lease is %+v", after)
	}
	hdRow(t, "http-holder-spoofing", ops, attempts, violations,
		"a writer of p/ reads another holder's lease with GET and POSTs release/renew with its owner and token, without a secret, an empty, made-up or upper-cased one, or its own grant's: 403 bad-proof each time, the lease unchanged; the holder renews and releases with its secret")
}

// parityListPages: with n leases under one prefix (more than the 10,000 a
// page holds), GET /v1/leases returns them a page at a time, each at most
// 10,000, every lease exactly once, in name order, next linking the pages.
func parityListPages(t *testing.T, p *serveProc, n int) {
	acquireMany(t, mustRESP(t, p.resp, parityHolder), n)
	violations, ops, seen, pages, after := 0, n, 0, 0, ""
	for {
		path := "/v1/leases?prefix=p/many/"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		res, err := p.do(p.client, request{method: "GET", path: path, auth: bearer(parityReader)})
		ops++
		var page struct {
			Leases []leaseJSON `json:"leases"`
			Next   *string     `json:"next"`
		}
		if err != nil || res.status != 200 || json.Unmarshal(res.body, &page) != nil {
			violations++
			t.Errorf("GET %s: %d %.200s %v", path, res.status, res.body, err)
			break
		}
		pages++
		if len(page.Leases) > 10000 {
			violations++
			t.Errorf("page %d has %d leases, want at most 10,000", pages, len(page.Leases))
		}
		for _, l := range page.Leases {
			if want := fmt.Sprintf("p/many/%06d", seen); l.Name != want {
				violations++
				t.Errorf("page %d: lease %q, want %q", pages, l.Name, want)
				break
			}
			seen++
		}
		if page.Next == nil || pages > n {
			break
		}
		if len(page.Leases) == 0 || *page.Next != page.Leases[len(page.Leases)-1].Name {
			violations++
			t.Errorf("page %d: next %q is not its last name", pages, *page.Next)
			break
		}
		after = *page.Next
	}
	if seen != n || pages != (n+9999)/10000 {
		violations++
		t.Errorf("%d of %d leases in %d pages, want all in %d", seen, n, pages, (n+9999)/10000)
	}
	hdRow(t, "http-list-pages", ops, 0, violations,
		fmt.Sprintf("%d leases under p/many/, listed by a reader of p/ with GET /v1/leases and next: %d pages of at most 10,000, every lease once, in order", n, pages))
}
