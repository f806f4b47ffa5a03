package abuse

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// Request-id replay: a retried acquire is recognised by owner and request
// id, and both are easy to know (owners are public, request ids often
// predictable: leasehold.RequestID("job-42")). TestR11RequestIDReplay runs
// `leasehold serve` (engine, auth on) with alice and mallory, both writers
// of jobs/. Alice takes jobs/http over HTTP and jobs/resp over RESP with
// request id "job-42"; her retries get her grants back (same token, same
// secret). Mallory replays alice's owner and request id, with another TTL
// and data, over both protocols against both leases, again and again:
// every replay must be refused as held, show no secret, and change
// nothing (alice's lease, token, TTL and data).

const (
	replayAlice   = "r11-replay-alice-3e1f"
	replayMallory = "r11-replay-mallory-7a20"
	replayTTLMS   = 600_000
)

func TestR11RequestIDReplay(t *testing.T) {
	rounds := verify.Size(20, 200)
	p := startServeProc(t, false, "--auth-file", authFile(t,
		grant{"admin", adminToken, "", "admin"},
		grant{"alice", replayAlice, "jobs/", "write"},
		grant{"mallory", replayMallory, "jobs/", "write"}))
	ra, rm := mustRESP(t, p.resp, replayAlice), mustRESP(t, p.resp, replayMallory)

	c := &tally{}
	fail := c.fail
	// acquire is one acquire of name as owner alice with request id
	// job-42, over proto, with token's identity.
	acquire := func(proto, token, name string, ttlMS int, data string) (g leaseJSON, held bool, got string) {
		c.ops++
		if proto == "HTTP" {
			res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/" + name + "/acquire", auth: bearer(token),
				body: fmt.Appendf(nil, `{"owner":"alice","ttl_ms":%d,"request_id":"job-42","data":%q}`, ttlMS, data)})
			if err != nil {
				return g, false, err.Error()
			}
			got = fmt.Sprintf("%d %s", res.status, res.body)
			if res.status == 409 && strings.Contains(string(res.body), "urn:leasehold:problem:held") {
				return g, true, got
			}
			if res.status != 200 || json.Unmarshal(res.body, &g) != nil {
				return leaseJSON{}, false, got
			}
			return g, false, got
		}
		c := ra
		if token == replayMallory {
			c = rm
		}
		v, err := c.do("LH.ACQUIRE", name, "alice", fmt.Sprint(ttlMS), "DATA", data, "REQID", "job-42")
		if err != nil {
			return g, false, err.Error()
		}
		got = fmt.Sprintf("%v %s", v.Type, v.Str)
		if v.Type == resp.Error {
			return g, strings.HasPrefix(string(v.Str), resp.CodeHeld+" "), got
		}
		var rec leasehold.Record
		secret, err := resp.DecodeGrant(v, &rec)
		if err != nil {
			return g, false, got
		}
		return leaseJSON{Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Secret: secret}, false, got
	}

	type grant struct {
		name, proto string
		g           leaseJSON
	}
	var grants []grant
	for _, proto := range []string{"HTTP", "RESP"} {
		name := "jobs/" + strings.ToLower(proto)
		g, _, got := acquire(proto, replayAlice, name, replayTTLMS, "alice")
		if g.Token == 0 || g.Secret == "" {
			t.Fatalf("alice's %s acquire of %s: %s", proto, name, got)
		}
		// Alice's own retry: the same grant and secret.
		if r, _, got := acquire(proto, replayAlice, name, replayTTLMS, "alice"); r.Token != g.Token || r.Secret != g.Secret {
			fail("alice's %s retry of %s: %s, want token %d and her secret", proto, name, got, g.Token)
		}
		grants = append(grants, grant{name, proto, g})
	}
	for round := 0; round < rounds; round++ {
		for _, gr := range grants {
			for _, proto := range []string{"HTTP", "RESP"} {
				c.faults++
				m, held, got := acquire(proto, replayMallory, gr.name, 1000, "mallory")
				if !held || m.Secret != "" || strings.Contains(got, gr.g.Secret) {
					fail("mallory's %s replay of %s: %s, want held", proto, gr.name, got)
				}
			}
		}
	}
	for _, gr := range grants {
		c.ops++
		l, ok := getLease(t, p, gr.name)
		if !ok || l.Owner != "alice" || l.Token != gr.g.Token || l.TTLMS != replayTTLMS || l.Data != "alice" {
			fail("%s after the replays: %+v (live %v), want alice's, token %d, ttl %d, data alice", gr.name, l, ok, gr.g.Token, replayTTLMS)
		}
		// Alice still holds it: her release with her secret.
		c.ops++
		res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/" + gr.name + "/release", auth: bearer(replayAlice),
			body: fmt.Appendf(nil, `{"owner":"alice","token":%d,"secret":%q}`, gr.g.Token, gr.g.Secret)})
		if err != nil || res.status != 204 {
			fail("alice's release of %s: %d %s %v", gr.name, res.status, res.body, err)
		}
	}
	c.row(t, "request-id-replay", fmt.Sprintf("mallory (write on jobs/) replayed alice's owner and request id %d times over HTTP and RESP against her HTTP and RESP grants: all refused as held, no secret shown, leases unchanged (token, TTL, data); alice's retries got her grants and secrets back", c.faults))
}
