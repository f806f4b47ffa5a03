package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClientClosed reports use of a Client after Close.
var ErrClientClosed = errors.New("client closed")

// ClientOptions configure a Client.
type ClientOptions struct {
	// Dial opens a connection (TLS included). Required.
	Dial func(ctx context.Context) (net.Conn, error)
	// Init runs on every new connection before it is used (e.g. AUTH).
	// Optional.
	Init func(c *Conn) error
	// Conns is the number of shared pipelined connections (default 2).
	Conns int
	// MaxIdle is how many idle dedicated connections are kept for blocking
	// commands (default 4).
	MaxIdle int
	// MaxArray bounds the elements of one reply array (default
	// DefaultMaxArray).
	MaxArray int
	// HandshakeTimeout bounds dialing and Init when the caller's context
	// has no earlier deadline (default 10s).
	HandshakeTimeout time.Duration
	// Timeout > 0 takes a pipelined connection for dead when requests have
	// waited that long with no reply arriving: it is closed and they fail
	// with a *ConnError. Zero: never.
	Timeout time.Duration
}

// Client sends commands over a few shared, auto-pipelined connections
// (Do) and runs blocking commands on dedicated connections (DoBlocking). A
// broken connection is replaced on next use. It is safe for concurrent use.
type Client struct {
	opts  ClientOptions
	slots []pipeSlot
	next  atomic.Uint32
	wg    sync.WaitGroup // the pipes' goroutines

	mu     sync.Mutex
	closed bool
	idle   []*Conn
	busy   map[*Conn]struct{}

	stopWatch chan struct{}   // closed by Close: stops the watchdog
	ctx       context.Context // ends with Close: bounds dials of shared connections
	cancel    context.CancelFunc
}

type pipeSlot struct {
	p       atomic.Pointer[pipe]
	mu      sync.Mutex
	dialing *dialAttempt // the connection being opened, if any
}

// dialAttempt is one opening of a slot's connection, shared by every
// caller that needs it meanwhile.
type dialAttempt struct {
	done chan struct{} // closed when p or err is set
	p    *pipe
	err  error
}

// NewClient returns a Client; it connects on first use (see Connect).
func NewClient(opts ClientOptions) *Client {
	if opts.Conns <= 0 {
		opts.Conns = 2
	}
	if opts.MaxIdle <= 0 {
		opts.MaxIdle = 4
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	c := &Client{opts: opts, slots: make([]pipeSlot, opts.Conns), busy: map[*Conn]struct{}{}, stopWatch: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if opts.Timeout > 0 {
		c.wg.Add(1)
		go c.watchdog()
	}
	return c
}

// watchdog closes pipelined connections whose replies have stalled.
func (c *Client) watchdog() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.opts.Timeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stopWatch:
			return
		case <-t.C:
		}
		for i := range c.slots {
			if p := c.slots[i].p.Load(); p != nil && p.stalled(c.opts.Timeout) {
				p.fail(fmt.Errorf("no reply for %s", c.opts.Timeout))
			}
		}
	}
}

// Connect opens the first pipelined connection, reporting dial or
// handshake errors now rather than on first use.
func (c *Client) Connect(ctx context.Context) error {
	_, err := c.pipeAt(ctx, 0)
	return err
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Dial opens and initialises a connection of the caller's own, outside
// the Client's pools; the caller closes it.
func (c *Client) Dial(ctx context.Context) (*Conn, error) {
	if c.isClosed() {
		return nil, ErrClientClosed
	}
	return c.dial(ctx)
}

// dial opens and initialises one connection.
func (c *Client) dial(ctx context.Context) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.HandshakeTimeout)
	defer cancel()
	nc, err := c.opts.Dial(ctx)
	if err != nil {
		return nil, err
	}
	conn := NewConn(nc, c.opts.MaxArray)
	if c.opts.Init != nil {
		dl, _ := ctx.Deadline()
		nc.SetDeadline(dl)
		stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
		err := c.opts.Init(conn)
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc.SetDeadline(time.Time{})
	}
	return conn, nil
}

func (c *Client) pipeAt(ctx context.Context, i int) (*pipe, error) {
	s := &c.slots[i]
	if p := s.p.Load(); p != nil && !p.isBroken() {
		return p, nil
	}
	s.mu.Lock()
	if p := s.p.Load(); p != nil && !p.isBroken() {
		s.mu.Unlock()
		return p, nil
	}
	a := s.dialing
	if a == nil {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			s.mu.Unlock()
			return nil, ErrClientClosed
		}
		c.wg.Add(1)
		c.mu.Unlock()
		a = &dialAttempt{done: make(chan struct{})}
		s.dialing = a
		go c.dialPipe(s, a)
	}
	s.mu.Unlock()
	// Wait with this caller's ctx; the dial itself is bounded by
	// HandshakeTimeout and Close, not by whichever caller started it.
	select {
	case <-a.done:
		return a.p, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Client) dialPipe(s *pipeSlot, a *dialAttempt) {
	defer c.wg.Done()
	conn, err := c.dial(c.ctx)
	c.mu.Lock()
	switch {
	case c.closed:
		if conn != nil {
			conn.Close()
		}
		err = ErrClientClosed
	case err != nil:
		err = fmt.Errorf("connect: %w", err)
	default:
		a.p = newPipe(conn, &c.wg)
		s.p.Store(a.p) // under c.mu, so that Close finds it
	}
	c.mu.Unlock()
	a.err = err
	s.mu.Lock()
	s.dialing = nil
	s.mu.Unlock()
	close(a.done)
}

