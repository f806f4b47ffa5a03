package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/resp"
)

// RESPOptions configure a RESPServer. The zero value serves plain TCP with
// auth and rate limits off.
type RESPOptions struct {
	Auth   *Auth        // bearer tokens (AUTH); nil: auth off
	Limits *Limits      // per-identity rate limits; nil: off
	Logger *slog.Logger // default: discard
	TLS    *tls.Config  // nil: plain TCP
	// MaxInflight bounds the commands of one connection that are started
	// but not yet answered (default 1024); beyond it the connection is not
	// read until replies go out.
	MaxInflight int
	// Metrics, if set, count connections and the ones the bounds below
	// refuse or close.
	Metrics *Metrics

	// The resource bounds (zero: the default). A connection over
	// MaxConns open connections (default 10,000) or MaxConnsPerAddr from
	// one client IP address (default 1,000) is answered "-ERR max number
	// of clients reached" (not over TLS) and closed.
	MaxConns, MaxConnsPerAddr int
	// AuthTimeout: with Auth set, a connection that has not authenticated
	// within it is closed (default 10s). Until then a command may have at
	// most 7 arguments of at most 1 KiB each.
	AuthTimeout time.Duration
	// HandshakeTimeout bounds a TLS handshake (default 10s).
	HandshakeTimeout time.Duration
	// MaxOutputBytes is the output-buffer limit: a connection whose
	// replies built but not yet sent come to more (a client that does not
	// read) is closed (default 32 MiB).
	MaxOutputBytes int64
	// MaxCommandBytes caps the input buffered for one command, all its
	// arguments together (default 2 MiB; one bulk string stays under 1
	// MiB).
	MaxCommandBytes int

	// Holders, if set, makes grants' secrets the proof of holding a
	// lease: LH.ACQUIRE's reply carries the grant's secret, and LH.RENEW
	// and LH.RELEASE check the one given with SECRET (a missing one only
	// if Holders.Required) and answer BADPROOF, changing nothing, when it
	// does not match. nil: no secrets.
	Holders *HolderProofs
}

// ErrRESPServerClosed is returned by Serve after Shutdown.
var ErrRESPServerClosed = errors.New("resp server closed")

// RESPServer serves a Backend over RESP2, the Redis protocol, so that any
// Redis client can call it (see docs/protocol.md); a client that says
// HELLO 3 gets RESP3, with lease replies as maps of labelled fields. Each connection is read
// by one goroutine that starts every command as soon as it is parsed, so
// the commands pipelined on a connection run concurrently (and a durable
// backend commits their grants together); a second goroutine writes the
// replies strictly in request order and flushes only when no finished reply
// is waiting. A blocking acquire (WAIT) therefore holds up the replies
// behind it on its connection: clients give blocking acquires a connection
// of their own. When a connection's peer goes away its queued waiters are
// dropped.
type RESPServer struct {
	b    Backend
	opts RESPOptions
	log  *slog.Logger

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*respConn]struct{}
	perAddr  map[string]int // open connections per client IP
	shutdown bool
	nextID   int64
	connWG   sync.WaitGroup

	sessMu   sync.Mutex
	sessions map[string]respSession // with auth on: who opened each session

	workers  *resp.Workers
	warn     *rateLog // attacks and failed AUTHs: at most a line a second
	authFail authLimiter
}

type respSession struct {
	identity string
	until    time.Time // forget the binding after this (the session surely ended)
}

// NewRESPServer returns a server for b. It does not own b: Shutdown leaves
// b open.
func NewRESPServer(b Backend, opts RESPOptions) *RESPServer {
	opts.defaults()
	return &RESPServer{
		b: b, opts: opts, log: opts.Logger,
		lns: map[net.Listener]struct{}{}, conns: map[*respConn]struct{}{},
		perAddr:  map[string]int{},
		sessions: map[string]respSession{},
		workers:  resp.NewWorkers(),
		warn:     &rateLog{log: opts.Logger, interval: time.Second},
	}
}

