package abuse

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// Holder spoofing (issue 15): a lease's owner and fencing token are
// visible to every reader, so they cannot be what proves holding it.
// TestR11HolderSpoofing runs `leasehold serve` (engine, auth on) with two
// identities that may both write the prefix shared/. Identity a takes
// shared/lock; identity b reads its owner and token (HTTP GET and LH.GET)
// and tries to renew and release it over HTTP and RESP with them — with no
// secret, an empty one, a made-up one, and the secret of a grant of its
// own — again and again. Every attempt must be refused as a bad proof and
// change nothing (the lease still a's, same token, same TTL); then a
// renews and releases with its secret, over each protocol.

const (
	spoofTokenA = "r11-spoof-holder-a"
	spoofTokenB = "r11-spoof-holder-b"
)

func TestR11HolderSpoofing(t *testing.T) {
	rounds := verify.Size(20, 200)
	p := startServeProc(t, false, "--auth-file", authFile(t,
		grant{"holder-a", spoofTokenA, "shared/", "write"},
		grant{"holder-b", spoofTokenB, "shared/", "write"}))
	const ttlMS = 600_000

	// a's grants: shared/lock over HTTP, shared/lock2 over RESP.
	lockTok, lockSecret := spoofAcquireHTTP(t, p, spoofTokenA, "shared/lock", "holder-a", ttlMS)
	ra, err := dialRESP(p.resp, "127.0.0.1", spoofTokenA)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.nc.Close()
	lock2Tok, lock2Secret := spoofAcquireRESP(t, ra, "shared/lock2", "holder-a", ttlMS)
	// b's own grant, whose secret b legitimately has.
	rb, err := dialRESP(p.resp, "127.0.0.1", spoofTokenB)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.nc.Close()
	_, bSecret := spoofAcquireRESP(t, rb, "shared/b-own", "holder-b", ttlMS)
	// What b can read: owner and token, never a secret.
	targets := []struct {
		name   string
		token  uint64
		secret string
	}{{"shared/lock", lockTok, lockSecret}, {"shared/lock2", lock2Tok, lock2Secret}}
	c := &tally{ops: 3}
	fail := c.fail
	if lockSecret == "" || lock2Secret == "" || bSecret == "" {
		fail("grants without secrets (no holder proofs)")
	}
	for _, tg := range targets {
		res, err := p.do(p.client, request{method: "GET", path: "/v1/leases/" + tg.name, auth: bearer(spoofTokenB)})
		var l lease
		if err != nil || res.status != 200 || json.Unmarshal(res.body, &l) != nil || l.Owner != "holder-a" || l.Token != tg.token {
			t.Fatalf("b reads %s: %d %s %v", tg.name, res.status, res.body, err)
		}
		if tg.secret != "" && strings.Contains(string(res.body), tg.secret) || strings.Contains(string(res.body), `"secret"`) {
			fail("GET %s shows the secret to b: %s", tg.name, res.body)
		}
		v, err := rb.do("LH.GET", tg.name)
		if err != nil || v.Type != resp.Array {
			t.Fatalf("b LH.GET %s: %v %v", tg.name, v, err)
		}
		for _, e := range v.Array {
			if tg.secret != "" && string(e.Str) == tg.secret {
				fail("LH.GET %s shows the secret to b", tg.name)
			}
		}
		c.ops += 2
	}

	proofs := []struct{ label, secret string }{
		{"no secret", ""}, {"empty secret", "\x00empty"}, {"made-up secret", strings.Repeat("A", 22)},
		{"b's own grant's secret", bSecret}, {"a's other grant's secret", ""},
	}
	for round := 0; round < rounds; round++ {
		for ti, tg := range targets {
			for _, pf := range proofs {
				secret := pf.secret
				if pf.label == "a's other grant's secret" {
					// The attack fails even with a secret a really holds, if
					// it is another grant's (b could never get it anyway).
					secret = targets[1-ti].secret
				}
				for _, op := range []string{"renew", "release"} {
					c.faults += 2
					c.ops += 2
					if got, ok := spoofHTTP(p, op, tg.name, tg.token, secret); !ok {
						fail("HTTP %s of %s with %s: %s", op, tg.name, pf.label, got)
					}
					if got, ok := spoofRESP(rb, op, tg.name, tg.token, secret); !ok {
						fail("RESP %s of %s with %s: %s", op, tg.name, pf.label, got)
					}
				}
			}
		}
	}

	// Nothing changed: a's leases, same tokens, same TTLs.
	for _, tg := range targets {
		res, err := p.do(p.client, request{method: "GET", path: "/v1/leases/" + tg.name, auth: bearer(spoofTokenA)})
		var l lease
		if err != nil || res.status != 200 || json.Unmarshal(res.body, &l) != nil || l.Owner != "holder-a" || l.Token != tg.token || l.TTLMS != ttlMS {
			fail("%s after the attempts: %d %s %v (want holder-a, token %d, ttl %d)", tg.name, res.status, res.body, err, tg.token, ttlMS)
		}
		c.ops++
	}

	// a renews and releases with its secrets, each over both protocols.
	for _, step := range []struct {
		proto, op, name string
		token           uint64
		secret          string
	}{
		{"HTTP", "renew", "shared/lock", lockTok, lockSecret},
		{"RESP", "renew", "shared/lock", lockTok, lockSecret},
		{"RESP", "renew", "shared/lock2", lock2Tok, lock2Secret},
		{"HTTP", "renew", "shared/lock2", lock2Tok, lock2Secret},
		{"RESP", "release", "shared/lock", lockTok, lockSecret},
		{"HTTP", "release", "shared/lock2", lock2Tok, lock2Secret},
	} {
		c.ops++
		var ok bool
		var got string
		if step.proto == "HTTP" {
			res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/" + step.name + "/" + step.op, auth: bearer(spoofTokenA),
				body: spoofBody(step.op, step.token, step.secret)})
			ok, got = err == nil && res.status/100 == 2, fmt.Sprintf("%d %s %v", res.status, res.body, err)
		} else {
			v, err := ra.do(spoofRESPArgs(step.op, step.name, step.token, step.secret)...)
			ok, got = err == nil && v.Type == resp.SimpleString, fmt.Sprintf("%s %v", v.Str, err)
		}
		if !ok {
			fail("a's own %s %s of %s refused: %s", step.proto, step.op, step.name, got)
		}
	}
	for _, name := range []string{"shared/lock", "shared/lock2"} {
		if res, err := p.do(p.client, request{method: "GET", path: "/v1/leases/" + name, auth: bearer(spoofTokenA)}); err != nil || res.status != 404 {
			fail("%s after a's release: %d %s %v", name, res.status, res.body, err)
		}
	}

	c.row(t, "holder-spoofing", fmt.Sprintf("b (write on the prefix) renewed/released a's leases %d times over HTTP and RESP with owner+token and no, empty, made-up or another grant's secret: all refused as bad proofs, nothing changed; a renewed and released with its secrets", c.faults))
}

