package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/testrig/servertest"
	"github.com/leasehold/leasehold/wire/resp"
)

// TestRESPGoRedis: a stock Redis client (go-redis, which sends CLIENT
// SETINFO) works over RESP2, with and without a password. (Its default,
// HELLO 3, gets maps: TestRESP3GoRedis.)
func TestRESPGoRedis(t *testing.T) {
	ctx := context.Background()
	for _, auth := range []bool{false, true} {
		t.Run(fmt.Sprint("auth=", auth), func(t *testing.T) {
			opts := RESPOptions{}
			ro := &redis.Options{MaxRetries: -1, Protocol: 2}
			if auth {
				opts.Auth, ro.Password = rtAuth(t), "team-token"
			}
			_, addr := rtServe(t, rtEngine(t), opts)
			ro.Addr = addr
			rdb := redis.NewClient(ro)
			defer rdb.Close()
			v, err := rdb.Do(ctx, "LH.ACQUIRE", "team/r", "go-redis", 30000, "DATA", "d").Slice()
			if err != nil || len(v) != 5 || v[1] != int64(30000) || v[4] != "d" {
				t.Fatalf("LH.ACQUIRE = %v, %v", v, err)
			}
			token := v[0].(int64)
			_, err = rdb.Do(ctx, "LH.ACQUIRE", "team/r", "someone else", 30000).Result()
			if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("HELD %d ", token)) {
				t.Errorf("held: %v", err)
			}
			rec, err := rdb.Do(ctx, "LH.GET", "team/r").Slice()
			if err != nil || len(rec) != 7 || rec[6] != "go-redis" {
				t.Errorf("LH.GET = %v, %v", rec, err)
			}
			// Many goroutines through go-redis's pipeline and pool.
			servertest.Parallel(t, 16, func(i int) error {
				name := fmt.Sprintf("team/g%d", i)
				for j := 0; j < 20; j++ {
					v, err := rdb.Do(ctx, "LH.ACQUIRE", name, "g", 30000).Slice()
					if err == nil {
						err = rdb.Do(ctx, "LH.RELEASE", name, "g", v[0]).Err()
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err := rdb.Do(ctx, "LH.RELEASE", "team/r", "go-redis", token).Err(); err != nil {
				t.Error(err)
			}
			if err := rdb.Do(ctx, "LH.GET", "team/r").Err(); err != redis.Nil {
				t.Errorf("GET after release: %v, want redis.Nil", err)
			}
		})
	}
}

// TestRESPShutdown: Shutdown answers what was started (a queued waiter is
// cancelled) and closes connections; Serve then returns.
func TestRESPShutdown(t *testing.T) {
	b := rtEngine(t)
	defer b.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewRESPServer(b, RESPOptions{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c := rtDial(t, ln.Addr().String())
	rtExpect(t, "acquire", c.do("LH.ACQUIRE", "s/x", "a", "30000"), "[")
	c.send(string(resp.AppendCommand(nil, "LH.ACQUIRE", "s/x", "b", "30000", "WAIT", "60000")))
	servertest.WaitFor(t, "the waiter to queue", func() bool { return len(b.Waiters("s/x")) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rtExpect(t, "the cancelled waiter", c.read(), "-ERR")
	if _, err := c.rd.ReadValue(); err == nil {
		t.Error("connection open after Shutdown")
	}
	if err := <-done; !errors.Is(err, ErrRESPServerClosed) {
		t.Errorf("Serve = %v", err)
	}
	if len(b.Waiters("s/x")) != 0 {
		t.Error("waiter still queued after Shutdown")
	}
	if err := srv.Serve(ln); !errors.Is(err, ErrRESPServerClosed) {
		t.Errorf("Serve after Shutdown = %v", err)
	}
}

// TestRESPWatchMode: LH.SUBSCRIBE turns a connection into a stream of
// notifications of frees.
func TestRESPWatchMode(t *testing.T) {
	_, addr := rtServe(t, rtEngine(t), RESPOptions{})
	w := rtDial(t, addr)
	c := rtDial(t, addr)
	rtExpect(t, "SUBSCRIBE", w.do("LH.SUBSCRIBE", "wm/a"), "[$subscribe $wm/a :1]")
	rtExpect(t, "SUBSCRIBE again", w.do("lh.subscribe", "wm/a"), "[$subscribe $wm/a :1]")
	rtExpect(t, "SUBSCRIBE b", w.do("LH.SUBSCRIBE", "wm/b"), "[$subscribe $wm/b :2]")
	rtExpect(t, "other commands refused", w.do("LH.GET", "wm/a"), "-ERR 'LH.GET' is not allowed")
	rtExpect(t, "PING", w.do("PING"), "+PONG")
	rtExpect(t, "bad name", w.do("LH.SUBSCRIBE", "wm/../x"), "-INVALID name")

	g := rtFields(c.do("LH.ACQUIRE", "wm/a", "o", "30000"))
	c.do("LH.ACQUIRE", "wm/ab", "o", "50") // a longer name with the same prefix: not wm/a's
	rtExpect(t, "release", c.do("LH.RELEASE", "wm/a", "o", strings.TrimPrefix(g[0], ":")), "+OK")
	rtExpect(t, "push on release", w.read(), "[$freed $wm/a $released]")
	c.do("LH.ACQUIRE", "wm/b", "o", "50")
	rtExpect(t, "push on expiry", w.read(), "[$freed $wm/b $expired]")
	c.do("LH.ACQUIRE", "wm/a", "o", "30000")
	c.do("LH.FORCERELEASE", "wm/a")
	rtExpect(t, "push on force release", w.read(), "[$freed $wm/a $forced]")
	rtExpect(t, "UNSUBSCRIBE", w.do("LH.UNSUBSCRIBE", "wm/a"), "[$unsubscribe $wm/a :1]")
	g = rtFields(c.do("LH.ACQUIRE", "wm/a", "o", "30000"))
	c.do("LH.RELEASE", "wm/a", "o", strings.TrimPrefix(g[0], ":"))
	rtExpect(t, "no push after UNSUBSCRIBE", w.do("PING"), "+PONG")

	// With auth, watching needs read access.
	_, addr = rtServe(t, rtEngine(t), RESPOptions{Auth: rtAuth(t)})
	a := rtDial(t, addr)
	rtExpect(t, "SUBSCRIBE without AUTH", a.do("LH.SUBSCRIBE", "team/x"), "-NOAUTH")
	a.do("AUTH", "team-token")
	rtExpect(t, "SUBSCRIBE outside grants", a.do("LH.SUBSCRIBE", "other/x"), "-NOPERM")
	rtExpect(t, "SUBSCRIBE inside grants", a.do("LH.SUBSCRIBE", "team/ro/x"), "[$subscribe")
}
