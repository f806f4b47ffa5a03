package server

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/wire/resp"
)

// The connection's commands: PING, QUIT, ECHO, COMMAND, AUTH, HELLO,
// CLIENT and LH.READY (rows in resp_table.go).

// PING [message]
func (c *respConn) ping(a *respArgs) {
	if len(a.pos) == 1 {
		msg := a.pos[0]
		c.reply(func(b []byte) []byte { return resp.AppendBulk(b, msg) })
		return
	}
	c.reply(func(b []byte) []byte { return append(b, "+PONG\r\n"...) })
}

// QUIT: the preamble closes the connection after the reply.
func (c *respConn) quit(*respArgs) { c.replyOK() }

// ECHO message
func (c *respConn) echo(a *respArgs) {
	msg := a.pos[0]
	c.reply(func(b []byte) []byte { return resp.AppendBulk(b, msg) })
}

// COMMAND [...]: an empty list (clients that ask can cope with that).
func (c *respConn) command(*respArgs) {
	c.reply(func(b []byte) []byte { return resp.AppendArray(b, 0) })
}

// LH.READY: +OK when the backend can serve.
func (c *respConn) ready(*respArgs) {
	srv, ctx := c.srv, c.ctx
	c.async("", false, func(b []byte) []byte {
		if err := srv.b.Ready(ctx); err != nil {
			return resp.AppendError(b, "ERR not ready: "+err.Error())
		}
		return append(b, "+OK\r\n"...)
	})
}

// AUTH token | AUTH user token (the user name is not checked)
func (c *respConn) auth(a *respArgs) {
	if c.authenticate(a.pos[len(a.pos)-1]) {
		c.replyOK()
	}
}

// authenticate checks a token; on failure it replies WRONGPASS.
func (c *respConn) authenticate(token []byte) bool {
	if c.srv.opts.Auth == nil {
		return true // auth off: any token is accepted
	}
	// A good token is accepted whatever others sent from this address
	// (clients behind one NAT or proxy share it): the limit is on
	// failures, which an address over it gets answered RATELIMITED, each
	// after authTarpit, so that one connection guesses at most about once
	// a tarpit.
	id, err := c.srv.opts.Auth.Authenticate(string(token))
	if err != nil && !c.srv.authFail.allow(c.addr) {
		c.srv.opts.Metrics.rateLimit()
		time.Sleep(authTarpit)
		c.replyError(resp.CodeRateLimited + " too many failed AUTH attempts from this address; try again in a few seconds")
		return false
	}
	if err != nil {
		c.srv.authFail.failed(c.addr)
		c.srv.warn.Warn("resp: authentication failed", "remote", c.nc.RemoteAddr())
		c.replyError(resp.CodeWrongPass + " invalid token")
		return false
	}
	c.ident, c.authed = id, true
	c.quota.Store(new(quotaKeyFor(id, c.addr)))
	return true
}

// hello answers HELLO [2|3 [AUTH user token] [SETNAME name]]. HELLO 3
// switches the connection to RESP3, where lease replies are maps with
// labelled fields; HELLO 2 switches back; other versions get NOPROTO. The
// switch takes effect with HELLO's own reply, and only once the whole
// command has been accepted.
func (c *respConn) hello(a *respArgs) {
	args := a.pos
	resp3 := c.resp3
	if len(args) > 0 {
		v, ok := resp.ParseInt(args[0])
		if !ok || (v != 2 && v != 3) {
			c.replyError("NOPROTO unsupported protocol version")
			return
		}
		resp3 = v == 3
	}
	for i := 1; i < len(args); i++ {
		switch string(c.word(args[i])) {
		case "AUTH":
			if i+2 >= len(args) {
				c.replyError("ERR syntax error in HELLO option 'auth'")
				return
			}
			if !c.authenticate(args[i+2]) {
				return
			}
			i += 2
		case "SETNAME":
			if i+1 >= len(args) {
				c.replyError("ERR syntax error in HELLO option 'setname'")
				return
			}
			c.name = string(args[i+1])
			i++
		default:
			c.replyError(fmt.Sprintf("ERR syntax error in HELLO option '%s'", printable(args[i])))
			return
		}
	}
	if c.srv.opts.Auth != nil && !c.authed {
		c.replyError(resp.CodeNoAuth + " HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	id := c.id
	c.resp3 = resp3
	c.reply(func(b []byte) []byte {
		proto := int64(2)
		if resp3 {
			proto = 3
			b = resp.AppendMap(b, 7)
		} else {
			b = resp.AppendArray(b, 14)
		}
		b = resp.AppendBulkString(b, "server")
		b = resp.AppendBulkString(b, "leasehold")
		b = resp.AppendBulkString(b, "version")
		b = resp.AppendBulkString(b, "1")
		b = resp.AppendBulkString(b, "proto")
		b = resp.AppendInt(b, proto)
		b = resp.AppendBulkString(b, "id")
		b = resp.AppendInt(b, id)
		b = resp.AppendBulkString(b, "mode")
		b = resp.AppendBulkString(b, "standalone")
		b = resp.AppendBulkString(b, "role")
		b = resp.AppendBulkString(b, "master")
		b = resp.AppendBulkString(b, "modules")
		return resp.AppendArray(b, 0)
	})
}

// CLIENT SETNAME name
func (c *respConn) clientSetName(a *respArgs) {
	c.name = string(a.pos[0])
	c.replyOK()
}

// CLIENT GETNAME: the name, or null.
func (c *respConn) clientGetName(*respArgs) {
	name := c.name
	c.reply(func(b []byte) []byte {
		if name == "" {
			return resp.AppendNull(b)
		}
		return resp.AppendBulkString(b, name)
	})
}

// CLIENT ID
func (c *respConn) clientID(*respArgs) {
	id := c.id
	c.reply(func(b []byte) []byte { return resp.AppendInt(b, id) })
}

// CLIENT SETINFO attr value: accepted and ignored.
func (c *respConn) clientSetInfo(*respArgs) { c.replyOK() }
