package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/resp"
)

// The connection: its reader loop, the bounds before AUTH, and the replies
// (written in request order by resp.Replies). Commands go through the
// table's preamble (exec, in resp_table.go).

// respWordMax is the longest command, subcommand or option name.
const respWordMax = 32

var closeOutputLimitReason = closeOutputLimit

// respConn is one client connection.
type respConn struct {
	srv  *RESPServer
	nc   net.Conn
	id   int64
	addr string // the client IP, for the per-address cap

	// closeReason is set by whoever closes the connection for a bound
	// (the output-buffer limit is hit on a writer or worker goroutine).
	closeReason atomic.Pointer[string]

	// Cancelled when the connection ends (ctx) or stops being read (waitCtx:
	// queued waiters are dropped as soon as the peer is gone).
	ctx, waitCtx       context.Context
	cancel, waitCancel context.CancelFunc

	out *resp.Replies // replies in request order; closed by the reader

	// For eviction at the connection cap (RESPServer.evictLocked): when
	// the last command was read (unix ns), whether one is being read, and
	// whether the connection is in watch mode.
	lastActive        atomic.Int64
	reading, watching atomic.Bool
	unauthed          atomic.Bool            // auth is on and it has not authenticated
	quota             atomic.Pointer[string] // the client its requests count against (quotaKeyFor)
	evicted           bool                   // under srv.mu

	// Used only by the reader goroutine.
	ident   *Identity
	authed  bool
	name    string
	upper   [respWordMax]byte
	resp3   bool                          // the client said HELLO 3: lease replies are maps
	subsKey string                        // the client its subscriptions count against (set at the first)
	subs    map[string]context.CancelFunc // watch mode: the subscriptions
}

func (c *respConn) abort() {
	c.cancel()
	c.nc.Close()
}

func (c *respConn) serve() {
	srv := c.srv
	defer func() {
		srv.mu.Lock()
		if c.evicted {
			srv.evicting--
		}
		delete(srv.conns, c)
		if srv.perAddr[c.addr]--; srv.perAddr[c.addr] <= 0 {
			delete(srv.perAddr, c.addr)
		}
		srv.mu.Unlock()
		if r := c.closeReason.Load(); r != nil {
			srv.opts.Metrics.respClosed(*r)
		}
		srv.opts.Metrics.respConnClosed()
		srv.connWG.Done()
	}()
	if tc, ok := c.nc.(*tls.Conn); ok {
		// A client that never sends its ClientHello (or never finishes
		// the handshake) is closed after HandshakeTimeout.
		c.setDeadline(time.Now().Add(srv.opts.HandshakeTimeout), true)
		err := tc.HandshakeContext(c.ctx)
		c.setDeadline(time.Time{}, true)
		if err != nil {
			c.closeReason.CompareAndSwap(nil, &closeHandshakeReason)
			c.srv.log.Debug("resp: TLS handshake", "remote", c.nc.RemoteAddr(), "err", err)
			c.out.Close()
			c.abort()
			return
		}
	}
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); c.out.Run() }()
	// The buffer holds a line of respInlineMax bytes and its CRLF.
	cr := &cmdReader{c: c}
	rd := resp.NewReader(bufio.NewReaderSize(cr, respInlineMax+2))
	rd.MaxCommand, rd.MaxInline = srv.opts.MaxCommandBytes, respInlineMax
	rd.StrictInline = true
	budget := &connBudget{b: srv.input, key: "addr " + c.addr, maxCommand: srv.opts.MaxCommandBytes}
	rd.Budget = budget
	defer rd.Free()
	preAuth := srv.opts.Auth != nil
	if preAuth {
		c.unauthed.Store(true)
		c.limitPreAuth(rd)
	}
	// Until the first command of the table, anything that cannot be one
	// closes the connection at once, runs nothing and answers nothing:
	// another protocol's bytes (a TLS ClientHello, whose session ticket a
	// web page can fill with command lines; an HTTP request) are refused
	// before any line of them is read as a command.
	known := false
	if b, err := rd.PeekByte(); err == nil && !resp.CanStartCommand(b) {
		c.foreign(fmt.Sprintf("first byte 0x%02x cannot start a command", b))
		c.finish(writerDone)
		return
	}
	for {
		// An idle connection may wait for its next command as long as it
		// likes (before AUTH: until the auth timeout); once the command
		// has begun, the rest of it must come within CommandTimeout.
		if rd.Buffered() == 0 {
			if _, err := rd.PeekByte(); err != nil && !errors.Is(err, io.EOF) {
				c.srv.log.Debug("resp: read", "remote", c.nc.RemoteAddr(), "err", err)
			}
		}
		c.reading.Store(true)
		if !preAuth {
			cr.begin(srv.opts.CommandTimeout)
		}
		args, err := rd.ReadCommand()
		cr.end()
		c.lastActive.Store(time.Now().UnixNano())
		c.reading.Store(false)
		if err != nil {
			var ne net.Error
			switch {
			case cr.timedOut && errors.As(err, &ne) && ne.Timeout() && !srv.closing():
				c.closeReason.CompareAndSwap(nil, &closeCommandTimeoutReason)
				srv.warn.Warn("resp: a command did not arrive whole within the command timeout (--resp-command-timeout): connection closed",
					"remote", c.nc.RemoteAddr(), "timeout", srv.opts.CommandTimeout)
			case errors.Is(err, resp.ErrForeign):
				c.foreign("an inline line with control bytes, invalid UTF-8 or no command name")
			case errors.Is(err, resp.ErrBudget):
				c.replyError("ERR server input buffers full (the input buffered across all connections is at its limit); closing the connection")
				c.closeReason.CompareAndSwap(nil, &closeTotalInputReason)
				srv.warn.Warn("resp: the total input buffered across connections is at its limit (--resp-max-total-input-bytes): connection closed",
					"remote", c.nc.RemoteAddr(), "limit", srv.opts.MaxTotalInputBytes)
			case errors.Is(err, resp.ErrProtocol):
				c.srv.log.Debug("resp: closing connection", "remote", c.nc.RemoteAddr(), "err", err)
				c.replyError("ERR " + err.Error())
				reason := &closeProtocolErrReason
				if strings.Contains(err.Error(), "longer than") || strings.Contains(err.Error(), "over the limit") {
					reason = &closeInputLimitReason
				}
				c.closeReason.CompareAndSwap(nil, reason)
			case preAuth && !c.authed && errors.As(err, &ne) && ne.Timeout() && !srv.closing():
				c.closeReason.CompareAndSwap(nil, &closeAuthTimeoutReason)
			}
			break
		}
		if resp.LooksLikeHTTP(args) {
			// A browser (or another protocol) smuggling commands in: run
			// nothing, answer nothing.
			c.closeReason.CompareAndSwap(nil, &closeHTTPReason)
			srv.warn.Warn("resp: possible cross-protocol attack (an HTTP request sent to the RESP port): connection closed",
				"remote", c.nc.RemoteAddr())
			break
		}
		if len(args) > 0 && !known {
			if len(respByName[string(c.word(args[0]))]) == 0 {
				c.foreign(fmt.Sprintf("unknown command '%s' before any known one", printable(args[0])))
				break
			}
			known = true
		}
		if len(args) > 0 && c.exec(args) {
			break // QUIT
		}
		if preAuth && c.authed {
			preAuth = false
			c.unauthed.Store(false)
			c.endPreAuth(rd)
		}
		if c.ident != nil && budget.ident != c.ident {
			budget.ident = c.ident
			budget.rekey("identity " + c.ident.Name)
		}
	}
	c.finish(writerDone)
}

