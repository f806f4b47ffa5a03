package server

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/wire/resp"
)

// TestRESPHolderProofs: with holder proofs on, only the acquirer learns the
// grant's secret, and a renew or release without it (or with another) is
// refused with BADPROOF and changes nothing.
func TestRESPHolderProofs(t *testing.T) {
	holders := RandomHolderProofs()
	holders.Required = true
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t), Holders: holders})
	a := rtDial(t, addr)
	rtExpect(t, "AUTH", a.do("AUTH", "team-token"), "+OK")
	g := rtFields(a.do("LH.ACQUIRE", "team/p", "alice", "30000"))
	if len(g) != resp.GrantSecretLen {
		t.Fatalf("grant = %q, want %d elements (the grant and its secret)", g, resp.GrantSecretLen)
	}
	tok := strings.TrimPrefix(g[0], ":")
	secret := strings.TrimPrefix(g[5], "$")
	if want := holders.Secret("team/p", "alice", parseUint(t, tok)); secret != want {
		t.Fatalf("secret = %q, want %q", secret, want)
	}

	// The secret is in no other reply.
	spy := rtDial(t, addr)
	rtExpect(t, "spy AUTH", spy.do("AUTH", "team-token"), "+OK")
	for _, cmd := range [][]string{{"LH.GET", "team/p"}, {"LH.LIST", "team/"}} {
		if got := spy.do(cmd...); strings.Contains(got, secret) || !strings.Contains(got, "$alice") {
			t.Errorf("%s = %q: want the record without the secret", cmd[0], got)
		}
	}
	r3 := r3Dial(t, addr)
	r3.do("HELLO", "3", "AUTH", "x", "team-token")
	if _, shown := r3.do("LH.GET", "team/p"); strings.Contains(shown, secret) || strings.Contains(shown, "secret") {
		t.Errorf("RESP3 GET = %s: want no secret", shown)
	}

	// Spoofing with owner and token but no or a wrong secret.
	for _, cmd := range [][]string{
		{"LH.RENEW", "team/p", "alice", tok, "60000"},
		{"LH.RENEW", "team/p", "alice", tok, "60000", "SECRET", "guess"},
		{"LH.RENEW", "team/p", "alice", tok, "60000", "secret", secret + "x"},
		{"LH.RELEASE", "team/p", "alice", tok},
		{"LH.RELEASE", "team/p", "alice", tok, "SECRET", strings.ToUpper(secret)},
		{"LH.RELEASE", "team/p", "bob", tok, "SECRET", secret}, // another owner's grant
	} {
		rtExpect(t, strings.Join(cmd, " "), spy.do(cmd...), "-BADPROOF the holder proof (secret) does not match the grant")
	}
	rtExpect(t, "GET after spoofing", spy.do("LH.GET", "team/p"), "["+g[0]+" :30000")

	// Bad options: a clear error, nothing changed.
	for _, bad := range []struct{ args, want string }{
		{"LH.RELEASE|team/p|alice|" + tok + "|SECRET", "-ERR wrong number"},
		{"LH.RELEASE|team/p|alice|" + tok + "|TOKEN|" + secret, "-ERR syntax error: unknown option 'TOKEN'"},
		{"LH.RELEASE|team/p|alice|" + tok + "|SECRET|", "-INVALID secret: "},
		{"LH.RENEW|team/p|alice|" + tok + "|60000|SECRET|" + secret + "|SECRET|" + secret, "-ERR syntax error: option 'SECRET' given twice"},
	} {
		rtExpect(t, bad.args, spy.do(strings.Split(bad.args, "|")...), bad.want)
	}
	rtExpect(t, "GET after bad options", spy.do("LH.GET", "team/p"), "["+g[0]+" :30000")

	// The holder, with its secret.
	rtExpect(t, "RENEW with the secret", a.do("LH.RENEW", "team/p", "alice", tok, "60000", "SECRET", secret), "+OK")
	rtExpect(t, "GET after renew", spy.do("LH.GET", "team/p"), "["+g[0]+" :60000")
	rtExpect(t, "RELEASE with the secret", a.do("LH.RELEASE", "team/p", "alice", tok, "SECRET", secret), "+OK")
	rtExpect(t, "GET after release", spy.do("LH.GET", "team/p"), "$nil")

	// RESP3: the grant map carries "secret"; force-release's record does not.
	_, shown := r3.do("LH.ACQUIRE", "team/q", "carol", "30000")
	keys := strings.Join(r3Keys(shown), " ")
	if keys != strings.Join(resp.GrantFields, " ")+" secret" {
		t.Errorf("RESP3 grant labels = %q, want GrantFields then secret", keys)
	}
	admin := rtDial(t, addr)
	rtExpect(t, "admin AUTH", admin.do("AUTH", "admin-token"), "+OK")
	if got := admin.do("LH.FORCERELEASE", "team/q"); len(rtFields(got)) != resp.RecordLen {
		t.Errorf("FORCERELEASE = %q, want a record of %d (no secret)", got, resp.RecordLen)
	}
}

// TestRESPHolderProofsOptional: proofs on but not Required (auth off) —
// a missing secret is accepted, a wrong one is not; without Holders the
// grant has no secret and SECRET is not checked.
func TestRESPHolderProofsOptional(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Holders: RandomHolderProofs()})
	c := rtDial(t, addr)
	g := rtFields(c.do("LH.ACQUIRE", "x", "alice", "30000"))
	tok := strings.TrimPrefix(g[0], ":")
	rtExpect(t, "RELEASE with a wrong secret", c.do("LH.RELEASE", "x", "alice", tok, "SECRET", "nope"), "-BADPROOF")
	rtExpect(t, "RENEW without a secret", c.do("LH.RENEW", "x", "alice", tok, "60000"), "+OK")
	rtExpect(t, "RELEASE without a secret", c.do("LH.RELEASE", "x", "alice", tok), "+OK")

	_, addr = rtServe(t, rtEngine(t), RESPOptions{})
	c = rtDial(t, addr)
	g = rtFields(c.do("LH.ACQUIRE", "x", "alice", "30000"))
	if len(g) != resp.GrantLen {
		t.Errorf("grant without proofs = %q, want %d elements", g, resp.GrantLen)
	}
	rtExpect(t, "RELEASE with any secret, proofs off", c.do("LH.RELEASE", "x", "alice", strings.TrimPrefix(g[0], ":"), "SECRET", "any"), "+OK")
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, ok := resp.ParseInt([]byte(s))
	if !ok || n < 0 {
		t.Fatalf("%q is not a token", s)
	}
	return uint64(n)
}
