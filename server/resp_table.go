package server

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/wire/resp"
)

// The RESP API is one table: every command (or subcommand) is a row that
// says how many arguments it takes, which options, which argument is a
// lease name or prefix, the access it needs and where (on that name, or on
// some prefix), whether it may run before AUTH or in watch mode, and its
// handler. One preamble (respConn.exec) does for every row, in this order:
// the watch-mode check, authentication (NOAUTH), the rate limit
// (RATELIMITED), arity and options, the name or prefix check (INVALID
// name), and the permission check (NOPERM); a handler runs only with
// arguments that passed. Sizes are bounded before that, by the reader
// (MaxCommandBytes, the pre-auth limits). docs/protocol.md has the table.

// respScope says what a row's access is checked on.
type respScope int

const (
	scopeNone   respScope = iota // nothing: the row needs no grant (access is AccessNone)
	scopeName                    // the lease name in argument arg
	scopePrefix                  // the prefix in argument arg ("" if absent)
	scopeAny                     // some grant: the identity has access on at least one prefix
)

// respMaxOpts is the most options a row may have.
const respMaxOpts = 5

// respCmd is one row of the command table.
type respCmd struct {
	name string // the command, upper case
	sub  string // the subcommand (upper case), or "" for a plain command
	// op names the operation; the ones the HTTP API has too are named
	// alike (lease.acquire, session.open, ...: see respOps).
	op string
	// min and max bound the positional arguments (after the command and
	// subcommand); max < 0: no bound. A row with opts has exactly min
	// positional arguments, then options in KEY value pairs.
	min, max int
	opts     []string // the options' keys, upper case
	access   Access   // the access the row needs
	scope    respScope
	arg      int    // with scopeName or scopePrefix: the positional argument that is the name
	verb     string // what NOPERM says the caller may not do
	preAuth  bool   // allowed before AUTH (auth on)
	watch    bool   // allowed in watch mode
	limited  bool   // counts against the identity's rate limit
	// existing rows work on names that may exist (read, renew, release,
	// list, watch): their name or prefix is checked with
	// CheckExistingName / CheckExistingPrefix (no visible-character
	// rule), so that a name stored before that rule can still be read and
	// freed. Rows that may create a name check it with CheckName.
	existing bool
	// onPermit: the name is a semaphore's, and access is checked on its
	// permit 0 (name/permit/0); the handler checks the other permits.
	onPermit bool
	handler  func(c *respConn, a *respArgs)
}

// respArgs are a row's checked arguments, as the handler gets them.
type respArgs struct {
	cmd  []byte   // the command word as sent
	pos  [][]byte // the positional arguments
	opt  [respMaxOpts][]byte
	has  [respMaxOpts]bool // option i was given (its value may be empty)
	name string            // scopeName or scopePrefix: the checked name or prefix
}