// cmdReader is the connection as its command reader reads it: while a
// command is being read (begin..end), a read that must wait for the network
// gets the command's deadline, so a command that never arrives whole (a
// bulk string announced and never sent, holding its share of the input
// budget) ends the connection. Reads served from the buffer, and the wait
// for an idle connection's next command, cost nothing.
type cmdReader struct {
	c        *respConn
	deadline time.Time // of the command being read; zero: none
	set      bool      // the connection's read deadline is the command's
	timedOut bool      // the last command's read ran into its deadline
}

func (r *cmdReader) Read(p []byte) (int, error) {
	if !r.deadline.IsZero() && !r.set {
		r.c.setDeadline(r.deadline, false)
		r.set = true
	}
	n, err := r.c.nc.Read(p)
	if r.set && err != nil {
		var ne net.Error
		r.timedOut = errors.As(err, &ne) && ne.Timeout()
	}
	return n, err
}

// begin starts a command's read with timeout d (0: none).
func (r *cmdReader) begin(d time.Duration) {
	r.timedOut = false
	if d > 0 {
		r.deadline = time.Now().Add(d)
	}
}

// end clears the command's deadline if a read set it.
func (r *cmdReader) end() {
	r.deadline = time.Time{}
	if r.set {
		r.set = false
		r.c.setDeadline(time.Time{}, false)
	}
}

// finish ends the connection: its waits and subscriptions, then the
// writer (after what it has queued), then the socket.
func (c *respConn) finish(writerDone <-chan struct{}) {
	c.waitCancel() // also ends the subscriptions, so no push holds up Close
	c.srv.subs.Add(-int64(len(c.subs)))
	c.srv.giveSubs(c.subsKey, len(c.subs))
	c.out.Close()
	<-writerDone
	if r := c.closeReason.Load(); r != nil && (r == &closeInputLimitReason || r == &closeTotalInputReason || r == &closeProtocolErrReason) && !c.srv.closing() {
		c.drainRefused()
	}
	c.abort()
}

// refusedDrainTime and refusedDrainBytes bound what a connection closed
// for its input may still send before it is closed (drainRefused).
const (
	refusedDrainTime  = time.Second
	refusedDrainBytes = 16 << 20
)

// drainRefused ends the server's side of a connection refused for its
// input, after its error reply, and reads and drops what the client still
// sends, for at most refusedDrainTime and refusedDrainBytes, before the
// connection is closed. Closed at once, with the refused command's bytes
// unread, the kernel answers the client with a reset: its write fails with
// "connection reset by peer" and the error reply may be lost with it. Nothing
// read here is buffered, so the input budgets are not touched.
func (c *respConn) drainRefused() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.nc.SetReadDeadline(time.Now().Add(refusedDrainTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, c.nc, refusedDrainBytes)
}

