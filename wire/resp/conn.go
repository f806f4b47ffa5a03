package resp

import (
	"bufio"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ConnError reports that the connection broke (or was closed) while a
// request was queued or in flight: the request may or may not have taken
// effect on the server.
type ConnError struct{ Err error }

func (e *ConnError) Error() string {
	return "connection lost (the request may or may not have taken effect): " + e.Err.Error()
}
func (e *ConnError) Unwrap() error { return e.Err }

// Conn is a connection used one request at a time: for the handshake, and
// for blocking commands that would hold up a pipelined connection.
type Conn struct {
	nc   net.Conn
	rd   *Reader
	wbuf []byte
}

// NewConn wraps nc. maxArray bounds the elements of one reply array (0:
// DefaultMaxArray).
func NewConn(nc net.Conn, maxArray int) *Conn {
	rd := NewReader(bufio.NewReaderSize(nc, 32<<10))
	rd.MaxArray = maxArray
	return &Conn{nc: nc, rd: rd}
}

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Do writes the command that enc appends to its argument and passes the
// reply to dec, returning dec's error. A failure to write or read is a
// *ConnError, after which the Conn must be closed.
func (c *Conn) Do(enc func([]byte) []byte, dec func(Value) error) error {
	c.wbuf = enc(c.wbuf[:0])
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return &ConnError{Err: err}
	}
	v, err := c.rd.ReadValue()
	if err != nil {
		return &ConnError{Err: err}
	}
	return dec(v)
}

// Send writes the command that enc appends to its argument, without
// waiting for a reply.
func (c *Conn) Send(enc func([]byte) []byte) error {
	c.wbuf = enc(c.wbuf[:0])
	_, err := c.nc.Write(c.wbuf)
	return err
}

// Receive reads the next reply; it is valid until the next Receive or Do.
func (c *Conn) Receive() (Value, error) { return c.rd.ReadValue() }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

const (
	callWaiting int32 = iota
	callDone
	callAbandoned
)

// call is one request on a pipelined connection.
type call struct {
	dec   func(Value) error
	err   error
	state atomic.Int32
	done  chan struct{} // receives one value when err is set
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall(dec func(Value) error) *call {
	c := callPool.Get().(*call)
	c.dec, c.err = dec, nil
	c.state.Store(callWaiting)
	return c
}

// finish delivers the reply (v) or a failure (err) unless the caller gave
// up on the call.
func (c *call) finish(v Value, err error) {
	if !c.state.CompareAndSwap(callWaiting, callDone) {
		return // abandoned: nobody reads the result
	}
	if err == nil {
		err = c.dec(v)
	}
	c.err = err
	c.done <- struct{}{}
}

// pipe is an auto-pipelined connection: callers append their commands to a
// shared buffer and their calls to a FIFO; one goroutine writes whatever has
// accumulated with one write, another reads replies and completes the calls
// in order.
type pipe struct {
	nc     net.Conn
	rd     *Reader
	wake   chan struct{} // cap 1: there is something to write
	broken chan struct{} // closed by fail

	mu    sync.Mutex
	err   error // set once, by fail
	wbuf  []byte
	fifo  []*call
	head  int
	since time.Duration // monotonic: when the oldest call began waiting for a reply (see stalled)
}

var monoBase = time.Now()

func mono() time.Duration { return time.Since(monoBase) }

// stalled reports whether calls have been waiting longer than d with no
// reply arriving.
func (p *pipe) stalled(d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err == nil && p.head < len(p.fifo) && mono()-p.since > d
}

func newPipe(c *Conn, wg *sync.WaitGroup) *pipe {
	p := &pipe{nc: c.nc, rd: c.rd, wake: make(chan struct{}, 1), broken: make(chan struct{})}
	wg.Add(2)
	go func() { defer wg.Done(); p.writeLoop() }()
	go func() { defer wg.Done(); p.readLoop() }()
	return p
}

func (p *pipe) isBroken() bool {
	select {
	case <-p.broken:
		return true
	default:
		return false
	}
}

// enqueue queues a command. It fails, having sent nothing, only when the
// connection is already broken.
func (p *pipe) enqueue(enc func([]byte) []byte, dec func(Value) error) (*call, error) {
	c := getCall(dec)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		callPool.Put(c)
		return nil, err
	}
	p.wbuf = enc(p.wbuf)
	if p.head == len(p.fifo) {
		p.since = mono()
	}
	p.fifo = append(p.fifo, c)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return c, nil
}

func (p *pipe) writeLoop() {
	var spare []byte
	for {
		select {
		case <-p.wake:
		case <-p.broken:
			return
		}
		// Callers woken by the same batch of replies are usually about to
		// enqueue their next requests: let them, so one write carries all.
		runtime.Gosched()
		p.mu.Lock()
		buf := p.wbuf
		p.wbuf = spare[:0]
		p.mu.Unlock()
		if len(buf) == 0 {
			spare = buf
			continue
		}
		if _, err := p.nc.Write(buf); err != nil {
			p.fail(err)
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a burst's buffer forever
		}
		spare = buf
	}
}

func (p *pipe) readLoop() {
	for {
		v, err := p.rd.ReadValue()
		if err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		var c *call
		if p.head < len(p.fifo) {
			c = p.fifo[p.head]
			p.fifo[p.head] = nil
			p.head++
			p.since = mono()
			switch {
			case p.head == len(p.fifo):
				p.fifo, p.head = p.fifo[:0], 0
			case p.head > 1024 && p.head > len(p.fifo)/2:
				n := copy(p.fifo, p.fifo[p.head:])
				clear(p.fifo[n:])
				p.fifo, p.head = p.fifo[:n], 0
			}
		}
		p.mu.Unlock()
		if c == nil {
			p.fail(protoErr("reply without a request"))
			return
		}
		c.finish(v, nil)
	}
}

// fail breaks the connection: every queued call fails with a *ConnError
// wrapping cause, and later enqueues fail at once.
func (p *pipe) fail(cause error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = &ConnError{Err: cause}
	calls := p.fifo[p.head:]
	p.fifo, p.head = nil, 0
	p.mu.Unlock()
	close(p.broken)
	p.nc.Close()
	for _, c := range calls {
		c.finish(Value{}, p.err)
	}
}
