package resp

import (
	"bufio"
	"context"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Replies is a server connection's outgoing side: replies are queued in
// request order as commands are read, built by whoever runs each command
// (now, on a worker, or on a goroutine of their own), and written strictly
// in that order by Run, which flushes only when the next reply is not
// ready, so that replies that finish together leave in one write.
//
// The reader goroutine calls Now, Async and, when it stops reading, Close;
// other goroutines may Push. Run returns after Close once every queued
// reply has been written (or the writer failed).
type Replies struct {
	w       io.Writer
	onError func() // called once if a write fails
	workers *Workers
	slots   chan *slot

	orderMu sync.Mutex
	lastBy  map[string]*job // the latest unfinished Async or Direct per key
	running atomic.Int64    // Async commands queued and not finished

	pushMu sync.Mutex
	closed bool

	// The output-buffer limit (see SetLimit): bytes of replies built but
	// not yet handed to w.
	pending    atomic.Int64
	queued     atomic.Int64 // replies queued and not yet written (Idle)
	limit      int64
	onOverflow func(total bool)
	overflowed atomic.Bool

	// The limit on the replies of several connections together (see
	// SetTotal).
	total      *Total
	totalShare int64
}

// Total counts the bytes of replies built and not yet written across
// several Replies (a server's connections), against a limit.
type Total struct {
	Limit int64
	used  atomic.Int64
}

// Used returns the bytes counted now.
func (t *Total) Used() int64 { return t.used.Load() }

// SetLimit sets the output-buffer limit: once the replies built but not
// yet written to w come to more than max bytes (a client that sends
// commands and does not read their replies), onOverflow is called, once;
// it should close the connection. Zero means no limit. Call it before the
// first reply is queued.
func (r *Replies) SetLimit(max int64, onOverflow func(total bool)) {
	r.limit, r.onOverflow = max, onOverflow
}

// SetTotal counts this connection's pending replies in t too: once t's
// count passes t.Limit, a connection whose own pending replies come to
// more than share is overflowed (onOverflow(true)), so that clients that
// do not read cannot together hold more than about the limit, while one
// with little waiting is left alone. Call it before the first reply.
func (r *Replies) SetTotal(t *Total, share int64) {
	r.total, r.totalShare = t, share
}

// Pending returns the bytes of replies built but not yet written.
func (r *Replies) Pending() int64 { return r.pending.Load() }

// built accounts for n more bytes waiting to be written.
func (r *Replies) built(n int) {
	v := r.pending.Add(int64(n))
	over, total := r.limit > 0 && v > r.limit, false
	if r.total != nil {
		if t := r.total.used.Add(int64(n)); t > r.total.Limit && v > r.totalShare && !over {
			over, total = true, true
		}
	}
	if over && r.overflowed.CompareAndSwap(false, true) {
		r.onOverflow(total)
	}
}

// written accounts for n bytes that are no longer waiting.
func (r *Replies) written(n int) {
	r.pending.Add(-int64(n))
	if r.total != nil {
		r.total.used.Add(-int64(n))
	}
}

// slot is one reply: ready when built by the reader, else done receives
// one value once buf holds it.
type slot struct {
	buf   []byte
	ready bool
	done  chan struct{}
}

var slotPool = sync.Pool{New: func() any { return &slot{done: make(chan struct{}, 1)} }}

func putSlot(s *slot) {
	if cap(s.buf) > 64<<10 {
		s.buf = nil
	}
	s.buf, s.ready = s.buf[:0], false
	slotPool.Put(s)
}

// job is a started Async with a key; done is closed when it has finished.
type job struct{ done chan struct{} }

// NewReplies writes to w. At most maxInflight replies wait at once: beyond
// that Now and Async block (the reader then stops reading). onError is
// called if a write fails (it should close the connection and cancel its
// requests). workers runs short commands.
func NewReplies(w io.Writer, maxInflight int, workers *Workers, onError func()) *Replies {
	return &Replies{w: w, onError: onError, workers: workers, slots: make(chan *slot, maxInflight)}
}

// Now queues a reply built at once by f.
func (r *Replies) Now(f func(b []byte) []byte) {
	s := slotPool.Get().(*slot)
	s.buf = f(s.buf)
	s.ready = true
	r.built(len(s.buf))
	r.queued.Add(1)
	r.slots <- s
}

// Idle reports whether every reply queued has been written: no command of
// the connection is running or waiting (a blocking acquire) and no reply
// is waiting to be sent.
func (r *Replies) Idle() bool { return r.queued.Load() == 0 }

// Async queues the reply of a command that fn runs and answers; once the
// connection has overflowed (see SetLimit), fn is not run. Short
// commands run on a worker; blocking ones (which may wait long) on a
// goroutine of their own. Commands with the same non-empty key take effect
// in the order queued: each waits for the one before it to finish. Others
// run concurrently.
func (r *Replies) Async(key string, blocking bool, fn func(b []byte) []byte) {
	s := slotPool.Get().(*slot)
	r.queued.Add(1)
	r.slots <- s
	r.running.Add(1)
	prev, me := r.follow(key, false)
	run := func() {
		if prev != nil {
			<-prev.done
		}
		// A connection closed at an output limit runs none of its
		// commands still queued (as Redis drops such a client): building
		// their replies for nobody kept memory far above the limits (the
		// review of issue 26: 200 slow readers of 64 KiB replies peaked
		// at 1.7 GB against a 256 MiB total).
		r.finish(s, key, me, fn, true)
	}
	if blocking {
		go run()
		return
	}
	r.workers.Run(run)
}

// follow records a command with key (none: nothing to order) as the
// latest of its key, and returns the unfinished one before it, if any;
// with ifFree it records nothing while there is one, and returns it.
func (r *Replies) follow(key string, ifFree bool) (prev, me *job) {
	if key == "" {
		return nil, nil
	}
	r.orderMu.Lock()
	defer r.orderMu.Unlock()
	if prev = r.lastBy[key]; prev != nil && ifFree {
		return prev, nil
	}
	if r.lastBy == nil {
		r.lastBy = map[string]*job{}
	}
	me = &job{done: make(chan struct{})}
	r.lastBy[key] = me
	return prev, me
}

// finish builds slot s's reply with fn (unless the connection has
// overflowed), ends its command (me, for key; an Async one's count), and
// hands s to the writer.
func (r *Replies) finish(s *slot, key string, me *job, fn func(b []byte) []byte, async bool) {
	if !r.overflowed.Load() {
		s.buf = fn(s.buf)
	}
	r.built(len(s.buf))
	if me != nil {
		close(me.done)
		r.orderMu.Lock()
		if r.lastBy[key] == me {
			delete(r.lastBy, key)
		}
		r.orderMu.Unlock()
	}
	if async {
		r.running.Add(-1)
	}
	s.done <- struct{}{}
}

// Deferred is the reply slot of a command that the reader starts itself
// and whose answer comes later, from whichever goroutine learns it (a
// store's callback): see Direct.
type Deferred struct {
	r   *Replies
	s   *slot
	key string
	me  *job
}

// Direct queues the reply of a command that the caller starts at once
// without a worker, a store call that answers through a callback (the
// lease server's engine answers from its log's commit); the callback
// hands the reply over with Fill. It saves a worker's wake-up per
// command: the reader starts the call, and the goroutine that learns the
// answer builds the reply for the writer.
//
// ok is false, and nothing is queued, while an Async command queued
// earlier has not finished, whatever its key, or a Direct one with the
// same key has not been filled, or once the connection has overflowed
// (Async then runs nothing). A Direct command takes effect when the caller
// starts it: ahead of an Async one queued before it that has not run yet,
// which the lease server's red team saw as a pipelined "LH.SESSION CLOSE
// s; LH.ACQUIRE n … SESSION s" granted on the closed session in 4,777 of
// 4,800 tries (112 before Direct, when both ran on workers). A command
// queued later with the same key waits for Fill, as for an Async one.
func (r *Replies) Direct(key string) (d Deferred, ok bool) {
	if r.overflowed.Load() || r.running.Load() > 0 {
		return Deferred{}, false
	}
	prev, me := r.follow(key, true)
	if prev != nil {
		return Deferred{}, false
	}
	d = Deferred{r: r, s: slotPool.Get().(*slot), key: key, me: me}
	r.queued.Add(1)
	r.slots <- d.s
	return d, true
}

// Fill builds the reply of a Direct command with fn (not once the
// connection has overflowed) and hands it to the writer. Call it exactly
// once; it does not block.
func (d Deferred) Fill(fn func(b []byte) []byte) { d.r.finish(d.s, d.key, d.me, fn, false) }

// Push queues a reply from a goroutine other than the reader (a
// notification). It gives up, returning false, when the queue is closed or
// ctx ends first. Pushers' ctx must end before Close is called, or Close
// may wait for a full queue to drain.
func (r *Replies) Push(ctx context.Context, f func(b []byte) []byte) bool {
	s := slotPool.Get().(*slot)
	s.buf = f(s.buf)
	s.ready = true
	r.built(len(s.buf))
	r.pushMu.Lock()
	defer r.pushMu.Unlock()
	if !r.closed {
		r.queued.Add(1)
		select {
		case r.slots <- s:
			return true
		case <-ctx.Done():
		}
		r.queued.Add(-1)
	}
	r.written(len(s.buf))
	putSlot(s)
	return false
}

// Close ends the queue: Run writes what is queued and returns.
func (r *Replies) Close() {
	r.pushMu.Lock()
	defer r.pushMu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.slots)
	}
}

