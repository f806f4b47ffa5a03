package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/wire/resp"
)

// r3Conn is a raw connection read as RESP3: every reply is kept as the
// bytes that came in and rendered in r3Show's notation.
type r3Conn struct {
	rawConn
	br *bufio.Reader
}

func r3Dial(t *testing.T, addr string) *r3Conn {
	t.Helper()
	nc := rtNetDial(t, addr)
	return &r3Conn{rawConn: rawConn{t: t, nc: nc}, br: bufio.NewReader(nc)}
}

// do sends a command and returns its reply: the raw bytes and the
// rendering.
func (c *r3Conn) do(args ...string) (raw, shown string) {
	c.t.Helper()
	c.send(string(resp.AppendCommand(nil, args...)))
	return c.read()
}

func (c *r3Conn) read() (raw, shown string) {
	c.t.Helper()
	var rb strings.Builder
	shown, err := r3Read(c.br, &rb)
	if err != nil {
		c.t.Fatalf("reading a RESP3 reply: %v (read so far %q)", err, rb.String())
	}
	return rb.String(), shown
}

// r3Read reads one RESP3 value, copying its bytes to raw, and renders it:
// +OK, -ERR ..., :1, $text, _ (null), [a b] (array), >[a b] (push),
// {k:v k:v} (map).
func r3Read(br *bufio.Reader, raw *strings.Builder) (string, error) {
	line, err := br.ReadString('\n')
	raw.WriteString(line)
	if err != nil {
		return "", err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("bad line %q", line)
	}
	kind, rest := line[0], line[1:len(line)-2]
	switch kind {
	case '+', '-', ':':
		return string(kind) + rest, nil
	case '_':
		return "_", nil
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", rest)
		}
		if n < 0 {
			return "$nil", nil // RESP2's null, which a RESP3 reply must not use
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		raw.Write(buf)
		return "$" + string(buf[:n]), nil
	case '*', '>', '%':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("bad count %q", rest)
		}
		if kind == '%' {
			n *= 2
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = r3Read(br, raw); err != nil {
				return "", err
			}
		}
		switch kind {
		case '%':
			pairs := make([]string, n/2)
			for i := range pairs {
				pairs[i] = strings.TrimPrefix(parts[2*i], "$") + ":" + parts[2*i+1]
			}
			return "{" + strings.Join(pairs, " ") + "}", nil
		case '>':
			return ">[" + strings.Join(parts, " ") + "]", nil
		}
		return "[" + strings.Join(parts, " ") + "]", nil
	}
	return "", fmt.Errorf("unknown type %q", kind)
}

// r3Keys returns the labels of a rendered map, in order.
func r3Keys(shown string) []string {
	var keys []string
	for _, f := range strings.Fields(strings.Trim(shown, "{}")) {
		k, _, _ := strings.Cut(f, ":")
		keys = append(keys, k)
	}
	return keys
}

