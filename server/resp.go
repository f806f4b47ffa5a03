package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/wire/resp"
	"github.com/leasehold/leasehold/workflow"
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
	// CommandTimeout bounds the time from a command's first byte to its
	// last (default 10s): a connection whose command does not arrive
	// whole within it is closed, and the input it had reserved is freed.
	// Waiting for the next command is not bounded.
	CommandTimeout time.Duration
	// MaxOutputBytes is the output-buffer limit: a connection whose
	// replies built but not yet sent come to more (a client that does not
	// read) is closed (default 32 MiB).
	MaxOutputBytes int64
	// MaxSubscriptions caps the LH.SUBSCRIBE subscriptions of all the
	// connections together (default 20,000; one connection may have at
	// most 1,024): each costs a goroutine and a subscription of the
	// backend. One over it is refused and changes nothing.
	MaxSubscriptions int
	// MaxTotalOutputBytes caps the replies built and not yet sent of all
	// the connections together (default 256 MiB): once they come to more,
	// a connection with more than 1/32 of MaxOutputBytes waiting (one
	// that does not read) is closed, as over its own limit. Connections
	// that read their replies are left alone.
	MaxTotalOutputBytes int64
	// MaxCommandBytes caps the input buffered for one command, all its
	// arguments together (default 2 MiB; one bulk string stays under 1
	// MiB).
	MaxCommandBytes int
	// MaxTotalInputBytes caps the input buffered by all the connections
	// together (default 256 MiB): a connection reserves a command's
	// buffer as a bulk string's header announces its length, before the
	// bytes are read, and gives it back once the command has been handed
	// off. A connection that cannot reserve is answered "-ERR server input
	// buffers full" and closed; nothing of that command runs.
	MaxTotalInputBytes int64

	// MaxList caps LH.LIST: a prefix with more leases (that the caller
	// may read) is answered TOOMANY, and is read with LH.SCAN, page by
	// page (default 10,000).
	MaxList int

	// Holders, if set, makes grants' secrets the proof of holding a
	// lease: LH.ACQUIRE's reply carries the grant's secret, and LH.RENEW
	// and LH.RELEASE check the one given with SECRET (a missing one only
	// if Holders.Required) and answer BADPROOF, changing nothing, when it
	// does not match. nil: no secrets.
	Holders *HolderProofs

	// Workflows are the workflows the HTTP API serves (see
	// HandlerOptions.Workflows): leases under their wf/{definition}/ are
	// taken and freed by transitions only, so LH.ACQUIRE, LH.RENEW and
	// LH.RELEASE there need admin access (NOPERM otherwise).
	Workflows map[string]*workflow.Workflows
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
	b     Backend
	async asyncBackend // b, if its acquires and releases can answer through a callback (asyncOf)
	opts  RESPOptions
	log   *slog.Logger

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*respConn]struct{}
	perAddr  map[string]int // open connections per client IP
	shutdown bool
	evicting int // connections evicted (evictLocked) and not yet gone
	nextID   int64
	connWG   sync.WaitGroup

	sessMu   sync.Mutex
	sessions map[string]respSession // with auth on: who opened each session

	input    *inputBudget // MaxTotalInputBytes
	output   *resp.Total  // MaxTotalOutputBytes
	subs     atomic.Int64 // subscriptions of all connections (MaxSubscriptions)
	subsMu   sync.Mutex
	subsBy   map[string]int // subscriptions of each client (quotaKey), at most a quarter of MaxSubscriptions
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
		b: b, async: asyncOf(b), opts: opts, log: opts.Logger,
		lns: map[net.Listener]struct{}{}, conns: map[*respConn]struct{}{},
		perAddr:  map[string]int{},
		input:    &inputBudget{max: opts.MaxTotalInputBytes},
		output:   &resp.Total{Limit: opts.MaxTotalOutputBytes},
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

// evictLocked makes room at the connection cap for a newcomer from addr:
// it closes an idle connection (no command being read, running or
// waiting, no reply unsent, not watching) of the address with the most
// connections that has an idle one, the one idle longest, if that address
// has at least two more connections than addr. So idle connections held
// from a few addresses cannot keep every other client out (issue 26:
// 10,000 idle connections from 11 addresses failed 16 of 21 legitimate
// connects), while a newcomer from one of those addresses evicts nobody
// else's. It reports whether it evicted one; s.mu is held.
func (s *RESPServer) evictLocked(addr string) bool {
	least := s.perAddr[addr] + 2
	var victim *respConn
	for c := range s.conns {
		n := s.perAddr[c.addr]
		// A connection that has not authenticated (auth on) is evictable
		// whatever it does: it holds a slot with no identity behind it
		// (half-sent commands from many addresses kept clients out).
		idle := !c.reading.Load() && !c.watching.Load() && c.out.Idle()
		if n < least || c.evicted || !idle && !c.unauthed.Load() {
			continue
		}
		if v := victim; v == nil || n > s.perAddr[v.addr] || n == s.perAddr[v.addr] && c.lastActive.Load() < v.lastActive.Load() {
			victim = c
		}
	}
	if victim == nil {
		return false
	}
	victim.evicted = true
	s.evicting++
	victim.closeReason.CompareAndSwap(nil, &closeEvictedReason)
	victim.abort()
	return true
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
	case s.perAddr[addr] >= s.opts.MaxConnsPerAddr:
		return nil, closeMaxPerAddr
	case len(s.conns)-s.evicting >= s.opts.MaxConns && !s.evictLocked(addr):
		return nil, closeMaxConns
	}
	s.perAddr[addr]++
	if s.opts.TLS != nil {
		nc = tls.Server(nc, s.opts.TLS)
	}
	s.nextID++
	c = &respConn{srv: s, nc: nc, id: s.nextID, addr: addr}
	c.lastActive.Store(time.Now().UnixNano())
	c.out = resp.NewReplies(nc, s.opts.MaxInflight, s.workers, c.abort)
	c.out.SetLimit(s.opts.MaxOutputBytes, func(total bool) {
		reason := &closeOutputLimitReason
		if total {
			reason = &closeTotalOutputReason
			s.warn.Warn("resp: the replies waiting for all connections are at their limit (--resp-max-total-output-bytes): closed a connection that does not read its replies",
				"remote", nc.RemoteAddr(), "limit", s.opts.MaxTotalOutputBytes)
		}
		c.closeReason.CompareAndSwap(nil, reason)
		c.abort()
	})
	c.out.SetTotal(s.output, totalOutputShare(s.opts.MaxOutputBytes, s.opts.MaxTotalOutputBytes, s.opts.MaxConns))
	c.quota.Store(new(quotaKeyFor(nil, c.addr)))
	c.ctx, c.cancel = context.WithCancel(withQuotaClient(context.Background(), c))
	c.waitCtx, c.waitCancel = context.WithCancel(c.ctx)
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.opts.Metrics.respConnOpened()
	return c, ""
}
