package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/servertest"
	"github.com/leasehold/leasehold/wire/resp"
)

// rtServe serves b over RESP on a loopback port until the test ends.
func rtServe(t *testing.T, b Backend, opts RESPOptions) (*RESPServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewRESPServer(b, opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrRESPServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		b.Close()
	})
	return srv, ln.Addr().String()
}

func rtEngine(t *testing.T) Backend {
	e, err := OpenEngine(EngineConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func rtBackends(t *testing.T) map[string]func(t *testing.T) Backend {
	return map[string]func(t *testing.T) Backend{
		"engine": rtEngine,
		"proxy":  func(t *testing.T) Backend { return NewProxy(memory.New(), ProxyConfig{}) },
	}
}

// rtConn is a raw protocol connection.
type rtConn struct {
	rawConn
	rd *resp.Reader
}

// rawConn is a connection a test writes raw bytes on.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func rtDial(t *testing.T, addr string) *rtConn {
	t.Helper()
	nc := rtNetDial(t, addr)
	return &rtConn{rawConn: rawConn{t: t, nc: nc}, rd: resp.NewReader(bufio.NewReader(nc))}
}

// rtNetDial connects to addr for the rest of the test, with a minute's
// deadline.
func rtNetDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute))
	return nc
}

func (c *rawConn) send(raw string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(raw)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rtConn) read() string {
	c.t.Helper()
	v, err := c.rd.ReadValue()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return rtShow(v)
}

// do sends one command and returns its reply in rtShow's notation.
func (c *rtConn) do(args ...string) string {
	c.t.Helper()
	c.send(string(resp.AppendCommand(nil, args...)))
	return c.read()
}