// foreign closes the connection on bytes of another protocol, without an
// answer, logging and counting it (reason "foreign_protocol").
func (c *respConn) foreign(what string) {
	c.closeReason.CompareAndSwap(nil, &closeForeignReason)
	c.srv.warn.Warn("resp: possible cross-protocol attack ("+what+"): connection closed, nothing run",
		"remote", c.nc.RemoteAddr())
}

var (
	closeHandshakeReason      = closeHandshake
	closeProtocolErrReason    = closeProtocolErr
	closeInputLimitReason     = closeInputLimit
	closeTotalInputReason     = closeTotalInput
	closeAuthTimeoutReason    = closeAuthTimeout
	closeHTTPReason           = closeHTTP
	closeForeignReason        = closeForeign
	closeEvictedReason        = closeEvicted
	closeCommandTimeoutReason = closeCommandTimeout
	closeTotalOutputReason    = closeTotalOutput
)

// closing reports whether Shutdown has begun (its read deadlines are not
// auth timeouts).
func (s *RESPServer) closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// limitPreAuth sets the bounds of a connection that has not
// authenticated: small commands, and AuthTimeout to authenticate.
func (c *respConn) limitPreAuth(rd *resp.Reader) {
	rd.MaxArray, rd.MaxBulk, rd.MaxInline = preAuthMaxArgs, preAuthMaxBulk, preAuthMaxBulk
	c.setDeadline(time.Now().Add(c.srv.opts.AuthTimeout), false)
}

// endPreAuth lifts the pre-auth bounds after a successful AUTH.
func (c *respConn) endPreAuth(rd *resp.Reader) {
	rd.MaxArray, rd.MaxBulk, rd.MaxInline = 0, 0, respInlineMax
	c.setDeadline(time.Time{}, false)
}

// setDeadline sets the connection's read deadline (and its write deadline
// too if both), unless Shutdown has begun: the read deadline Shutdown set
// to stop reading then stays.
func (c *respConn) setDeadline(t time.Time, both bool) {
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	if both {
		c.nc.SetWriteDeadline(t)
	}
	if !c.srv.shutdown {
		c.nc.SetReadDeadline(t)
	}
}

func (c *respConn) reply(f func(b []byte) []byte) { c.out.Now(f) }

func (c *respConn) replyError(msg string) {
	c.out.Now(func(b []byte) []byte { return resp.AppendError(b, msg) })
}

func (c *respConn) replyOK() {
	c.out.Now(func(b []byte) []byte { return append(b, "+OK\r\n"...) })
}

// async runs fn as the next command's reply (see resp.Replies.Async):
// commands naming the same lease take effect in the order sent.
func (c *respConn) async(name string, blocking bool, fn func(b []byte) []byte) {
	c.out.Async(name, blocking, fn)
}

// word upper-cases a command or option name into a scratch buffer (no
// allocation); too long a word comes back empty.
func (c *respConn) word(b []byte) []byte {
	if len(b) > len(c.upper) {
		return nil
	}
	w := c.upper[:len(b)]
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		w[i] = ch
	}
	return w
}

func printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	q := strconv.QuoteToASCII(string(b))
	return q[1 : len(q)-1]
}

// replyErr answers with the error reply for err (see appendErr).
func (c *respConn) replyErr(err error) {
	c.out.Now(func(b []byte) []byte { return c.srv.appendErr(b, err) })
}

// appendErr maps a backend or validation error to its error reply.
func (s *RESPServer) appendErr(b []byte, err error) []byte {
	var he *leasehold.HeldError
	var ie *leasehold.InvalidError
	var qe *QuotaError
	switch {
	case errors.As(err, &qe):
		return resp.AppendError(b, resp.CodeQuota+" "+qe.Error())
	case errors.As(err, &he):
		return resp.AppendHeld(b, he)
	case errors.As(err, &ie):
		return resp.AppendInvalid(b, ie)
	case errors.Is(err, leasehold.ErrNotHeld):
		return resp.AppendError(b, resp.CodeNotHeld+" lease not held (never granted, expired, released, or another owner or token); nothing was changed")
	case errors.Is(err, leasehold.ErrNotFound):
		return resp.AppendError(b, resp.CodeNotFound+" no live lease with that name")
	case errors.Is(err, ErrNoSession):
		return resp.AppendError(b, resp.CodeNoSession+" no such session (unknown, closed or expired)")
	case errors.Is(err, leasehold.ErrClosed):
		return resp.AppendError(b, "ERR the server is shutting down")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resp.AppendError(b, "ERR request cancelled")
	}
	// As HTTP's 500: the backend's own words (a store's WRONGPASS, its
	// address) stay in the server's log.
	s.log.Warn("resp: backend error", "err", err)
	return resp.AppendError(b, "ERR internal error; see the server's log")
}

// quotaKey is the client this connection's requests count against: its
// identity once authenticated, else its address.
func (c *respConn) quotaKey() string { return *c.quota.Load() }