func r3Want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// TestRESP3Replies: after HELLO 3 the lease replies are maps with labelled
// fields (raw bytes checked), a missing lease is RESP3's null, errors and
// +OK are as in RESP2; HELLO 2 brings the positional arrays back.
func TestRESP3Replies(t *testing.T) {
	for name, open := range rtBackends(t) {
		t.Run(name, func(t *testing.T) {
			_, addr := rtServe(t, open(t), RESPOptions{})
			c := r3Dial(t, addr)

			raw, shown := c.do("HELLO", "3")
			rtExpect(t, "HELLO 3 (raw)", raw, "%7\r\n$6\r\nserver\r\n$9\r\nleasehold\r\n$7\r\nversion\r\n$1\r\n1\r\n$5\r\nproto\r\n:3\r\n")
			rtExpect(t, "HELLO 3", shown, "{server:$leasehold version:$1 proto::3 id::")

			raw, shown = c.do("LH.ACQUIRE", "jobs/a", "me", "30000", "DATA", "some-data")
			rtExpect(t, "LH.ACQUIRE (raw)", raw, "%5\r\n$5\r\ntoken\r\n:1\r\n$6\r\nttl_ms\r\n:30000\r\n$12\r\nremaining_ms\r\n:")
			if !strings.HasSuffix(raw, "$4\r\ndata\r\n$9\r\nsome-data\r\n") {
				t.Errorf("LH.ACQUIRE (raw) = %q: want the data last", raw)
			}
			r3Want(t, "LH.ACQUIRE labels", strings.Join(r3Keys(shown), " "), strings.Join(resp.GrantFields, " "))

			raw, shown = c.do("LH.GET", "jobs/a")
			rtExpect(t, "LH.GET (raw)", raw, "%7\r\n$4\r\nname\r\n$6\r\njobs/a\r\n$5\r\nowner\r\n$2\r\nme\r\n$5\r\ntoken\r\n:1\r\n")
			r3Want(t, "LH.GET labels", strings.Join(r3Keys(shown), " "), strings.Join(resp.RecordFields, " "))

			raw, _ = c.do("LH.GET", "jobs/none")
			r3Want(t, "LH.GET of a free name (raw)", raw, "_\r\n")

			raw, _ = c.do("LH.ACQUIRE", "jobs/a", "you", "30000")
			rtExpect(t, "LH.ACQUIRE of a held lease", raw, "-HELD 1 ")
			raw, _ = c.do("LH.RENEW", "jobs/a", "me", "1", "30000")
			r3Want(t, "LH.RENEW", raw, "+OK\r\n")

			c.do("LH.ACQUIRE", "jobs/b", "other", "30000")
			raw, shown = c.do("LH.LIST", "jobs/")
			rtExpect(t, "LH.LIST (raw)", raw, "*2\r\n%7\r\n$4\r\nname\r\n$6\r\njobs/a\r\n")
			rtExpect(t, "LH.LIST", shown, "[{name:$jobs/a owner:$me token::1 ")
			if !strings.Contains(shown, "} {name:$jobs/b owner:$other token::") {
				t.Errorf("LH.LIST = %q: want jobs/b's map second", shown)
			}
			raw, shown = c.do("LH.SCAN", "jobs/", "0", "COUNT", "1")
			rtExpect(t, "LH.SCAN (raw)", raw, "*2\r\n$")
			rtExpect(t, "LH.SCAN", shown, "[$n")
			if !strings.Contains(shown, " [{name:$jobs/a owner:$me token::1 ") {
				t.Errorf("LH.SCAN = %q: want [cursor, [jobs/a's map]]", shown)
			}

			raw, shown = c.do("LH.FORCERELEASE", "jobs/b")
			rtExpect(t, "LH.FORCERELEASE (raw)", raw, "%7\r\n$4\r\nname\r\n$6\r\njobs/b\r\n$5\r\nowner\r\n$5\r\nother\r\n")
			r3Want(t, "LH.FORCERELEASE labels", strings.Join(r3Keys(shown), " "), strings.Join(resp.RecordFields, " "))

			_, sid := c.do("LH.SESSION", "OPEN", "20000")
			raw, shown = c.do("LH.SESSION", "KEEPALIVE", strings.TrimPrefix(sid, "$"))
			rtExpect(t, "LH.SESSION KEEPALIVE (raw)", raw, "%3\r\n$6\r\nttl_ms\r\n:20000\r\n$12\r\nremaining_ms\r\n:")
			r3Want(t, "LH.SESSION KEEPALIVE labels", strings.Join(r3Keys(shown), " "), strings.Join(resp.SessionFields, " "))

			// Back to RESP2: the same replies as positional arrays.
			raw, _ = c.do("HELLO", "2")
			rtExpect(t, "HELLO 2 (raw)", raw, "*14\r\n$6\r\nserver\r\n")
			raw, _ = c.do("LH.GET", "jobs/a")
			rtExpect(t, "LH.GET in RESP2 (raw)", raw, "*7\r\n:1\r\n:30000\r\n")
			raw, _ = c.do("LH.GET", "jobs/none")
			r3Want(t, "LH.GET of a free name in RESP2 (raw)", raw, "$-1\r\n")

			// HELLO without a version keeps the protocol.
			c.do("HELLO", "3")
			raw, _ = c.do("HELLO")
			rtExpect(t, "HELLO after HELLO 3 (raw)", raw, "%7\r\n")
		})
	}
}

// TestRESP3Pipelined: a HELLO 3 pipelined between commands changes the
// replies of the commands after it only.
func TestRESP3Pipelined(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	c := r3Dial(t, addr)
	var b []byte
	b = resp.AppendCommand(b, "LH.ACQUIRE", "p/a", "me", "30000")
	b = resp.AppendCommand(b, "HELLO", "3")
	b = resp.AppendCommand(b, "LH.GET", "p/a")
	c.send(string(b))
	raw, _ := c.read()
	rtExpect(t, "LH.ACQUIRE before HELLO 3", raw, "*5\r\n:1\r\n")
	raw, _ = c.read()
	rtExpect(t, "HELLO 3", raw, "%7\r\n")
	raw, _ = c.read()
	rtExpect(t, "LH.GET after HELLO 3", raw, "%7\r\n$4\r\nname\r\n$3\r\np/a\r\n")
}