// rtShow renders a reply: +OK, -ERR ..., :1, $text, $nil, [a b].
func rtShow(v resp.Value) string {
	switch {
	case v.Null:
		return "$nil"
	case v.Type == resp.Integer:
		return fmt.Sprintf(":%d", v.Int)
	case v.Type == resp.Array:
		parts := make([]string, len(v.Array))
		for i, e := range v.Array {
			parts[i] = rtShow(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case v.Type == resp.BulkString:
		return "$" + string(v.Str)
	}
	return string(v.Type) + string(v.Str)
}

// rtField returns element i of an array reply in rtShow's notation.
func rtFields(s string) []string { return strings.Fields(strings.Trim(s, "[]")) }

// rtExpect checks that got starts with want.
func rtExpect(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.HasPrefix(got, want) {
		t.Errorf("%s = %q, want %q...", what, got, want)
	}
}

func TestRESPCommands(t *testing.T) {
	for name, open := range rtBackends(t) {
		t.Run(name, func(t *testing.T) {
			_, addr := rtServe(t, open(t), RESPOptions{})
			c := rtDial(t, addr)
			rtExpect(t, "PING", c.do("PING"), "+PONG")
			rtExpect(t, "PING msg", c.do("ping", "hi there"), "$hi there")
			rtExpect(t, "ECHO", c.do("ECHO", "x"), "$x")
			rtExpect(t, "COMMAND", c.do("COMMAND", "DOCS"), "[]")
			rtExpect(t, "CLIENT SETNAME", c.do("CLIENT", "SETNAME", "me"), "+OK")
			rtExpect(t, "CLIENT GETNAME", c.do("client", "getname"), "$me")
			rtExpect(t, "CLIENT SETINFO", c.do("CLIENT", "SETINFO", "LIB-NAME", "x"), "+OK")
			rtExpect(t, "HELLO", c.do("HELLO"), "[$server $leasehold $version")
			rtExpect(t, "HELLO 2", c.do("HELLO", "2"), "[$server")
			rtExpect(t, "HELLO 4", c.do("HELLO", "4"), "-NOPROTO")
			rtExpect(t, "unknown", c.do("SET", "a", "b"), "-ERR unknown command 'SET'")
			rtExpect(t, "READY", c.do("LH.READY"), "+OK")

			// Acquire: [token ttl remaining acquired data].
			g := rtFields(c.do("LH.ACQUIRE", "jobs/a", "alice", "30000", "DATA", "hello", "REQID", "r1"))
			if len(g) != 5 || g[1] != ":30000" || g[4] != "$hello" || g[0] == ":0" {
				t.Fatalf("grant = %q", g)
			}
			tok := strings.TrimPrefix(g[0], ":")
			again := rtFields(c.do("lh.acquire", "jobs/a", "alice", "30000", "REQID", "r1"))
			if again[0] != g[0] {
				t.Errorf("retried acquire got token %s, want %s", again[0], g[0])
			}
			held := c.do("LH.ACQUIRE", "jobs/a", "bob the builder", "30000")
			rtExpect(t, "HELD", held, "-HELD "+tok+" ")
			if !strings.HasSuffix(held, " alice") {
				t.Errorf("HELD reply %q does not end with the owner", held)
			}
			err := resp.ParseError([]byte(strings.TrimPrefix(held, "-")), "jobs/a")
			var he *leasehold.HeldError
			if !errors.As(err, &he) || he.Owner != "alice" || fmt.Sprint(he.Token) != tok || he.Remaining <= 0 || he.Remaining > 30*time.Second {
				t.Errorf("HELD parses as %#v", err)
			}
			rec := rtFields(c.do("LH.GET", "jobs/a"))
			if len(rec) != 7 || rec[0] != g[0] || rec[5] != "$jobs/a" || rec[6] != "$alice" {
				t.Errorf("GET = %q", rec)
			}
			rtExpect(t, "LIST", c.do("LH.LIST", "jobs/"), "[["+g[0])
			rtExpect(t, "LIST other", c.do("LH.LIST", "nothing/"), "[]")
			rtExpect(t, "RENEW", c.do("LH.RENEW", "jobs/a", "alice", tok, "60000"), "+OK")
			rtExpect(t, "GET after renew", c.do("LH.GET", "jobs/a"), "["+g[0]+" :60000")
			rtExpect(t, "RENEW wrong token", c.do("LH.RENEW", "jobs/a", "alice", "999999", "60000"), "-NOTHELD")
			rtExpect(t, "RELEASE by another", c.do("LH.RELEASE", "jobs/a", "bob the builder", tok), "-NOTHELD")
			rtExpect(t, "RELEASE", c.do("LH.RELEASE", "jobs/a", "alice", tok), "+OK")
			rtExpect(t, "RELEASE again", c.do("LH.RELEASE", "jobs/a", "alice", tok), "+OK")
			rtExpect(t, "GET released", c.do("LH.GET", "jobs/a"), "$nil")

			// Bad input: a clear error, nothing changed.
			for _, bad := range []struct{ args, want string }{
				{"LH.ACQUIRE|x|a|1", "-INVALID ttl: "},
				{"LH.ACQUIRE|x|a|abc", "-INVALID ttl: "},
				{"LH.ACQUIRE|x|a|99999999999999999999", "-INVALID ttl: "},
				{"LH.ACQUIRE|x|a|-5", "-INVALID ttl: "},
				{"LH.ACQUIRE||a|1000", "-INVALID name: "},
				{"LH.ACQUIRE|a/../b|a|1000", "-INVALID name: "},
				{"LH.ACQUIRE|a%2Fb|a|1000", "-INVALID name: "},
				{"LH.ACQUIRE|a\x00b|a|1000", "-INVALID name: "},
				{"LH.ACQUIRE|x||1000", "-INVALID owner: "},
				{"LH.ACQUIRE|x|a|1000|REQID|a\tb", "-INVALID request id: "},
				{"LH.ACQUIRE|x|a|1000|DATA|" + strings.Repeat("d", leasehold.MaxDataLen+1), "-INVALID data: "},
				{"LH.ACQUIRE|x|a|1000|WAIT|-1", "-INVALID wait: "},
				// As HTTP's wait_ms: at most 5 minutes (it took 2^63-1).
				{"LH.ACQUIRE|x|a|1000|WAIT|300001", "-INVALID wait: must be in [0, 300000] ms"},
				{"LH.ACQUIRE|x|a|1000|WAIT|9223372036854775807", "-INVALID wait: "},
				{"LH.ACQUIRE|x|a|1000|WAIT|1|WAIT|2", "-ERR syntax error"},
				{"LH.ACQUIRE|x|a|1000|COLOUR|red", "-ERR syntax error"},
				{"LH.ACQUIRE|x|a|1000|WAIT", "-ERR wrong number of arguments for 'lh.acquire'"},
				{"LH.ACQUIRE|x", "-ERR wrong number"},
				{"LH.RENEW|x|a|0|1000", "-INVALID token: "},
				{"LH.RENEW|x|a|-1|1000", "-INVALID token: "},
				{"LH.RENEW|x|a|1|0", "-INVALID ttl: "},
				{"LH.RELEASE|x|a", "-ERR wrong number"},
				{"LH.GET|", "-INVALID name: "},
				{"LH.LIST|a\x7f", "-INVALID name: "},
				{"LH.SESSION|OPEN|1", "-INVALID ttl: "},
				{"LH.SESSION|FLY|1", "-ERR unknown subcommand"},
				{"LH.FORCERELEASE|x", "-NOTFOUND"},
			} {
				rtExpect(t, strings.ReplaceAll(bad.args, "|", " "), c.do(strings.Split(bad.args, "|")...), bad.want)
			}
			rtExpect(t, "LIST after bad input", c.do("LH.LIST"), "[]")

			// Force release returns the grant it ended.
			g = rtFields(c.do("LH.ACQUIRE", "jobs/b", "carol", "30000"))
			rtExpect(t, "FORCERELEASE", c.do("LH.FORCERELEASE", "jobs/b"), "["+g[0])
			rtExpect(t, "GET after force", c.do("LH.GET", "jobs/b"), "$nil")

			// Sessions: leases attached to one end with it.
			id := strings.TrimPrefix(c.do("LH.SESSION", "OPEN", "5000"), "$")
			if id == "" || strings.HasPrefix(id, "-") {
				t.Fatalf("SESSION OPEN = %q", id)
			}
			rtExpect(t, "acquire in session", c.do("LH.ACQUIRE", "jobs/s", "dave", "30000", "SESSION", id), "[:")
			rtExpect(t, "KEEPALIVE", c.do("LH.SESSION", "KEEPALIVE", id), "[:5000 :")
			rtExpect(t, "acquire in unknown session", c.do("LH.ACQUIRE", "jobs/t", "dave", "30000", "SESSION", "nope"), "-NOSESSION")
			rtExpect(t, "CLOSE", c.do("LH.SESSION", "CLOSE", id), "+OK")
			rtExpect(t, "GET after session close", c.do("LH.GET", "jobs/s"), "$nil")
			rtExpect(t, "KEEPALIVE after close", c.do("LH.SESSION", "KEEPALIVE", id), "-NOSESSION")

			// Inline commands, as typed into telnet.
			c.send("lh.get jobs/none\r\nPING\n")
			rtExpect(t, "inline GET", c.read(), "$nil")
			rtExpect(t, "inline PING", c.read(), "+PONG")
			rtExpect(t, "QUIT", c.do("QUIT"), "+OK")
			if _, err := c.rd.ReadValue(); err == nil {
				t.Error("connection still open after QUIT")
			}
		})
	}
}

// TestRESPPipelining: many commands written at once are answered in order;
// commands naming the same lease take effect in the order sent.
func TestRESPPipelining(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	c := rtDial(t, addr)
	const n = 300
	var b []byte
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("p/%d", i)
		b = resp.AppendCommand(b, "LH.ACQUIRE", name, "o", "30000", "REQID", "r")
		b = resp.AppendCommand(b, "LH.GET", name)
		b = resp.AppendCommand(b, "PING", name)
		b = resp.AppendCommand(b, "LH.ACQUIRE", name, "other", "30000")
	}
	c.send(string(b))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("p/%d", i)
		g := rtFields(c.read())
		rec := rtFields(c.read())
		if len(g) != 5 || len(rec) != 7 || rec[0] != g[0] || rec[5] != "$"+name || rec[6] != "$o" {
			t.Fatalf("%s: acquire %q then get %q", name, g, rec)
		}
		rtExpect(t, "PING "+name, c.read(), "$"+name)
		rtExpect(t, "second acquire of "+name, c.read(), "-HELD "+strings.TrimPrefix(g[0], ":")+" ")
	}
	// A release pipelined before an acquire of the same name frees it first.
	var tok string
	for i := 0; i < 50; i++ {
		g := rtFields(c.do("LH.ACQUIRE", "p/cycle", "o", "30000"))
		if tok = strings.TrimPrefix(g[0], ":"); tok == "" {
			t.Fatalf("acquire %d: %q", i, g)
		}
		c.send(string(resp.AppendCommand(resp.AppendCommand(nil, "LH.RELEASE", "p/cycle", "o", tok), "LH.ACQUIRE", "p/cycle", "o2", "30000")))
		rtExpect(t, "release", c.read(), "+OK")
		g = rtFields(c.read())
		if len(g) != 5 {
			t.Fatalf("acquire right after release: %q", g)
		}
		rtExpect(t, "release o2", c.do("LH.RELEASE", "p/cycle", "o2", strings.TrimPrefix(g[0], ":")), "+OK")
	}
}

