package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// replayAuth has two writers on jobs/: alice, and mallory, who knows
// alice's owner and request id (both public or predictable).
func replayAuth(t *testing.T) *Auth {
	t.Helper()
	return testAuth(t, []TokenConfig{
		{Identity: "alice", Token: "alice-token", Grants: []Grant{{Prefix: "jobs/", Access: "write"}}},
		{Identity: "mallory", Token: "mallory-token", Grants: []Grant{{Prefix: "jobs/", Access: "write"}}},
	})
}

// TestHTTPRequestIDReplay: with auth on, alice's retry (same owner and
// request id) gets her grant back, secret and all; mallory's replay of
// them is refused as held and changes nothing.
func TestHTTPRequestIDReplay(t *testing.T) {
	proofs := RandomHolderProofs()
	proofs.Required = true
	ts := newHTServer(t, HandlerOptions{Auth: replayAuth(t), Holders: proofs})
	body := `{"owner":"alice","ttl_ms":60000,"request_id":"job-42","data":"YWxpY2U="}`
	a := ts.do("POST", "/v1/leases/jobs/42/acquire", "alice-token", body)
	ts.want(a, 200, "")
	before := ts.do("GET", "/v1/leases/jobs/42", "alice-token", "")
	ts.want(before, 200, "")

	r := ts.do("POST", "/v1/leases/jobs/42/acquire", "alice-token", body)
	ts.want(r, 200, "")
	if r.num("token") != a.num("token") || r.str("secret") == "" || r.str("secret") != a.str("secret") {
		t.Fatalf("alice's retry: %s, want the grant %s", r.body, a.body)
	}

	m := ts.do("POST", "/v1/leases/jobs/42/acquire", "mallory-token", `{"owner":"alice","ttl_ms":1000,"request_id":"job-42","data":"bWFsbG9yeQ=="}`)
	ts.want(m, 409, "held")
	if strings.Contains(string(m.body), a.str("secret")) {
		t.Fatalf("mallory's replay shows the secret: %s", m.body)
	}
	after := ts.do("GET", "/v1/leases/jobs/42", "alice-token", "")
	if after.num("token") != a.num("token") || after.str("owner") != "alice" || after.num("ttl_ms") != 60000 || after.str("data") != "YWxpY2U=" {
		t.Fatalf("after mallory's replay: %s, want %s", after.body, before.body)
	}
	ts.want(ts.do("POST", "/v1/leases/jobs/42/release", "alice-token",
		fmt.Sprintf(`{"owner":"alice","token":%v,"secret":%q}`, a.num("token"), a.str("secret"))), 204, "")

	// Semaphores: the same scoping.
	sb := `{"owner":"alice","permits":1,"ttl_ms":60000,"request_id":"sem-1"}`
	s := ts.do("POST", "/v1/semaphores/jobs/pool/acquire", "alice-token", sb)
	ts.want(s, 200, "")
	ts.want(ts.do("POST", "/v1/semaphores/jobs/pool/acquire", "mallory-token", sb), 409, "held")
	if s2 := ts.do("POST", "/v1/semaphores/jobs/pool/acquire", "alice-token", sb); s2.status != 200 || s2.str("secret") != s.str("secret") {
		t.Fatalf("alice's semaphore retry: %d %s", s2.status, s2.body)
	}
}

// TestRESPRequestIDReplay is TestHTTPRequestIDReplay over RESP (REQID).
func TestRESPRequestIDReplay(t *testing.T) {
	holders := RandomHolderProofs()
	holders.Required = true
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: replayAuth(t), Holders: holders})
	alice, mallory := rtDial(t, addr), rtDial(t, addr)
	rtExpect(t, "alice AUTH", alice.do("AUTH", "alice-token"), "+OK")
	rtExpect(t, "mallory AUTH", mallory.do("AUTH", "mallory-token"), "+OK")
	g := rtFields(alice.do("LH.ACQUIRE", "jobs/42", "alice", "60000", "DATA", "alice", "REQID", "job-42"))
	if len(g) < 6 {
		t.Fatalf("grant = %q", g)
	}
	retry := rtFields(alice.do("LH.ACQUIRE", "jobs/42", "alice", "60000", "DATA", "alice", "REQID", "job-42"))
	if len(retry) != len(g) || retry[0] != g[0] || retry[5] != g[5] {
		t.Fatalf("alice's retry = %q, want the grant %q with its secret", retry, g)
	}
	// [token ttl remaining ...]: all but the remaining time unchanged
	before := rtFields(alice.do("LH.GET", "jobs/42"))
	rtExpect(t, "mallory's replay", mallory.do("LH.ACQUIRE", "jobs/42", "alice", "1000", "DATA", "mallory", "REQID", "job-42"), "-HELD")
	after := rtFields(alice.do("LH.GET", "jobs/42"))
	if len(after) != 7 || len(before) != 7 || parseUint(t, strings.TrimPrefix(after[2], ":")) < 30000 ||
		strings.Join(slices.Delete(after, 2, 3), " ") != strings.Join(slices.Delete(before, 2, 3), " ") {
		t.Fatalf("after mallory's replay GET = %q, want %q", after, before)
	}
	rtExpect(t, "alice's release", alice.do("LH.RELEASE", "jobs/42", "alice", strings.TrimPrefix(g[0], ":"), "SECRET", strings.TrimPrefix(g[5], "$")), "+OK")
}

// TestScopedRequestID: deterministic, per identity, within the stores'
// limit; unchanged with auth off or without an id.
func TestScopedRequestID(t *testing.T) {
	a, b := &Identity{Name: "a"}, &Identity{Name: "b"}
	long := strings.Repeat("r", 128)
	if scopedRequestID(a, long) != scopedRequestID(a, long) || scopedRequestID(a, "x") == scopedRequestID(b, "x") ||
		scopedRequestID(&Identity{Name: "a\x00x"}, "y") == scopedRequestID(a, "x\x00y") {
		t.Fatal("not deterministic or not scoped")
	}
	if n := len(scopedRequestID(a, long)); n > 128 {
		t.Fatalf("scoped id is %d bytes", n)
	}
	if scopedRequestID(nil, "x") != "x" || scopedRequestID(a, "") != "" {
		t.Fatal("scoped with auth off or without an id")
	}
}

// TestAcquireOwnerVisible: an owner holding a character no reader could
// see is refused on both protocols, and nothing is acquired.
func TestAcquireOwnerVisible(t *testing.T) {
	ts := newHTServer(t, HandlerOptions{})
	ts.want(ts.do("POST", "/v1/leases/p/x/acquire", "", `{"owner":"alice\u200b","ttl_ms":60000}`), 400, "invalid")
	ts.want(ts.do("GET", "/v1/leases/p/x", "", ""), 404, "not-found")

	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	c := rtDial(t, addr)
	rtExpect(t, "ACQUIRE with an invisible owner", c.do("LH.ACQUIRE", "p/x", "alice\u202e", "60000"), "-INVALID owner: contains")
	rtExpect(t, "GET", c.do("LH.GET", "p/x"), "$nil")
}
