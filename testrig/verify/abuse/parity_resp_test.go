package abuse

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/wire/resp"
)

// The RESP half of issue 15's parity gaps and holder spoofing, against a
// `leasehold serve` process with auth on: a read-only token opening
// sessions, a writer of a prefix releasing or renewing another holder's
// lease with the owner and token it can read, and LH.LIST of a prefix with
// more leases than the server lists at once.

// The tokens of the parity tests' servers (HTTP and RESP).
const (
	parityReader = "r11-parity-reader-6c1e"
	parityHolder = "r11-parity-holder-3a9f"
	paritySpy    = "r11-parity-spy-8d42"
)

// startParityServe runs `leasehold serve` (with the RESP listener if
// resp) with auth on and the tokens of the parity tests (a later
// --auth-file replaces startServeProc's): admin, a reader of p/, and two
// writers of p/ (the holder and the spy).
func startParityServe(t *testing.T, resp bool) *serveProc {
	t.Helper()
	return startServeProc(t, resp, "--auth-file", authFile(t,
		grant{"admin", adminToken, "", "admin"},
		grant{"reader", parityReader, "p/", "read"},
		grant{"holder", parityHolder, "p/", "write"},
		grant{"spy", paritySpy, "p/", "write"}))
}

func TestR11RESPParity(t *testing.T) {
	p := startParityServe(t, true)
	t.Run("resp-session-read-only", func(t *testing.T) { paritySessions(t, p) })
	t.Run("resp-holder-spoofing", func(t *testing.T) { paritySpoofing(t, p) })
	t.Run("resp-list-cap", func(t *testing.T) { parityListCap(t, p, verify.Size(20000, 50000)) })
}

// acquireMany acquires the n leases p/many/000000... (owner bulk, TTL
// 10 minutes) on c with pipelined LH.ACQUIREs, a batch at a time.
func acquireMany(t *testing.T, c *respClient, n int) {
	t.Helper()
	const batch = 1000
	for i := 0; i < n; i += batch {
		var buf []byte
		m := min(batch, n-i)
		for j := 0; j < m; j++ {
			buf = resp.AppendCommand(buf, "LH.ACQUIRE", fmt.Sprintf("p/many/%06d", i+j), "bulk", "600000")
		}
		if _, err := c.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < m; j++ {
			if v, err := c.rd.ReadValue(); err != nil || v.Type != resp.Array {
				t.Fatalf("acquire %d: %s %v", i+j, show(v), err)
			}
		}
	}
}

func mustRESP(t *testing.T, addr, token string) *respClient {
	t.Helper()
	c, err := dialRESP(addr, "127.0.0.1", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.nc.Close() })
	return c
}