// TestRESPWaiterDroppedWithConnection: closing a connection drops its
// queued waiters, which are then never granted.
func TestRESPWaiterDroppedWithConnection(t *testing.T) {
	b := rtEngine(t)
	_, addr := rtServe(t, b, RESPOptions{})
	holder := rtDial(t, addr)
	g := rtFields(holder.do("LH.ACQUIRE", "w/x", "holder", "30000"))
	waiter := rtDial(t, addr)
	waiter.send(string(resp.AppendCommand(nil, "LH.ACQUIRE", "w/x", "waiter", "30000", "WAIT", "60000")))
	servertest.WaitFor(t, "the waiter to queue", func() bool { return len(b.Waiters("w/x")) == 1 })
	waiter.nc.Close()
	servertest.WaitFor(t, "the waiter to leave", func() bool { return len(b.Waiters("w/x")) == 0 })
	rtExpect(t, "release", holder.do("LH.RELEASE", "w/x", "holder", strings.TrimPrefix(g[0], ":")), "+OK")
	rtExpect(t, "GET after release", holder.do("LH.GET", "w/x"), "$nil")

	// A waiter on a live connection is granted by the release, and its
	// reply holds up the replies behind it until then.
	g = rtFields(holder.do("LH.ACQUIRE", "w/x", "holder", "30000"))
	w2 := rtDial(t, addr)
	w2.send(string(resp.AppendCommand(resp.AppendCommand(nil, "LH.ACQUIRE", "w/x", "w2", "30000", "WAIT", "60000"), "PING")))
	servertest.WaitFor(t, "the second waiter to queue", func() bool { return len(b.Waiters("w/x")) == 1 })
	rtExpect(t, "release", holder.do("LH.RELEASE", "w/x", "holder", strings.TrimPrefix(g[0], ":")), "+OK")
	rtExpect(t, "granted waiter", w2.read(), "[:")
	rtExpect(t, "PING behind it", w2.read(), "+PONG")
	rtExpect(t, "holder", holder.do("LH.GET", "w/x"), "[")
}