// Serve accepts connections on ln until Shutdown (then it returns
// ErrRESPServerClosed) or ln fails. With RESPOptions.TLS set it serves TLS
// on ln.
func (s *RESPServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrRESPServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			down := s.shutdown
			s.mu.Unlock()
			if down {
				return ErrRESPServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait and retry.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("resp: accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c, refused := s.newConn(nc)
		if c == nil {
			if refused != "" {
				s.opts.Metrics.respClosed(refused)
				if s.opts.TLS == nil {
					// A fresh socket's send buffer is empty: this does
					// not block.
					nc.SetWriteDeadline(time.Now().Add(time.Second))
					io.WriteString(nc, respRefusedAnswer)
				}
			}
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown stops accepting, stops reading commands, lets every connection
// write the replies of the commands it has started (queued waiters are
// cancelled) and close, and waits for that until ctx ends; it then closes
// what is left and returns ctx's error.
func (s *RESPServer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// newConn admits nc, or refuses it (c nil) with the reason of a cap that
// it is over ("" when the server is shutting down).
func (s *RESPServer) newConn(nc net.Conn) (c *respConn, refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return nil, ""
	}
	addr := addrKey(nc.RemoteAddr())
	switch {
	case len(s.conns) >= s.opts.MaxConns:
		return nil, closeMaxConns
	case s.perAddr[addr] >= s.opts.MaxConnsPerAddr:
		return nil, closeMaxPerAddr
	}
	s.perAddr[addr]++
	if s.opts.TLS != nil {
		nc = tls.Server(nc, s.opts.TLS)
	}
	s.nextID++
	c = &respConn{srv: s, nc: nc, id: s.nextID, addr: addr}
	c.out = resp.NewReplies(nc, s.opts.MaxInflight, s.workers, c.abort)
	c.out.SetLimit(s.opts.MaxOutputBytes, func() {
		c.closeReason.CompareAndSwap(nil, &closeOutputLimitReason)
		c.abort()
	})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.waitCtx, c.waitCancel = context.WithCancel(c.ctx)
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.opts.Metrics.respConnOpened()
	return c, ""
}

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

	// Used only by the reader goroutine.
	ident  *Identity
	authed bool
	name   string
	upper  [32]byte
	resp3  bool                          // the client said HELLO 3: lease replies are maps
	subs   map[string]context.CancelFunc // watch mode: the subscriptions
}

func (c *respConn) abort() {
	c.cancel()
	c.nc.Close()
}

func (c *respConn) serve() {
	srv := c.srv
	defer func() {
		srv.mu.Lock()
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
	rd := resp.NewReader(bufio.NewReaderSize(c.nc, respInlineMax))
	rd.MaxCommand, rd.MaxInline = srv.opts.MaxCommandBytes, respInlineMax
	preAuth := srv.opts.Auth != nil
	if preAuth {
		c.limitPreAuth(rd)
	}
	for {
		args, err := rd.ReadCommand()
		if err != nil {
			var ne net.Error
			switch {
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
		if len(args) > 0 && c.exec(args) {
			break // QUIT
		}
		if preAuth && c.authed {
			preAuth = false
			c.endPreAuth(rd)
		}
	}
	c.waitCancel() // also ends the subscriptions, so no push holds up Close
	c.out.Close()
	<-writerDone
	c.abort()
}

var (
	closeHandshakeReason   = closeHandshake
	closeProtocolErrReason = closeProtocolErr
	closeInputLimitReason  = closeInputLimit
	closeAuthTimeoutReason = closeAuthTimeout
	closeHTTPReason        = closeHTTP
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

// exec runs one command; it reports whether the connection is to close.
func (c *respConn) exec(args [][]byte) (quit bool) {
	if c.subs != nil {
		switch string(c.word(args[0])) {
		case "LH.SUBSCRIBE", "LH.UNSUBSCRIBE", "PING", "QUIT":
		default:
			c.replyError(fmt.Sprintf("ERR '%s' is not allowed on a connection in watch mode (only LH.SUBSCRIBE, LH.UNSUBSCRIBE, PING and QUIT are)", printable(args[0])))
			return false
		}
	}
	switch string(c.word(args[0])) {
	case "PING":
		switch len(args) {
		case 1:
			c.reply(func(b []byte) []byte { return append(b, "+PONG\r\n"...) })
		case 2:
			c.reply(func(b []byte) []byte { return resp.AppendBulk(b, args[1]) })
		default:
			c.wrongArgs(args[0])
		}
		return false
	case "QUIT":
		c.replyOK()
		return true
	case "AUTH":
		c.auth(args)
		return false
	case "HELLO":
		c.hello(args)
		return false
	}
	if c.srv.opts.Auth != nil && !c.authed {
		c.replyError(resp.CodeNoAuth + " Authentication required.")
		return false
	}
	switch cmd := string(c.word(args[0])); cmd {
	case "CLIENT":
		c.client(args)
	case "COMMAND":
		c.reply(func(b []byte) []byte { return resp.AppendArray(b, 0) })
	case "LH.UNSUBSCRIBE":
		c.unsubscribe(args)
	case "LH.READY":
		srv, ctx := c.srv, c.ctx
		c.async("", false, func(b []byte) []byte {
			if err := srv.b.Ready(ctx); err != nil {
				return resp.AppendError(b, "ERR not ready: "+err.Error())
			}
			return append(b, "+OK\r\n"...)
		})
	case "ECHO":
		if len(args) != 2 {
			c.wrongArgs(args[0])
			break
		}
		c.reply(func(b []byte) []byte { return resp.AppendBulk(b, args[1]) })
	case "LH.ACQUIRE", "LH.RENEW", "LH.RELEASE", "LH.GET", "LH.LIST", "LH.FORCERELEASE", "LH.SESSION", "LH.SUBSCRIBE":
		if !c.srv.opts.Limits.Allow(c.ident) {
			c.replyError(resp.CodeRateLimited + " rate limit exceeded; nothing was changed")
			break
		}
		switch cmd {
		case "LH.ACQUIRE":
			c.acquire(args)
		case "LH.RENEW":
			c.renew(args)
		case "LH.RELEASE":
			c.release(args)
		case "LH.GET":
			c.get(args)
		case "LH.LIST":
			c.list(args)
		case "LH.FORCERELEASE":
			c.forceRelease(args)
		case "LH.SESSION":
			c.session(args)
		case "LH.SUBSCRIBE":
			c.subscribe(args)
		}
	default:
		c.replyError(fmt.Sprintf("ERR unknown command '%s'", printable(args[0])))
	}
	return false
}

func printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	q := strconv.QuoteToASCII(string(b))
	return q[1 : len(q)-1]
}

func (c *respConn) wrongArgs(cmd []byte) {
	c.replyError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(printable(cmd))))
}

func (c *respConn) auth(args [][]byte) {
	var token []byte
	switch len(args) {
	case 2:
		token = args[1]
	case 3:
		token = args[2] // AUTH user token: the user name is not checked
	default:
		c.wrongArgs(args[0])
		return
	}
	if c.authenticate(token) {
		c.replyOK()
	}
}

// authenticate checks a token; on failure it replies WRONGPASS.
func (c *respConn) authenticate(token []byte) bool {
	if c.srv.opts.Auth == nil {
		return true // auth off: any token is accepted
	}
	if !c.srv.authFail.allow(c.addr) {
		c.srv.opts.Metrics.rateLimit()
		c.replyError(resp.CodeRateLimited + " too many failed AUTH attempts from this address; try again in a few seconds")
		return false
	}
	id, err := c.srv.opts.Auth.Authenticate(string(token))
	if err != nil {
		c.srv.authFail.failed(c.addr)
		c.srv.warn.Warn("resp: authentication failed", "remote", c.nc.RemoteAddr())
		c.replyError(resp.CodeWrongPass + " invalid token")
		return false
	}
	c.ident, c.authed = id, true
	return true
}

// hello answers HELLO [2|3 [AUTH user token] [SETNAME name]]. HELLO 3
// switches the connection to RESP3, where lease replies are maps with
// labelled fields; HELLO 2 switches back; other versions get NOPROTO. The
// switch takes effect with HELLO's own reply, and only once the whole
// command has been accepted.
func (c *respConn) hello(args [][]byte) {
	resp3 := c.resp3
	if len(args) > 1 {
		v, ok := resp.ParseInt(args[1])
		if !ok || (v != 2 && v != 3) {
			c.replyError("NOPROTO unsupported protocol version")
			return
		}
		resp3 = v == 3
	}
	for i := 2; i < len(args); i++ {
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

func (c *respConn) client(args [][]byte) {
	if len(args) < 2 {
		c.wrongArgs(args[0])
		return
	}
	switch string(c.word(args[1])) {
	case "SETNAME":
		if len(args) != 3 {
			c.wrongArgs(args[0])
			return
		}
		c.name = string(args[2])
		c.replyOK()
	case "SETINFO":
		c.replyOK()
	case "GETNAME":
		name := c.name
		c.reply(func(b []byte) []byte {
			if name == "" {
				return resp.AppendNull(b)
			}
			return resp.AppendBulkString(b, name)
		})
	case "ID":
		id := c.id
		c.reply(func(b []byte) []byte { return resp.AppendInt(b, id) })
	default:
		c.replyError(fmt.Sprintf("ERR unknown subcommand '%s'", printable(args[1])))
	}
}

// The leasehold commands. Each checks its arguments, the name and the
// caller's permission on the reader goroutine (bad input is answered at
// once and changes nothing), then runs on the backend asynchronously.

func invalid(field, format string, args ...any) error {
	return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// parseMillis reads a duration given in milliseconds.
func parseMillis(b []byte, field string) (time.Duration, error) {
	n, ok := resp.ParseInt(b)
	if !ok {
		return 0, invalid(field, "%q is not an integer number of milliseconds", printable(b))
	}
	const limit = (1<<63 - 1) / int64(time.Millisecond)
	n = max(min(n, limit), -limit)
	return time.Duration(n) * time.Millisecond, nil
}

func parseToken(b []byte) (uint64, error) {
	n, ok := resp.ParseInt(b)
	if !ok || n < 0 {
		return 0, invalid("token", "%q is not a fencing token (a positive integer)", printable(b))
	}
	return uint64(n), nil
}

// replyErr answers with the error reply for err (see appendErr).
func (c *respConn) replyErr(err error) {
	c.out.Now(func(b []byte) []byte { return c.srv.appendErr(b, err) })
}

func (c *respConn) noPerm(what, name string) {
	id := "anonymous"
	if c.ident != nil {
		id = c.ident.Name
	}
	c.replyError(fmt.Sprintf("%s identity %q may not %s %q", resp.CodeNoPerm, id, what, name))
}

// appendErr maps a backend or validation error to its error reply.
func (s *RESPServer) appendErr(b []byte, err error) []byte {
	var he *leasehold.HeldError
	var ie *leasehold.InvalidError
	switch {
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
	s.log.Warn("resp: backend error", "err", err)
	return resp.AppendError(b, "ERR "+err.Error())
}

// LH.ACQUIRE name owner ttl_ms [DATA d] [REQID id] [WAIT ms] [SESSION id]
func (c *respConn) acquire(args [][]byte) {
	if len(args) < 4 || len(args)%2 != 0 {
		c.wrongArgs(args[0])
		return
	}
	var req AcquireRequest
	req.Name, req.Owner = string(args[1]), string(args[2])
	ttl, err := parseMillis(args[3], "ttl")
	if err != nil {
		c.replyErr(err)
		return
	}
	req.TTL = ttl
	var seen [4]bool
	for i := 4; i < len(args); i += 2 {
		v := args[i+1]
		var k int
		switch string(c.word(args[i])) {
		case "DATA":
			k = 0
			if len(v) > 0 {
				req.Data = bytes.Clone(v)
			}
		case "REQID":
			k = 1
			req.RequestID = string(v)
		case "WAIT":
			k = 2
			if req.Wait, err = parseMillis(v, "wait"); err == nil && req.Wait < 0 {
				err = invalid("wait", "must not be negative")
			}
		case "SESSION":
			k = 3
			req.Session = string(v)
			if req.Session == "" {
				err = invalid("session", "must not be empty")
			}
		default:
			c.replyError(fmt.Sprintf("ERR syntax error: unknown option '%s'", printable(args[i])))
			return
		}
		if seen[k] {
			c.replyError(fmt.Sprintf("ERR syntax error: option '%s' given twice", printable(args[i])))
			return
		}
		seen[k] = true
		if err != nil {
			c.replyErr(err)
			return
		}
	}
	if err := CheckName(req.Name); err != nil {
		c.replyErr(err)
		return
	}
	if err := req.AcquireRequest.Validate(); err != nil {
		c.replyErr(err)
		return
	}
	if !c.ident.Allowed(req.Name, AccessWrite) {
		c.noPerm("acquire", req.Name)
		return
	}
	if req.Session != "" && !c.srv.ownsSession(c.ident, req.Session) {
		c.replyErr(ErrNoSession)
		return
	}
	ctx := c.ctx
	if req.Wait > 0 {
		ctx = c.waitCtx
	}
	srv, resp3 := c.srv, c.resp3
	c.async(req.Name, req.Wait > 0, func(b []byte) []byte {
		rec, err := srv.b.Acquire(ctx, req)
		if err != nil {
			return srv.appendErr(b, err)
		}
		return srv.appendGrant(b, &rec, resp3)
	})
}

// appendGrant appends the reply to a successful LH.ACQUIRE: with holder
// proofs on, the grant and its secret.
func (s *RESPServer) appendGrant(b []byte, rec *leasehold.Record, resp3 bool) []byte {
	if h := s.opts.Holders; h != nil {
		secret := h.Secret(rec.Name, rec.Owner, rec.Token)
		if resp3 {
			return resp.AppendGrantMapSecret(b, rec, secret)
		}
		return resp.AppendGrantSecret(b, rec, secret)
	}
	if resp3 {
		return resp.AppendGrantMap(b, rec)
	}
	return resp.AppendGrant(b, rec)
}

// badProof is the reply to a renew or release whose secret does not
// prove holding the grant.
const badProof = resp.CodeBadProof + " the holder proof (secret) does not match the grant"

// secretOption parses the trailing options of LH.RENEW and LH.RELEASE:
// nothing, or SECRET <s>.
func (c *respConn) secretOption(opts [][]byte) (secret string, ok bool) {
	switch {
	case len(opts) == 0:
		return "", true
	case len(opts) == 2 && string(c.word(opts[0])) == "SECRET":
		if len(opts[1]) == 0 {
			c.replyErr(invalid("secret", "must not be empty"))
			return "", false
		}
		return string(opts[1]), true
	case len(opts) == 2:
		c.replyError(fmt.Sprintf("ERR syntax error: unknown option '%s'", printable(opts[0])))
	default:
		c.replyError("ERR syntax error: the only option is SECRET <secret>")
	}
	return "", false
}

// checkProof checks a holder's secret; on failure it replies BADPROOF.
func (c *respConn) checkProof(name, owner string, token uint64, secret string) bool {
	if err := c.srv.opts.Holders.Check(name, owner, token, secret); err != nil {
		c.replyError(badProof)
		return false
	}
	return true
}

// holder parses "name owner token" and checks it.
func (c *respConn) holder(args [][]byte) (name, owner string, token uint64, ok bool) {
	name, owner = string(args[1]), string(args[2])
	token, err := parseToken(args[3])
	if err == nil {
		err = CheckName(name)
	}
	if err == nil {
		err = leasehold.ValidateHolder(name, owner, token)
	}
	if err != nil {
		c.replyErr(err)
		return "", "", 0, false
	}
	return name, owner, token, true
}

// LH.RENEW name owner token ttl_ms [SECRET s]
func (c *respConn) renew(args [][]byte) {
	if len(args) != 5 && len(args) != 7 {
		c.wrongArgs(args[0])
		return
	}
	name, owner, token, ok := c.holder(args)
	if !ok {
		return
	}
	ttl, err := parseMillis(args[4], "ttl")
	if err == nil {
		err = leasehold.ValidateTTL(ttl)
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	secret, ok := c.secretOption(args[5:])
	if !ok {
		return
	}
	if !c.ident.Allowed(name, AccessWrite) {
		c.noPerm("renew", name)
		return
	}
	if !c.checkProof(name, owner, token, secret) {
		return
	}
	srv, ctx := c.srv, c.ctx
	c.async(name, false, func(b []byte) []byte {
		if err := srv.b.Renew(ctx, name, owner, token, ttl); err != nil {
			return srv.appendErr(b, err)
		}
		return append(b, "+OK\r\n"...)
	})
}

// LH.RELEASE name owner token [SECRET s]
func (c *respConn) release(args [][]byte) {
	if len(args) != 4 && len(args) != 6 {
		c.wrongArgs(args[0])
		return
	}
	name, owner, token, ok := c.holder(args)
	if !ok {
		return
	}
	secret, ok := c.secretOption(args[4:])
	if !ok {
		return
	}
	if !c.ident.Allowed(name, AccessWrite) {
		c.noPerm("release", name)
		return
	}
	if !c.checkProof(name, owner, token, secret) {
		return
	}
	srv, ctx := c.srv, c.ctx
	c.async(name, false, func(b []byte) []byte {
		if err := srv.b.Release(ctx, name, owner, token); err != nil {
			return srv.appendErr(b, err)
		}
		return append(b, "+OK\r\n"...)
	})
}

// LH.GET name: the record, or null.
func (c *respConn) get(args [][]byte) {
	if len(args) != 2 {
		c.wrongArgs(args[0])
		return
	}
	name := string(args[1])
	if err := CheckName(name); err != nil {
		c.replyErr(err)
		return
	}
	if !c.ident.Allowed(name, AccessRead) {
		c.noPerm("read", name)
		return
	}
	srv, ctx, resp3 := c.srv, c.ctx, c.resp3
	c.async(name, false, func(b []byte) []byte {
		rec, err := srv.b.Get(ctx, name)
		switch {
		case errors.Is(err, leasehold.ErrNotFound) && resp3:
			return resp.AppendNull3(b)
		case errors.Is(err, leasehold.ErrNotFound):
			return resp.AppendNull(b)
		case err != nil:
			return srv.appendErr(b, err)
		}
		return appendRecord(b, &rec, resp3)
	})
}

// LH.LIST [prefix]: the live leases under prefix that the caller may read,
// sorted by name.
func (c *respConn) list(args [][]byte) {
	if len(args) > 2 {
		c.wrongArgs(args[0])
		return
	}
	var prefix string
	if len(args) == 2 {
		prefix = string(args[1])
	}
	if err := CheckPrefix(prefix); err != nil {
		c.replyErr(err)
		return
	}
	id := c.ident
	if !id.ListAllowed(prefix) {
		c.noPerm("list", prefix)
		return
	}
	srv, ctx, resp3 := c.srv, c.ctx, c.resp3
	c.async("", false, func(b []byte) []byte {
		recs, err := srv.b.List(ctx, prefix)
		if err != nil {
			return srv.appendErr(b, err)
		}
		n := 0
		for _, r := range recs {
			if id.Allowed(r.Name, AccessRead) {
				recs[n] = r
				n++
			}
		}
		b = resp.AppendArray(b, n)
		for i := range recs[:n] {
			b = appendRecord(b, &recs[i], resp3)
		}
		return b
	})
}

// LH.FORCERELEASE name: frees the lease whoever holds it (admin) and
// returns the grant it ended, or NOTFOUND.
func (c *respConn) forceRelease(args [][]byte) {
	if len(args) != 2 {
		c.wrongArgs(args[0])
		return
	}
	name := string(args[1])
	if err := CheckName(name); err != nil {
		c.replyErr(err)
		return
	}
	if !c.ident.Allowed(name, AccessAdmin) {
		c.noPerm("force-release", name)
		return
	}
	srv, ctx, resp3 := c.srv, c.ctx, c.resp3
	c.async(name, false, func(b []byte) []byte {
		rec, err := srv.b.ForceRelease(ctx, name)
		if err != nil {
			return srv.appendErr(b, err)
		}
		return appendRecord(b, &rec, resp3)
	})
}

// appendRecord appends a full record: a map of labelled fields in RESP3,
// a positional array in RESP2.
func appendRecord(b []byte, rec *leasehold.Record, resp3 bool) []byte {
	if resp3 {
		return resp.AppendRecordMap(b, rec)
	}
	return resp.AppendRecord(b, rec)
}

// LH.SESSION OPEN ttl_ms | KEEPALIVE id | CLOSE id
func (c *respConn) session(args [][]byte) {
	if len(args) != 3 {
		c.wrongArgs(args[0])
		return
	}
	srv, ctx, id, resp3 := c.srv, c.ctx, c.ident, c.resp3
	switch string(c.word(args[1])) {
	case "OPEN":
		ttl, err := parseMillis(args[2], "ttl")
		if err == nil {
			err = leasehold.ValidateTTL(ttl)
		}
		if err != nil {
			c.replyErr(err)
			return
		}
		c.async("", false, func(b []byte) []byte {
			sess, err := srv.b.OpenSession(ctx, ttl)
			if err != nil {
				return srv.appendErr(b, err)
			}
			srv.bindSession(id, sess)
			return resp.AppendBulkString(b, sess.ID)
		})
	case "KEEPALIVE":
		sid := string(args[2])
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
	case "CLOSE":
		sid := string(args[2])
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
	default:
		c.replyError(fmt.Sprintf("ERR unknown subcommand '%s'", printable(args[1])))
	}
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

const maxSubscriptions = 1 << 16

func (c *respConn) subscribe(args [][]byte) {
	if len(args) != 2 {
		c.wrongArgs(args[0])
		return
	}
	name := string(args[1])
	if err := CheckName(name); err != nil {
		c.replyErr(err)
		return
	}
	if !c.ident.Allowed(name, AccessRead) {
		c.noPerm("watch", name)
		return
	}
	if c.subs == nil {
		c.subs = map[string]context.CancelFunc{}
	}
	if _, ok := c.subs[name]; !ok {
		if len(c.subs) >= maxSubscriptions {
			c.replyError(fmt.Sprintf("ERR at most %d subscriptions per connection", maxSubscriptions))
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

func (c *respConn) unsubscribe(args [][]byte) {
	if len(args) != 2 {
		c.wrongArgs(args[0])
		return
	}
	name := string(args[1])
	if cancel, ok := c.subs[name]; ok {
		cancel()
		delete(c.subs, name)
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
