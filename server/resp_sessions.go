package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/storekit"
	"time"

	"github.com/leasehold/leasehold/wire/resp"
)

// Sessions and watch mode (rows in resp_table.go). The sessions' rows need
// write access to some prefix, as on HTTP.

// LH.SESSION OPEN ttl_ms: the new session's id.
func (c *respConn) sessionOpen(a *respArgs) {
	ttl, err := parseMillis(a.pos[0], "ttl")
	if err == nil {
		err = storekit.ValidateTTL(ttl)
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	srv, ctx, id := c.srv, c.ctx, c.ident
	c.async("", false, func(b []byte) []byte {
		sess, err := srv.b.OpenSession(ctx, ttl)
		if err != nil {
			return srv.appendErr(b, err)
		}
		srv.bindSession(id, sess)
		return resp.AppendBulkString(b, sess.ID)
	})
}

// LH.SESSION KEEPALIVE id: [ttl_ms, remaining_ms, leases].
func (c *respConn) sessionKeepAlive(a *respArgs) {
	srv, ctx, id, resp3 := c.srv, c.ctx, c.ident, c.resp3
	sid := string(a.pos[0])
	if !srv.ownsSession(id, sid) {
		c.replyErr(ErrNoSession)
		return
	}
	c.async("", false, func(b []byte) []byte {
		sess, err := srv.b.KeepAlive(ctx, sid)
		if err != nil {
			if errors.Is(err, ErrNoSession) {
				srv.unbindSession(sid)
			}
			return srv.appendErr(b, err)
		}
		srv.bindSession(id, sess)
		if resp3 {
			b = resp.AppendMap(b, 3)
			b = resp.AppendBulkString(b, "ttl_ms")
			b = resp.AppendInt(b, resp.Millis(sess.TTL))
			b = resp.AppendBulkString(b, "remaining_ms")
			b = resp.AppendInt(b, resp.CeilMillis(sess.Remaining))
			b = resp.AppendBulkString(b, "leases")
			return resp.AppendInt(b, int64(sess.Leases))
		}
		b = resp.AppendArray(b, 3)
		b = resp.AppendInt(b, resp.Millis(sess.TTL))
		b = resp.AppendInt(b, resp.CeilMillis(sess.Remaining))
		return resp.AppendInt(b, int64(sess.Leases))
	})
}

// LH.SESSION CLOSE id: ends the session and releases its leases.
func (c *respConn) sessionClose(a *respArgs) {
	srv, ctx, id := c.srv, c.ctx, c.ident
	sid := string(a.pos[0])
	if !srv.ownsSession(id, sid) {
		c.replyErr(ErrNoSession)
		return
	}
	c.async("", false, func(b []byte) []byte {
		err := srv.b.CloseSession(ctx, sid)
		if err == nil || errors.Is(err, ErrNoSession) {
			srv.unbindSession(sid)
		}
		if err != nil {
			return srv.appendErr(b, err)
		}
		return append(b, "+OK\r\n"...)
	})
}

// With auth on, a session may only be used by the identity that opened it
// through this server. The binding is kept in memory: it lapses a while
// after the session's last keepalive seen here.

func (s *RESPServer) bindSession(id *Identity, sess Session) {
	if s.opts.Auth == nil {
		return
	}
	now := time.Now()
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	s.sessions[sess.ID] = respSession{identity: id.Name, until: now.Add(2*sess.TTL + time.Minute)}
	if len(s.sessions) >= 1024 && len(s.sessions)&(len(s.sessions)-1) == 0 { // at powers of two
		for k, v := range s.sessions {
			if now.After(v.until) {
				delete(s.sessions, k)
			}
		}
	}
}

func (s *RESPServer) unbindSession(sid string) {
	if s.opts.Auth == nil {
		return
	}
	s.sessMu.Lock()
	delete(s.sessions, sid)
	s.sessMu.Unlock()
}

func (s *RESPServer) ownsSession(id *Identity, sid string) bool {
	if s.opts.Auth == nil {
		return true
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	b, ok := s.sessions[sid]
	return ok && id != nil && b.identity == id.Name && time.Now().Before(b.until)
}

// Watch mode. LH.SUBSCRIBE name turns the connection into a stream of
// notifications: from then on it takes only LH.SUBSCRIBE, LH.UNSUBSCRIBE,
// PING and QUIT. Each (un)subscribe is answered in order with
// [subscribe|unsubscribe, name, count]; between those answers the server
// pushes [freed, name, released|expired|forced|overflow] whenever a watched
// lease is freed (overflow: notifications were lost, re-check everything).

// maxSubscriptions is the most subscriptions of one connection. Each
// costs a goroutine and a subscription of the backend; the server-wide
// total is RESPOptions.MaxSubscriptions.
const maxSubscriptions = 1024

// LH.SUBSCRIBE name
func (c *respConn) subscribe(a *respArgs) {
	name := a.name
	if c.subs == nil {
		c.subs = map[string]context.CancelFunc{}
		c.watching.Store(true)
	}
	if _, ok := c.subs[name]; !ok {
		if len(c.subs) >= maxSubscriptions {
			c.replyError(fmt.Sprintf("ERR at most %d subscriptions per connection; nothing was changed", maxSubscriptions))
			return
		}
		if c.subsKey == "" {
			c.subsKey = c.quotaKey()
		}
		if share, ok := c.srv.takeSub(c.subsKey); !ok {
			c.srv.opts.Metrics.quotaRefused(QuotaSubscriptions)
			c.replyError(fmt.Sprintf("%s quota exceeded: this client has %d subscriptions, its share of the server's %d (a quarter of --resp-max-subscriptions); nothing was changed", resp.CodeQuota, share, c.srv.opts.MaxSubscriptions))
			return
		}
		if n := c.srv.subs.Add(1); n > int64(c.srv.opts.MaxSubscriptions) {
			c.srv.subs.Add(-1)
			c.srv.giveSubs(c.subsKey, 1)
			c.srv.warn.Warn("resp: the subscriptions of all connections are at their limit (--resp-max-subscriptions)", "remote", c.nc.RemoteAddr(), "limit", c.srv.opts.MaxSubscriptions)
			c.replyError(fmt.Sprintf("ERR the server has %d subscriptions, its limit; nothing was changed", c.srv.opts.MaxSubscriptions))
			return
		}
		ctx, cancel := context.WithCancel(c.waitCtx)
		events := c.srv.b.Subscribe(ctx, name)
		c.subs[name] = cancel
		go c.notify(ctx, name, events, c.resp3)
	}
	n, resp3 := int64(len(c.subs)), c.resp3
	c.reply(func(b []byte) []byte { return appendSubReply(b, "subscribe", name, n, resp3) })
}

// takeSub counts a subscription of the client key, unless it has its
// share already (a quarter of MaxSubscriptions, at least maxSubscriptions:
// one client's connections cannot take every subscription); it returns
// the client's count.
func (s *RESPServer) takeSub(key string) (int, bool) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	n := s.subsBy[key]
	if n >= max(s.opts.MaxSubscriptions/4, maxSubscriptions) {
		return n, false
	}
	if s.subsBy == nil {
		s.subsBy = map[string]int{}
	}
	s.subsBy[key] = n + 1
	return n + 1, true
}

// giveSubs gives back n subscriptions of the client key.
func (s *RESPServer) giveSubs(key string, n int) {
	if n == 0 {
		return
	}
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if s.subsBy[key] -= n; s.subsBy[key] <= 0 {
		delete(s.subsBy, key)
	}
}

// LH.UNSUBSCRIBE name
func (c *respConn) unsubscribe(a *respArgs) {
	name := string(a.pos[0])
	if cancel, ok := c.subs[name]; ok {
		cancel()
		delete(c.subs, name)
		c.srv.subs.Add(-1)
		c.srv.giveSubs(c.subsKey, 1)
	}
	if c.subs == nil {
		c.subs = map[string]context.CancelFunc{} // watch mode all the same
	}
	n, resp3 := int64(len(c.subs)), c.resp3
	c.reply(func(b []byte) []byte { return appendSubReply(b, "unsubscribe", name, n, resp3) })
}

// appendSubReply answers (un)subscribe: an array in RESP2, a push in
// RESP3 (as Redis does).
func appendSubReply(b []byte, kind, name string, n int64, resp3 bool) []byte {
	b = appendMessage(b, 3, resp3)
	b = resp.AppendBulkString(b, kind)
	b = resp.AppendBulkString(b, name)
	return resp.AppendInt(b, n)
}

// appendMessage appends the header of a watch-mode message of n
// elements: an array in RESP2, a push in RESP3.
func appendMessage(b []byte, n int, resp3 bool) []byte {
	if resp3 {
		return resp.AppendPush(b, n)
	}
	return resp.AppendArray(b, n)
}

// notify pushes the frees of name until ctx ends, as RESP3 pushes if
// resp3 (the protocol cannot change in watch mode: HELLO is refused there).
func (c *respConn) notify(ctx context.Context, name string, events <-chan Event, resp3 bool) {
	for ev := range events {
		switch {
		case ev.Type == EventOverflow:
		case ev.Name != name:
			continue
		case ev.Type == EventReleased, ev.Type == EventExpired, ev.Type == EventForced:
		default:
			continue
		}
		c.out.Push(ctx, func(b []byte) []byte {
			b = appendMessage(b, 3, resp3)
			b = resp.AppendBulkString(b, "freed")
			b = resp.AppendBulkString(b, name)
			return resp.AppendBulkString(b, string(ev.Type))
		})
	}
}