// TestRESPMalformed: bad protocol input gets an error reply and the
// connection is closed; the server goes on serving others.
func TestRESPMalformed(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	for _, raw := range []string{
		"*1\r\n$99999999\r\n",
		"*99999\r\n",
		"*2\r\n$3\r\nGET\r\n:1\r\n",
		"*1\r\n$3\r\nabcdef\r\n",
		"*1\r\n$-1\r\n",
		"*x\r\n",
		strings.Repeat("a", 100<<10) + "\r\n",
	} {
		c := rtDial(t, addr)
		c.send("PING\r\n" + raw)
		rtExpect(t, "PING before", c.read(), "+PONG")
		rtExpect(t, fmt.Sprintf("%.20q", raw), c.read(), "-ERR Protocol error")
		if _, err := c.rd.ReadValue(); err == nil {
			t.Errorf("%.20q: connection left open", raw)
		}
	}
	c := rtDial(t, addr)
	rtExpect(t, "PING on a new connection", c.do("PING"), "+PONG")
}

func rtAuth(t *testing.T) *Auth {
	return testAuth(t, []TokenConfig{
		{Identity: "team", Token: "team-token", Grants: []Grant{{Prefix: "team/", Access: "write"}, {Prefix: "team/ro/", Access: "read"}}},
		{Identity: "reader", Token: "reader-token", Grants: []Grant{{Prefix: "", Access: "read"}}},
		{Identity: "admin", Token: "admin-token", Grants: []Grant{{Prefix: "", Access: "admin"}}},
	})
}