// TestRESP3HelloRefused: an unknown version or a failed AUTH leaves the
// connection on RESP2.
func TestRESP3HelloRefused(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t)})
	c := r3Dial(t, addr)
	raw, _ := c.do("HELLO", "4")
	rtExpect(t, "HELLO 4", raw, "-NOPROTO")
	raw, _ = c.do("HELLO", "3", "AUTH", "default", "wrong")
	rtExpect(t, "HELLO 3 with a wrong token", raw, "-WRONGPASS")
	raw, _ = c.do("AUTH", "team-token")
	r3Want(t, "AUTH", raw, "+OK\r\n")
	raw, _ = c.do("LH.ACQUIRE", "team/a", "me", "30000")
	rtExpect(t, "LH.ACQUIRE after refused HELLOs", raw, "*5\r\n:1\r\n")
	raw, _ = c.do("HELLO", "3", "AUTH", "default", "team-token", "SETNAME", "n")
	rtExpect(t, "HELLO 3 AUTH", raw, "%7\r\n")
	raw, _ = c.do("LH.GET", "team/a")
	rtExpect(t, "LH.GET", raw, "%7\r\n$4\r\nname\r\n")
	raw, _ = c.do("CLIENT", "GETNAME")
	r3Want(t, "CLIENT GETNAME", raw, "$1\r\nn\r\n")
}

// TestRESP3Watch: in RESP3 the watch-mode replies and notifications are
// pushes.
func TestRESP3Watch(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	holder := r3Dial(t, addr)
	_, g := holder.do("LH.ACQUIRE", "w/a", "me", "30000")
	w := r3Dial(t, addr)
	w.do("HELLO", "3")
	raw, _ := w.do("LH.SUBSCRIBE", "w/a")
	r3Want(t, "LH.SUBSCRIBE (raw)", raw, ">3\r\n$9\r\nsubscribe\r\n$3\r\nw/a\r\n:1\r\n")
	raw, _ = w.do("HELLO", "2")
	rtExpect(t, "HELLO in watch mode", raw, "-ERR 'HELLO' is not allowed")
	token := strings.TrimPrefix(strings.Fields(strings.Trim(g, "[]"))[0], ":")
	r3Want(t, "LH.RELEASE", func() string { r, _ := holder.do("LH.RELEASE", "w/a", "me", token); return r }(), "+OK\r\n")
	raw, _ = w.read()
	r3Want(t, "the notification (raw)", raw, ">3\r\n$5\r\nfreed\r\n$3\r\nw/a\r\n$8\r\nreleased\r\n")
	raw, _ = w.do("LH.UNSUBSCRIBE", "w/a")
	r3Want(t, "LH.UNSUBSCRIBE (raw)", raw, ">3\r\n$11\r\nunsubscribe\r\n$3\r\nw/a\r\n:0\r\n")
}

// TestRESP3GoRedis: go-redis v9 says HELLO 3 by default and then reads the
// lease replies as maps; with Protocol: 2 it gets the arrays.
func TestRESP3GoRedis(t *testing.T) {
	ctx := context.Background()
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	v, err := rdb.Do(ctx, "LH.ACQUIRE", "g/a", "go-redis", 30000, "DATA", "d").Result()
	m, ok := v.(map[any]any)
	if err != nil || !ok || m["token"] != int64(1) || m["ttl_ms"] != int64(30000) || m["data"] != "d" {
		t.Fatalf("LH.ACQUIRE = %#v, %v: want a map", v, err)
	}
	v, err = rdb.Do(ctx, "LH.GET", "g/a").Result()
	if m, ok := v.(map[any]any); err != nil || !ok || m["name"] != "g/a" || m["owner"] != "go-redis" {
		t.Errorf("LH.GET = %#v, %v: want a map", v, err)
	}
	if err := rdb.Do(ctx, "LH.GET", "g/none").Err(); err != redis.Nil {
		t.Errorf("LH.GET of a free name: %v, want redis.Nil", err)
	}

	r2 := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2})
	defer r2.Close()
	s, err := r2.Do(ctx, "LH.GET", "g/a").Slice()
	if err != nil || len(s) != 7 || s[5] != "g/a" || s[6] != "go-redis" {
		t.Errorf("LH.GET over RESP2 = %v, %v: want the array of 7", s, err)
	}
}

// TestRESP3RedisCLI: redis-cli -3 shows labelled fields (piped, one
// "label value" a line); without -3 the values alone.
func TestRESP3RedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("no redis-cli in PATH")
	}
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	host, port, _ := net.SplitHostPort(addr)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("-3", "LH.ACQUIRE", "cli/a", "me", "30000", "DATA", "x"); !strings.HasPrefix(out, "token 1\nttl_ms 30000\nremaining_ms ") || !strings.HasSuffix(out, "\ndata x\n") {
		t.Errorf("redis-cli -3 LH.ACQUIRE printed %q", out)
	}
	if out := run("-3", "LH.GET", "cli/a"); !strings.HasPrefix(out, "name cli/a\nowner me\ntoken 1\nttl_ms 30000\n") {
		t.Errorf("redis-cli -3 LH.GET printed %q", out)
	}
	if out := run("LH.GET", "cli/a"); !strings.HasPrefix(out, "1\n30000\n") {
		t.Errorf("redis-cli (RESP2) LH.GET printed %q", out)
	}
}