func spoofBody(op string, token uint64, secret string) []byte {
	b := fmt.Sprintf(`{"owner":"holder-a","token":%d`, token)
	if op == "renew" {
		b += `,"ttl_ms":3600000`
	}
	switch secret {
	case "":
	case "\x00empty":
		b += `,"secret":""`
	default:
		b += fmt.Sprintf(`,"secret":%q`, secret)
	}
	return []byte(b + "}")
}

func spoofRESPArgs(op, name string, token uint64, secret string) []string {
	args := []string{"LH." + strings.ToUpper(op), name, "holder-a", strconv.FormatUint(token, 10)}
	if op == "renew" {
		args = append(args, "3600000")
	}
	switch secret {
	case "":
	case "\x00empty":
		args = append(args, "SECRET", "")
	default:
		args = append(args, "SECRET", secret)
	}
	return args
}

// spoofHTTP is b's renew or release of a's grant; ok when it is refused
// as a bad proof (a made-up empty secret may be refused as invalid).
func spoofHTTP(p *serveProc, op, name string, token uint64, secret string) (string, bool) {
	res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/" + name + "/" + op, auth: bearer(spoofTokenB), body: spoofBody(op, token, secret)})
	if err != nil {
		return err.Error(), false
	}
	var pr struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(res.body, &pr)
	ok := res.status == 403 && pr.Type == "urn:leasehold:problem:bad-proof" ||
		secret == "\x00empty" && res.status == 400 && pr.Type == "urn:leasehold:problem:invalid"
	return fmt.Sprintf("%d %s", res.status, res.body), ok
}

// spoofRESP is spoofHTTP over RESP: BADPROOF (or, for an empty secret,
// INVALID).
func spoofRESP(c *respClient, op, name string, token uint64, secret string) (string, bool) {
	v, err := c.do(spoofRESPArgs(op, name, token, secret)...)
	if err != nil {
		return err.Error(), false
	}
	msg := string(v.Str)
	ok := v.Type == resp.Error && (strings.HasPrefix(msg, resp.CodeBadProof+" ") ||
		secret == "\x00empty" && strings.HasPrefix(msg, resp.CodeInvalid+" "))
	return msg, ok
}

func spoofAcquireHTTP(t *testing.T, p *serveProc, token, name, owner string, ttlMS int) (uint64, string) {
	t.Helper()
	res, err := p.do(p.client, request{method: "POST", path: "/v1/leases/" + name + "/acquire", auth: bearer(token),
		body: fmt.Appendf(nil, `{"owner":%q,"ttl_ms":%d}`, owner, ttlMS)})
	var g struct {
		Token  uint64 `json:"token"`
		Secret string `json:"secret"`
	}
	if err != nil || res.status != 200 || json.Unmarshal(res.body, &g) != nil {
		t.Fatalf("acquire %s: %d %s %v", name, res.status, res.body, err)
	}
	return g.Token, g.Secret
}

func spoofAcquireRESP(t *testing.T, c *respClient, name, owner string, ttlMS int) (uint64, string) {
	t.Helper()
	v, err := c.do("LH.ACQUIRE", name, owner, strconv.Itoa(ttlMS))
	if err != nil {
		t.Fatalf("LH.ACQUIRE %s: %v", name, err)
	}
	if v.Type == resp.Error {
		t.Fatalf("LH.ACQUIRE %s: %s", name, v.Str)
	}
	var rec leasehold.Record
	secret, err := resp.DecodeGrant(v, &rec)
	if err != nil {
		t.Fatalf("LH.ACQUIRE %s: %v", name, err)
	}
	return rec.Token, secret
}