// Do sends a command on a shared connection and waits for its reply. enc
// appends the command to the buffer it is given; it is called before Do
// blocks, while other callers wait, so it must be quick. dec receives the
// reply on the connection's reader goroutine (the Value is valid only
// during the call) and its error is Do's. If ctx ends first Do returns
// ctx's error at once and the reply, when it comes, is dropped: dec is then
// never called. A broken connection fails the call with a *ConnError.
func (c *Client) Do(ctx context.Context, enc func([]byte) []byte, dec func(Value) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	i := int(c.next.Add(1) % uint32(len(c.slots)))
	var cl *call
	for attempt := 0; ; attempt++ {
		p, err := c.pipeAt(ctx, i)
		if err != nil {
			return err
		}
		cl, err = p.enqueue(enc, dec)
		if err == nil {
			break
		}
		if attempt == 2 { // enqueue failed: nothing was sent, so try a fresh connection
			return err
		}
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if cl.state.CompareAndSwap(callWaiting, callAbandoned) {
			return ctx.Err()
		}
		<-cl.done
	}
	err := cl.err
	cl.dec, cl.err = nil, nil
	callPool.Put(cl)
	return err
}

// DoBlocking runs a command that may block on the server (a waiting
// acquire) on a dedicated connection, one request at a time, so that it
// holds up no one else's replies. timeout > 0 bounds the whole exchange.
//
// If ctx ends first, the request is cancelled by closing the connection's
// sending side (the server drops the request when it reads the end of its
// input), and the reply is still read: a reply the server sent before it
// read the end — a grant that raced with the cancel — may have been
// decoded (by dec). If it comes within a moment (cancelWait, 250 ms),
// DoBlocking returns its result (nil after a decoded grant; ctx.Err()
// tells the caller that ctx ended); otherwise it returns ctx's error at
// once, so that a hung server does not stretch the caller's time, and
// reading goes on in the background for up to CancelGrace, after which
// late (if set) is called with the result: nil if a reply was decoded,
// else the error (late is also called, on a goroutine of its own, when
// the connection ended without a reply after ctx did). The connection is
// never reused after ctx ended.
func (c *Client) DoBlocking(ctx context.Context, timeout time.Duration, enc func([]byte) []byte, dec func(Value) error, late func(error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := c.getConn(ctx)
	if err != nil {
		return err
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	conn.nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { cancelRequest(conn.nc, dl) })
	done := make(chan error, 1)
	go func() { done <- conn.Do(enc, dec) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		t := time.NewTimer(cancelWait)
		select {
		case err = <-done:
			t.Stop()
		case <-t.C:
			go func() {
				err := <-done
				c.putConn(conn, false)
				if late != nil {
					late(err)
				}
			}()
			return ctx.Err()
		}
	}
	stopped := stop()
	var ce *ConnError
	switch {
	case errors.As(err, &ce):
		c.putConn(conn, false)
		if !stopped {
			if late != nil {
				go late(err) // ctx ended, and no reply: as if it came late
			}
			return ctx.Err()
		}
		return err
	default:
		c.putConn(conn, stopped) // the reply arrived; keep the connection if ctx did not close it
		return err
	}
}

// cancelWait is how long DoBlocking waits for the reply of a request whose
// ctx ended before it returns (the rest is read in the background).
const cancelWait = 250 * time.Millisecond

// CancelGrace is how long DoBlocking still reads a cancelled request's
// reply.
const CancelGrace = 2 * time.Second

// cancelRequest ends a blocking request whose caller's ctx ended: it closes
// the connection's sending side and gives the reply CancelGrace to come, or
// closes the connection if one side cannot be closed (a TLS connection
// whose handshake has not finished). dl, if set, is the exchange's
// deadline, which the grace does not extend.
func cancelRequest(nc net.Conn, dl time.Time) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		if grace := time.Now().Add(CancelGrace); dl.IsZero() || grace.Before(dl) {
			nc.SetReadDeadline(grace)
		}
		return
	}
	nc.Close()
}

func (c *Client) getConn(ctx context.Context) (*Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClientClosed
	}
	if n := len(c.idle); n > 0 {
		conn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.busy[conn] = struct{}{}
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()
	conn, err := c.dial(ctx)
	if err != nil {
		// A dial cut by the caller's ctx is the ctx's error, whatever the
		// dialer said ("i/o timeout" when its own copy of the deadline
		// struck first): no request was sent.
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return nil, context.DeadlineExceeded
		}
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, ErrClientClosed
	}
	c.busy[conn] = struct{}{}
	return conn, nil
}

func (c *Client) putConn(conn *Conn, reuse bool) {
	c.mu.Lock()
	delete(c.busy, conn)
	if reuse && !c.closed && len(c.idle) < c.opts.MaxIdle {
		conn.nc.SetDeadline(time.Time{})
		c.idle = append(c.idle, conn)
		conn = nil
	}
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// Close closes every connection: calls in flight fail with a *ConnError
// wrapping ErrClientClosed, later calls with ErrClientClosed. It waits for
// the connections' goroutines to end.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stopWatch)
	c.cancel()
	conns := append(c.idle, mapKeys(c.busy)...)
	c.idle = nil
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	for i := range c.slots {
		// A dial in progress sees closed when it ends and closes its
		// connection.
		if p := c.slots[i].p.Load(); p != nil {
			p.fail(ErrClientClosed)
		}
	}
	c.wg.Wait()
	return nil
}

func mapKeys(m map[*Conn]struct{}) []*Conn {
	out := make([]*Conn, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