func show(v resp.Value) string {
	switch v.Type {
	case resp.Array:
		parts := make([]string, len(v.Array))
		for i, e := range v.Array {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case resp.Integer:
		return fmt.Sprint(v.Int)
	}
	if v.Null {
		return "nil"
	}
	return string(v.Type) + string(v.Str)
}

// refused reports whether v is an error reply with code.
func refused(v resp.Value, code string) bool {
	return v.Type == resp.Error && strings.HasPrefix(string(v.Str), code+" ")
}

// paritySessions: a read-only token may open, keep alive or close no
// session over RESP (HTTP refuses it too: sessions need write).
func paritySessions(t *testing.T, p *serveProc) {
	reader := mustRESP(t, p.resp, parityReader)
	holder := mustRESP(t, p.resp, parityHolder)
	violations, ops := 0, 0
	check := func(what string, v resp.Value, err error, code string) {
		t.Helper()
		ops++
		if err != nil || !refused(v, code) {
			violations++
			t.Errorf("%s: %s %v, want -%s", what, show(v), err, code)
		}
	}
	v, err := reader.do("LH.SESSION", "OPEN", "10000")
	check("reader LH.SESSION OPEN", v, err, "NOPERM")
	sid, err := holder.do("LH.SESSION", "OPEN", "10000")
	if err != nil || sid.Type != resp.BulkString {
		t.Fatalf("holder LH.SESSION OPEN: %s %v", show(sid), err)
	}
	v, err = reader.do("LH.SESSION", "KEEPALIVE", string(sid.Str))
	check("reader LH.SESSION KEEPALIVE", v, err, "NOPERM")
	v, err = reader.do("LH.SESSION", "CLOSE", string(sid.Str))
	check("reader LH.SESSION CLOSE", v, err, "NOPERM")
	// The writer's session is untouched.
	v, err = holder.do("LH.SESSION", "KEEPALIVE", string(sid.Str))
	ops++
	if err != nil || v.Type != resp.Array {
		violations++
		t.Errorf("holder's keepalive after the reader's attempts: %s %v", show(v), err)
	}
	hdRow(t, "resp-session-read-only", ops, 3, violations,
		"a token with read on p/ sends LH.SESSION OPEN, KEEPALIVE and CLOSE (of a writer's session): each NOPERM, the writer's session lives on")
}

// paritySpoofing: the spy, a writer of p/ like the holder, reads the
// holder's lease (owner and token are visible) and renews and releases
// it with them, without the grant's secret or with a wrong one: each is
// BADPROOF and the lease stays the holder's, unchanged.
func paritySpoofing(t *testing.T, p *serveProc) {
	holder := mustRESP(t, p.resp, parityHolder)
	spy := mustRESP(t, p.resp, paritySpy)
	g, err := holder.do("LH.ACQUIRE", "p/victim", "holder-1", "600000")
	if err != nil || g.Type != resp.Array {
		t.Fatalf("holder LH.ACQUIRE: %s %v", show(g), err)
	}
	var secret string
	if len(g.Array) == resp.GrantLen+1 { // the grant, then its secret
		secret = string(g.Array[5].Str)
	}
	rec, err := spy.do("LH.GET", "p/victim")
	if err != nil || rec.Type != resp.Array || len(rec.Array) != resp.RecordLen {
		t.Fatalf("spy LH.GET: %s %v", show(rec), err)
	}
	token, owner := fmt.Sprint(rec.Array[0].Int), string(rec.Array[6].Str)
	violations, ops := 0, 0
	if secret == "" {
		violations++
		t.Errorf("LH.ACQUIRE's reply %s carries no secret", show(g))
	} else if strings.Contains(show(rec), secret) {
		violations++
		t.Errorf("LH.GET's reply %s carries the secret", show(rec))
	}
	attempts := [][]string{
		{"LH.RELEASE", "p/victim", owner, token},
		{"LH.RELEASE", "p/victim", owner, token, "SECRET", "guessed-secret"},
		{"LH.RENEW", "p/victim", owner, token, "1000"},
		{"LH.RENEW", "p/victim", owner, token, "1000", "SECRET", strings.ToLower(secret) + "x"},
	}
	for _, a := range attempts {
		v, err := spy.do(a...)
		ops++
		if err != nil || !refused(v, "BADPROOF") {
			violations++
			t.Errorf("spy %q: %s %v, want -BADPROOF", a, show(v), err)
		}
		after, err := spy.do("LH.GET", "p/victim")
		if err != nil || after.Type != resp.Array || len(after.Array) != resp.RecordLen ||
			fmt.Sprint(after.Array[0].Int) != token || string(after.Array[6].Str) != owner ||
			after.Array[1].Int != 600000 {
			violations++
			t.Errorf("after spy %q the lease is %s %v, want the holder's with ttl 600000", a, show(after), err)
		}
	}
	// The holder, with its secret, still can.
	v, err := holder.do("LH.RELEASE", "p/victim", owner, token, "SECRET", secret)
	ops++
	if err != nil || v.Type != resp.SimpleString {
		violations++
		t.Errorf("holder's release with its secret: %s %v", show(v), err)
	}
	hdRow(t, "resp-holder-spoofing", ops, len(attempts), violations,
		"a writer of p/ reads another holder's lease with LH.GET and sends LH.RELEASE/LH.RENEW with its owner and token, without SECRET or with a wrong one: BADPROOF each time, the lease unchanged; the holder releases with its secret")
}

// parityListCap: with n leases under one prefix (more than the 10,000
// LH.LIST returns), LH.LIST answers TOOMANY and LH.SCAN returns every
// lease exactly once, in name order, a page at a time.
func parityListCap(t *testing.T, p *serveProc, n int) {
	c := mustRESP(t, p.resp, parityHolder)
	acquireMany(t, c, n)
	violations, ops := 0, n
	v, err := c.do("LH.LIST", "p/many/")
	ops++
	listed := fmt.Sprintf("%.80s", show(v))
	if v.Type == resp.Array {
		listed = fmt.Sprintf("an array of %d records", len(v.Array))
	}
	if err != nil || !refused(v, "TOOMANY") {
		violations++
		t.Errorf("LH.LIST of %d leases: %s %v, want -TOOMANY", n, listed, err)
	}
	seen, pages, cursor, prev := 0, 0, "0", ""
	for {
		v, err := c.do("LH.SCAN", "p/many/", cursor)
		ops++
		if err != nil || v.Type != resp.Array || len(v.Array) != 2 || v.Array[1].Type != resp.Array {
			violations++
			t.Errorf("LH.SCAN p/many/ %s: %.200s %v, want [cursor, [records]]", cursor, show(v), err)
			break
		}
		pages++
		for _, r := range v.Array[1].Array {
			name := string(r.Array[5].Str)
			if want := fmt.Sprintf("p/many/%06d", seen); name != want || name <= prev {
				violations++
				t.Errorf("LH.SCAN page %d: record %q, want %q", pages, name, want)
				break
			}
			prev = name
			seen++
		}
		cursor = string(v.Array[0].Str)
		if cursor == "0" || pages > n {
			break
		}
	}
	if seen != n {
		violations++
		t.Errorf("LH.SCAN returned %d of %d leases", seen, n)
	}
	hdRow(t, "resp-list-cap", ops, 1, violations,
		fmt.Sprintf("%d leases under p/many/: LH.LIST answered %q (want TOOMANY); LH.SCAN returned %d in %d pages (want every lease once, in order)", n, listed, seen, pages))
}