// respCommands is the command table.
var respCommands = []*respCmd{
	// The connection.
	{name: "PING", op: "conn.ping", max: 1, preAuth: true, watch: true, handler: (*respConn).ping},
	{name: "QUIT", op: "conn.quit", preAuth: true, watch: true, handler: (*respConn).quit},
	{name: "AUTH", op: "conn.auth", min: 1, max: 2, preAuth: true, handler: (*respConn).auth},
	{name: "HELLO", op: "conn.hello", max: 6, preAuth: true, handler: (*respConn).hello},
	{name: "ECHO", op: "conn.echo", min: 1, max: 1, handler: (*respConn).echo},
	{name: "COMMAND", op: "conn.command", max: -1, handler: (*respConn).command},
	{name: "CLIENT", sub: "SETNAME", op: "conn.client.setname", min: 1, max: 1, handler: (*respConn).clientSetName},
	{name: "CLIENT", sub: "GETNAME", op: "conn.client.getname", handler: (*respConn).clientGetName},
	{name: "CLIENT", sub: "ID", op: "conn.client.id", handler: (*respConn).clientID},
	{name: "CLIENT", sub: "SETINFO", op: "conn.client.setinfo", min: 2, max: 2, handler: (*respConn).clientSetInfo},
	{name: "LH.READY", op: "ready", handler: (*respConn).ready},

	// Leases.
	{name: "LH.ACQUIRE", op: "lease.acquire", min: 3, max: 3, opts: []string{"DATA", "REQID", "WAIT", "SESSION", "GIVEUP"},
		access: AccessWrite, scope: scopeName, verb: "acquire", limited: true, handler: (*respConn).acquire},
	{name: "LH.SEMACQUIRE", op: "semaphore.acquire", min: 4, max: 4, opts: []string{"DATA", "REQID", "WAIT", "SESSION"},
		access: AccessWrite, scope: scopeName, onPermit: true, verb: "acquire", limited: true, handler: (*respConn).semAcquire},
	{name: "LH.RENEW", existing: true, op: "lease.renew", min: 4, max: 4, opts: []string{"SECRET"},
		access: AccessWrite, scope: scopeName, verb: "renew", limited: true, handler: (*respConn).renew},
	{name: "LH.RELEASE", existing: true, op: "lease.release", min: 3, max: 3, opts: []string{"SECRET"},
		access: AccessWrite, scope: scopeName, verb: "release", limited: true, handler: (*respConn).release},
	{name: "LH.GET", existing: true, op: "lease.get", min: 1, max: 1,
		access: AccessRead, scope: scopeName, verb: "read", limited: true, handler: (*respConn).get},
	{name: "LH.LIST", existing: true, op: "lease.list", max: 1,
		access: AccessRead, scope: scopePrefix, verb: "list", limited: true, handler: (*respConn).list},
	{name: "LH.SCAN", existing: true, op: "lease.list", min: 2, max: 2, opts: []string{"COUNT"},
		access: AccessRead, scope: scopePrefix, verb: "list", limited: true, handler: (*respConn).scan},
	{name: "LH.FORCERELEASE", existing: true, op: "lease.forcerelease", min: 1, max: 1,
		access: AccessAdmin, scope: scopeName, verb: "force-release", limited: true, handler: (*respConn).forceRelease},

	// Sessions: no name to check, so, as on HTTP, write access to some
	// prefix.
	{name: "LH.SESSION", sub: "OPEN", op: "session.open", min: 1, max: 1,
		access: AccessWrite, scope: scopeAny, verb: "open a session", limited: true, handler: (*respConn).sessionOpen},
	{name: "LH.SESSION", sub: "KEEPALIVE", op: "session.keepalive", min: 1, max: 1,
		access: AccessWrite, scope: scopeAny, verb: "keep a session alive", limited: true, handler: (*respConn).sessionKeepAlive},
	{name: "LH.SESSION", sub: "CLOSE", op: "session.close", min: 1, max: 1,
		access: AccessWrite, scope: scopeAny, verb: "close a session", limited: true, handler: (*respConn).sessionClose},

	// Watch mode.
	{name: "LH.SUBSCRIBE", existing: true, op: "events.subscribe", min: 1, max: 1,
		access: AccessRead, scope: scopeName, verb: "watch", watch: true, limited: true, handler: (*respConn).subscribe},
	{name: "LH.UNSUBSCRIBE", op: "events.unsubscribe", min: 1, max: 1, watch: true, handler: (*respConn).unsubscribe},
}

// respByName indexes the table by command: the rows of one command (one,
// or one per subcommand).
var respByName = func() map[string][]*respCmd {
	m := map[string][]*respCmd{}
	for _, r := range respCommands {
		if len(r.opts) > respMaxOpts || (len(r.opts) > 0 && r.min != r.max) ||
			(r.scope == scopeNone) != (r.access == AccessNone) ||
			((r.scope == scopeName || r.scope == scopePrefix) && r.arg >= max(r.max, r.min, 1)) ||
			len(r.name) > respWordMax || len(r.sub) > respWordMax {
			panic("resp: malformed command table row " + r.name + " " + r.sub)
		}
		if prev := m[r.name]; len(prev) > 0 && (prev[0].sub == "") != (r.sub == "") {
			panic("resp: command " + r.name + " has rows with and without subcommands")
		}
		m[r.name] = append(m[r.name], r)
	}
	return m
}()

// respOps maps every operation of the RESP API to the access it needs.
// Operations both APIs have are named alike, and need the same access
// (server/table_parity_test.go checks it against the HTTP API's table).
func respOps() map[string]Access {
	return opsOf("resp", respCommands, func(r *respCmd) (string, Access) { return r.op, r.access })
}

// anyGrant reports whether id has at least need on some prefix.
func anyGrant(id *Identity, need Access) bool {
	if id == nil {
		return true // auth off
	}
	for _, g := range id.grants {
		if g.access >= need {
			return true
		}
	}
	return false
}

