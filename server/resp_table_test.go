package server

import (
	"strings"
	"testing"
)

// rtRoleTokens: one token per role on the prefix "p/" ("none" has no
// grant at all).
var rtRoles = []struct {
	role   string
	token  string
	access Access // on names under p/ (and on no other name)
}{
	{"none", "none-token", AccessNone},
	{"read", "read-token", AccessRead},
	{"write", "write-token", AccessWrite},
	{"admin", "admin-token", AccessAdmin},
}

func rtRoleAuth(t *testing.T) *Auth {
	cfg := AuthConfig{}
	for _, r := range rtRoles {
		tc := TokenConfig{Identity: r.role, Token: r.token}
		if r.access != AccessNone {
			tc.Grants = []Grant{{Prefix: "p/", Access: r.access.String()}}
		}
		cfg.Tokens = append(cfg.Tokens, tc)
	}
	a, err := NewAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rtSample returns arguments that make a valid call of row on name (a
// lease name, or for prefix rows a prefix), with token the caller's.
func rtSample(t *testing.T, row *respCmd, name, token string) []string {
	var args []string
	switch row.op {
	case "conn.ping", "conn.quit", "conn.command", "conn.client.getname", "conn.client.id", "ready":
	case "conn.auth":
		args = []string{token}
	case "conn.hello":
		args = []string{"2", "AUTH", "default", token}
	case "conn.echo", "conn.client.setname":
		args = []string{"x"}
	case "conn.client.setinfo":
		args = []string{"LIB-NAME", "x"}
	case "lease.acquire":
		args = []string{name, "me", "30000"}
	case "semaphore.acquire":
		args = []string{name, "me", "2", "30000"}
	case "lease.renew":
		args = []string{name, "me", "1", "30000"}
	case "lease.release":
		args = []string{name, "me", "1"}
	case "lease.get", "lease.forcerelease", "events.subscribe", "events.unsubscribe":
		args = []string{name}
	case "lease.list":
		args = []string{name}
		if row.name == "LH.SCAN" {
			args = append(args, "0", "COUNT", "10")
		}
	case "session.open":
		args = []string{"10000"}
	case "session.keepalive", "session.close":
		args = []string{"no-such-session"}
	default:
		t.Fatalf("no sample arguments for the row %s %s (op %s): add them here", row.name, row.sub, row.op)
	}
	if row.sub != "" {
		args = append([]string{row.sub}, args...)
	}
	return append([]string{row.name}, args...)
}

// TestRESPTableRoles walks the command table with every role: with auth
// on, a connection that has not authenticated, and tokens of roles none,
// read, write and admin on "p/", run every row once on a name inside p/
// and once outside. A call is refused (NOAUTH without AUTH, NOPERM
// otherwise) exactly when the caller is below the row's access.
func TestRESPTableRoles(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtRoleAuth(t)})
	calls := 0
	for _, row := range respCommands {
		for _, inside := range []bool{true, false} {
			name, prefix := "q/x", "q/"
			if inside {
				name, prefix = "p/x", "p/"
			}
			if row.scope == scopePrefix {
				name = prefix
			}
			// Not authenticated: refused unless the row is allowed
			// before AUTH.
			c := rtDial(t, addr)
			args := rtSample(t, row, name, "none-token")
			got := c.do(args...)
			if refused := strings.HasPrefix(got, "-NOAUTH"); refused != !row.preAuth {
				t.Errorf("without AUTH: %q = %q; want NOAUTH: %v", args, got, !row.preAuth)
			}
			calls++
			for _, r := range rtRoles {
				c := rtDial(t, addr)
				rtExpect(t, r.role+" AUTH", c.do("AUTH", r.token), "+OK")
				have := AccessNone
				switch row.scope {
				case scopeName, scopePrefix:
					if inside {
						have = r.access
					}
				case scopeAny:
					have = r.access // its only grant, wherever the name is
				}
				want := have < row.access
				args := rtSample(t, row, name, r.token)
				got := c.do(args...)
				if refused := strings.HasPrefix(got, "-NOPERM"); refused != want {
					t.Errorf("%s (%v on p/): %q = %q; want NOPERM: %v (the row needs %v)", r.role, r.access, args, got, want, row.access)
				}
				if strings.HasPrefix(got, "-NOAUTH") || strings.HasPrefix(got, "-ERR") {
					t.Errorf("%s: %q = %q: the sample is not a valid call", r.role, args, got)
				}
				calls++
			}
		}
	}
	if want := len(respCommands) * 2 * (len(rtRoles) + 1); calls != want || len(respCommands) < 20 {
		t.Errorf("%d calls over %d rows, want %d", calls, len(respCommands), want)
	}
}

// TestRESPOps: the operations both APIs have need these accesses (the
// HTTP API's, server/table_parity_test.go checks the two tables agree).
func TestRESPOps(t *testing.T) {
	wantSharedOps(t, "respOps()", respOps())
	for _, row := range respCommands {
		if row.op == "" || row.handler == nil {
			t.Errorf("row %s %s has no op or no handler", row.name, row.sub)
		}
		if _, shared := sharedOps[row.op]; !shared && !strings.HasPrefix(row.op, "conn.") && row.op != "events.unsubscribe" {
			t.Errorf("row %s: op %q is neither shared with HTTP nor a connection command", row.name, row.op)
		}
	}
}

// TestRESPTableArity: every row, given 0 to max+3 arguments (and every
// option of its own twice), answers each call with one reply and never
// takes a call with the wrong number of arguments for a valid one.
func TestRESPTableArity(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	for _, row := range respCommands {
		if row.name == "QUIT" || row.name == "LH.SUBSCRIBE" {
			continue // they end the connection or change its mode
		}
		top := max(row.max, row.min) + 3
		if row.max < 0 {
			top = row.min + 3
		}
		for n := 0; n <= top; n++ {
			args := []string{row.name}
			if row.sub != "" {
				args = append(args, row.sub)
			}
			for i := 0; i < n; i++ {
				args = append(args, "x")
			}
			c := rtDial(t, addr)
			got := c.do(args...)
			fits := n >= row.min && (row.max < 0 || n <= row.max)
			if len(row.opts) > 0 {
				fits = n == row.min || (n > row.min && (n-row.min)%2 == 0)
			}
			if wrong := strings.HasPrefix(got, "-ERR wrong number"); wrong == fits {
				t.Errorf("%q (%d arguments) = %q; want a wrong-number error: %v", args, n, got, !fits)
			}
			rtExpect(t, "PING after "+strings.Join(args, " "), c.do("PING"), "+PONG")
		}
		for _, o := range row.opts {
			args := []string{row.name}
			for i := 0; i < row.min; i++ {
				args = append(args, "x")
			}
			args = append(args, o, "1", strings.ToLower(o), "1")
			rtExpect(t, strings.Join(args, " "), rtDial(t, addr).do(args...), "-ERR syntax error: option '"+strings.ToLower(o)+"' given twice")
		}
	}
}