// TestRESPAuth: without AUTH, with a wrong token, or outside its grants a
// caller is refused and nothing changes.
func TestRESPAuth(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t)})
	admin := rtDial(t, addr)
	rtExpect(t, "admin AUTH", admin.do("AUTH", "admin-token"), "+OK")
	g := rtFields(admin.do("LH.ACQUIRE", "other/x", "admin", "30000"))

	anon := rtDial(t, addr)
	rtExpect(t, "PING without AUTH", anon.do("PING"), "+PONG")
	rtExpect(t, "acquire without AUTH", anon.do("LH.ACQUIRE", "team/a", "me", "30000"), "-NOAUTH")
	rtExpect(t, "GET without AUTH", anon.do("LH.GET", "other/x"), "-NOAUTH")
	rtExpect(t, "CLIENT without AUTH", anon.do("CLIENT", "SETNAME", "x"), "-NOAUTH")
	rtExpect(t, "HELLO without AUTH", anon.do("HELLO", "2"), "-NOAUTH")
	rtExpect(t, "wrong token", anon.do("AUTH", "nope"), "-WRONGPASS")
	rtExpect(t, "acquire after a wrong token", anon.do("LH.ACQUIRE", "team/a", "me", "30000"), "-NOAUTH")
	rtExpect(t, "HELLO with a wrong token", anon.do("HELLO", "2", "AUTH", "default", "nope"), "-WRONGPASS")

	team := rtDial(t, addr)
	rtExpect(t, "HELLO AUTH", team.do("HELLO", "2", "AUTH", "default", "team-token"), "[$server")
	rtExpect(t, "acquire in prefix", team.do("LH.ACQUIRE", "team/a", "me", "30000"), "[:")
	rtExpect(t, "acquire outside prefix", team.do("LH.ACQUIRE", "other/y", "me", "30000"), "-NOPERM")
	rtExpect(t, "acquire in a read-only sub-prefix", team.do("LH.ACQUIRE", "team/ro/x", "me", "30000"), "-NOPERM")
	rtExpect(t, "release outside prefix", team.do("LH.RELEASE", "other/x", "admin", strings.TrimPrefix(g[0], ":")), "-NOPERM")
	rtExpect(t, "GET outside prefix", team.do("LH.GET", "other/x"), "-NOPERM")
	rtExpect(t, "LIST outside prefix", team.do("LH.LIST", ""), "-NOPERM")
	rtExpect(t, "LIST in prefix", team.do("LH.LIST", "team/"), "[[")
	rtExpect(t, "force release without admin", team.do("LH.FORCERELEASE", "team/a"), "-NOPERM")
	rtExpect(t, "escape attempt", team.do("LH.ACQUIRE", "team/../other/x", "me", "30000"), "-INVALID name")

	reader := rtDial(t, addr)
	rtExpect(t, "reader AUTH user token", reader.do("AUTH", "someone", "reader-token"), "+OK")
	rtExpect(t, "reader GET", reader.do("LH.GET", "other/x"), "["+g[0])
	rtExpect(t, "reader acquire", reader.do("LH.ACQUIRE", "team/b", "me", "30000"), "-NOPERM")
	if got := rtFields(reader.do("LH.LIST", "")); len(got) != 14 {
		t.Errorf("reader LIST = %q, want both leases", got)
	}

	// Sessions belong to the identity that opened them.
	sid := strings.TrimPrefix(team.do("LH.SESSION", "OPEN", "10000"), "$")
	rtExpect(t, "another identity's keepalive", admin.do("LH.SESSION", "KEEPALIVE", sid), "-NOSESSION")
	// Sessions need write access (to some prefix), as on HTTP.
	rtExpect(t, "read-only keepalive", reader.do("LH.SESSION", "KEEPALIVE", sid), "-NOPERM")
	rtExpect(t, "read-only open", reader.do("LH.SESSION", "OPEN", "10000"), "-NOPERM")
	rtExpect(t, "read-only close", reader.do("LH.SESSION", "CLOSE", sid), "-NOPERM")
	rtExpect(t, "another identity's close", admin.do("LH.SESSION", "CLOSE", sid), "-NOSESSION")
	rtExpect(t, "attach to another identity's session", admin.do("LH.ACQUIRE", "other/s", "admin", "30000", "SESSION", sid), "-NOSESSION")
	rtExpect(t, "own keepalive", team.do("LH.SESSION", "KEEPALIVE", sid), "[:10000")

	// Nothing changed: only the two leases taken legitimately exist.
	list := admin.do("LH.LIST", "")
	if got := rtFields(list); len(got) != 14 || !strings.Contains(list, "$team/a $me") || !strings.Contains(list, "$other/x $admin") {
		t.Errorf("leases after refusals: %s", list)
	}
	rtExpect(t, "admin force release", admin.do("LH.FORCERELEASE", "team/a"), "[")
}

// TestRESPRateLimit: over the limit a command is refused with RATELIMITED
// and changes nothing.
func TestRESPRateLimit(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t), Limits: &Limits{PerSecond: 0.001, Burst: 3}})
	c := rtDial(t, addr)
	rtExpect(t, "AUTH", c.do("AUTH", "team-token"), "+OK")
	for i := 0; i < 3; i++ {
		rtExpect(t, "within burst", c.do("LH.GET", "team/x"), "$nil")
	}
	rtExpect(t, "over the limit", c.do("LH.ACQUIRE", "team/x", "me", "30000"), "-RATELIMITED")
	rtExpect(t, "PING is not limited", c.do("PING"), "+PONG")
	admin := rtDial(t, addr)
	rtExpect(t, "admin AUTH", admin.do("AUTH", "admin-token"), "+OK")
	rtExpect(t, "nothing acquired", admin.do("LH.GET", "team/x"), "$nil")
}