// exec runs one command through the preamble and its row's handler; it
// reports whether the connection is to close.
func (c *respConn) exec(args [][]byte) (quit bool) {
	rows := respByName[string(c.word(args[0]))]
	if c.subs != nil && (len(rows) == 0 || !rows[0].watch) {
		c.replyError(fmt.Sprintf("ERR '%s' is not allowed on a connection in watch mode (only LH.SUBSCRIBE, LH.UNSUBSCRIBE, PING and QUIT are)", printable(args[0])))
		return false
	}
	needAuth := c.srv.opts.Auth != nil && !c.authed
	if len(rows) == 0 {
		if needAuth {
			c.replyError(resp.CodeNoAuth + " Authentication required.")
		} else {
			c.replyError(fmt.Sprintf("ERR unknown command '%s'", printable(args[0])))
		}
		return false
	}
	if needAuth && !rows[0].preAuth {
		c.replyError(resp.CodeNoAuth + " Authentication required.")
		return false
	}
	rest := args[1:]
	row := rows[0]
	if row.sub != "" {
		if len(rest) == 0 {
			c.wrongArgs(args[0])
			return false
		}
		sub := string(c.word(rest[0]))
		row = nil
		for _, r := range rows {
			if r.sub == sub {
				row = r
			}
		}
		if row == nil {
			c.replyError(fmt.Sprintf("ERR unknown subcommand '%s'", printable(rest[0])))
			return false
		}
		rest = rest[1:]
	}
	if row.limited && !c.srv.opts.Limits.Allow(c.ident) {
		c.replyError(resp.CodeRateLimited + " rate limit exceeded; nothing was changed")
		return false
	}
	a := respArgs{cmd: args[0]}
	if !c.parseArgs(row, rest, &a) {
		return false
	}
	if !c.permitted(row, &a) {
		return false
	}
	row.handler(c, &a)
	return row.name == "QUIT"
}

// parseArgs checks a row's arity and options and its name or prefix
// argument, filling a; on failure it replies and returns false.
func (c *respConn) parseArgs(row *respCmd, rest [][]byte, a *respArgs) bool {
	n := len(rest)
	if len(row.opts) > 0 {
		n = min(n, row.min)
	}
	if n < row.min || (row.max >= 0 && n > row.max) || (len(rest)-n)%2 != 0 {
		c.wrongArgs(a.cmd)
		return false
	}
	a.pos = rest[:n]
	for i := n; i < len(rest); i += 2 {
		k := -1
		w := string(c.word(rest[i]))
		for j, o := range row.opts {
			if o == w {
				k = j
			}
		}
		switch {
		case k < 0:
			c.replyError(fmt.Sprintf("ERR syntax error: unknown option '%s'", printable(rest[i])))
			return false
		case a.has[k]:
			c.replyError(fmt.Sprintf("ERR syntax error: option '%s' given twice", printable(rest[i])))
			return false
		}
		a.opt[k], a.has[k] = rest[i+1], true
	}
	switch row.scope {
	case scopeName:
		a.name = string(a.pos[row.arg])
		check := CheckName
		if row.existing {
			check = CheckExistingName
		}
		if err := check(a.name); err != nil {
			c.replyErr(err)
			return false
		}
	case scopePrefix:
		if row.arg < len(a.pos) {
			a.name = string(a.pos[row.arg])
		}
		check := CheckPrefix
		if row.existing {
			check = CheckExistingPrefix
		}
		if err := check(a.name); err != nil {
			c.replyErr(err)
			return false
		}
	}
	return true
}

// permitted checks the caller's access for a row; on refusal it replies
// NOPERM and returns false.
func (c *respConn) permitted(row *respCmd, a *respArgs) bool {
	var ok bool
	switch row.scope {
	case scopeNone:
		return true
	case scopeName, scopePrefix:
		on := a.name
		if row.onPermit {
			on = httpPermitName(a.name, 0)
		}
		ok = c.ident.Allowed(on, row.access)
	case scopeAny:
		ok = anyGrant(c.ident, row.access)
	}
	if ok {
		return true
	}
	id := "anonymous"
	if c.ident != nil {
		id = c.ident.Name
	}
	if row.scope == scopeAny {
		c.replyError(fmt.Sprintf("%s identity %q may not %s: that needs %s access to some prefix", resp.CodeNoPerm, id, row.verb, row.access))
	} else {
		on := a.name
		if row.onPermit {
			on = httpPermitName(a.name, 0)
		}
		c.replyError(fmt.Sprintf("%s identity %q may not %s %q", resp.CodeNoPerm, id, row.verb, on))
	}
	return false
}

func (c *respConn) wrongArgs(cmd []byte) {
	c.replyError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(printable(cmd))))
}