// Run writes the replies in order until Close. After a write error it
// goes on taking replies (so commands can finish) without writing them.
func (r *Replies) Run() {
	bw := bufio.NewWriterSize(r.w, 16<<10)
	var werr error
	fail := func(err error) {
		if werr == nil && err != nil {
			werr = err
			r.onError()
		}
	}
	flush := func() {
		if werr == nil && bw.Buffered() > 0 {
			fail(bw.Flush())
		}
	}
	for {
		var s *slot
		var ok bool
		select {
		case s, ok = <-r.slots:
		default:
			flush()
			s, ok = <-r.slots
		}
		if !ok {
			flush()
			return
		}
		if !s.ready {
			select {
			case <-s.done:
			default:
				// Replies finished together (by one group commit) are
				// being built by goroutines about to run: let them
				// before deciding to flush.
				runtime.Gosched()
				select {
				case <-s.done:
				default:
					flush()
					<-s.done
				}
			}
		}
		if werr == nil {
			_, err := bw.Write(s.buf)
			fail(err)
		}
		r.written(len(s.buf))
		r.queued.Add(-1)
		putSlot(s)
	}
}

// Workers runs short jobs on goroutines that are kept for a while after
// their last job, so that a busy server neither starts nor grows the stack
// of a goroutine per command. The zero value is not usable: see NewWorkers.
type Workers struct {
	jobs chan func() // unbuffered: a send succeeds only to an idle worker
}

// NewWorkers returns an empty pool; workers are started on demand.
func NewWorkers() *Workers { return &Workers{jobs: make(chan func())} }

const workerIdle = 10 * time.Second

// Run runs job on an idle worker, or on a new one.
func (p *Workers) Run(job func()) {
	select {
	case p.jobs <- job:
	default:
		go p.work(job)
	}
}

func (p *Workers) work(job func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		job()
		t.Reset(workerIdle)
		select {
		case job = <-p.jobs:
		case <-t.C:
			return
		}
	}
}
