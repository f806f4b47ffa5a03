package workflow

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// hotInstance is Adaptive's state for one instance: its conflict window,
// its mode, and in queue mode its FIFO of waiting transitions.
type hotInstance struct {
	id    string
	users int // Transition calls using it; guarded by Workflows.mu

	mu sync.Mutex
	// turns orders this process's Optimistic, Pessimistic and Lease
	// transitions of the instance (see turns.go). Guarded by mu.
	turns   turns
	queued  bool
	win     window
	q       []*command
	running bool // a head goroutine is draining q

	// since is when each request id now waiting (or told to ask again)
	// first arrived: the queue serves requests in that order, so a caller
	// told that the instance moved on keeps its place when it asks again.
	// Guarded by mu.
	since map[string]arrival

	// Owned by the head while running: the instance as the head last wrote
	// or read it (nil: read it afresh), and request ids known not to have
	// been applied as of that version. It is only a guess between batches —
	// other processes write the store too — and is never answered from
	// unchecked: a batch that writes conditions its transaction on
	// cacheVer (a conflict empties both), and a batch that writes nothing
	// reads the instance again first. So a refusal of a known request id
	// needs no check of its request record once the version is confirmed.
	cache    *instRec
	cacheVer uint64
	known    map[string]struct{}
}

type arrival struct {
	first, last time.Time
}

// invalidate forgets the head's view of the instance.
func (h *hotInstance) invalidate() {
	h.cache = nil
	clear(h.known)
}

// window counts attempts and conflicts over a sliding window of buckets.
type window struct {
	span  int64 // nanoseconds per bucket
	index [windowBuckets]int64
	n, c  [windowBuckets]int
}

const windowBuckets = 10

func (wd *window) add(now time.Time, conflict bool) {
	i := now.UnixNano() / wd.span
	b := i % windowBuckets
	if wd.index[b] != i {
		wd.index[b], wd.n[b], wd.c[b] = i, 0, 0
	}
	wd.n[b]++
	if conflict {
		wd.c[b]++
	}
}

func (wd *window) rate(now time.Time) (float64, int) {
	i := now.UnixNano() / wd.span
	n, c := 0, 0
	for b := range windowBuckets {
		if i-wd.index[b] < windowBuckets {
			n += wd.n[b]
			c += wd.c[b]
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(c) / float64(n), n
}

// acquireHot returns the instance's adaptive state, creating it.
func (w *Workflows) acquireHot(id string) *hotInstance {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.lastSweep) > w.cfg.Window {
		w.lastSweep = now
		for k, h := range w.hot {
			if h.users > 0 {
				continue
			}
			h.mu.Lock()
			_, n := h.win.rate(now)
			idle := !h.running && len(h.q) == 0 && n == 0
			h.mu.Unlock()
			if idle {
				delete(w.hot, k)
				w.m.forget(k)
			}
		}
	}
	h := w.hot[id]
	if h == nil {
		h = &hotInstance{id: id, win: window{span: max(int64(w.cfg.Window)/windowBuckets, 1)},
			since: map[string]arrival{}, known: map[string]struct{}{}}
		w.hot[id] = h
		w.m.mode(id, false, 0)
	}
	h.users++
	return h
}

func (w *Workflows) releaseHot(h *hotInstance) {
	w.mu.Lock()
	h.users--
	w.mu.Unlock()
}

// recordLocked adds an attempt to h's window and moves h between modes:
// to the queue above the threshold (with at least MinSamples attempts in
// the window), back below half of it. It reports whether h is queued.
func (w *Workflows) recordLocked(h *hotInstance, conflict bool) bool {
	now := w.clock.Now()
	h.win.add(now, conflict)
	rate, n := h.win.rate(now)
	switch {
	case !h.queued && n >= w.cfg.MinSamples && rate > w.cfg.Threshold:
		h.queued = true
		w.m.switched(true)
	case h.queued && rate < w.cfg.Threshold/2:
		h.queued = false
		w.m.switched(false)
	}
	w.m.mode(h.id, h.queued, rate)
	return h.queued
}

// InstanceMode reports Adaptive's current view of an instance: whether it
// is in fair queuing and its conflict rate over the window (0, false for
// an instance it has not seen lately or another strategy).
func (w *Workflows) InstanceMode(instance string) (queued bool, rate float64) {
	w.mu.Lock()
	h := w.hot[instance]
	w.mu.Unlock()
	if h == nil {
		return false, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rate, _ = h.win.rate(w.clock.Now())
	return h.queued, rate
}

func (w *Workflows) adaptive(ctx context.Context, c *command) (Result, error) {
	h := w.acquireHot(c.id)
	defer w.releaseHot(h)
	h.mu.Lock()
	queued := h.queued
	h.mu.Unlock()
	if !queued {
		res, err := w.optimistic(ctx, c, Optimistic, 0, func(conflict bool) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return w.recordLocked(h, conflict)
		})
		if !errors.Is(err, errMoved) {
			return res, err
		}
	}
	return w.enqueue(ctx, h, c)
}

// enqueue puts c in h's FIFO and waits for the head to apply it. In queue
// mode a transition counts as a conflict when others were waiting or being
// applied (it would have raced them).
func (w *Workflows) enqueue(ctx context.Context, h *hotInstance, c *command) (Result, error) {
	h.mu.Lock()
	contended := len(h.q) > 0 || h.running
	if !w.recordLocked(h, contended) && !contended {
		h.mu.Unlock()
		return w.optimistic(ctx, c, Optimistic, 0, func(conflict bool) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return w.recordLocked(h, conflict)
		})
	}
	c.done = make(chan outcome, 1)
	now := w.clock.Now()
	a, seen := h.since[c.requestID]
	if !seen {
		a.first = now
	}
	a.last = now
	h.since[c.requestID] = a
	c.enqueued = a.first
	h.q = append(h.q, c)
	if !h.running {
		h.running = true
		go w.drain(h)
	}
	h.mu.Unlock()
	select {
	case o := <-c.done:
		return o.res, o.err
	case <-ctx.Done():
		h.mu.Lock()
		for i, x := range h.q {
			if x == c {
				h.q = append(h.q[:i:i], h.q[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
		select {
		case o := <-c.done: // delivered meanwhile
			return o.res, o.err
		default:
		}
		return Result{}, ctx.Err()
	}
}

// drain is the head of h's queue: it applies the waiting transitions in
// order, as many per transaction as fit, until the queue is empty. With
// Config.Leases (and not LocalQueue) it holds a FIFO lease on the instance
// while it works, for at most QueueSlice at a time, so that the heads of
// other processes take turns with it instead of conflicting.
func (w *Workflows) drain(h *hotInstance) {
	var lease *leasehold.Lease
	var leaseAt, noLeaseUntil time.Time
	releaseLease := func() {
		if lease != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = lease.Release(rctx)
			cancel()
			lease = nil
		}
	}
	defer releaseLease()
	maxTake := leasehold.MaxTxnOps - 2
	pruned := w.clock.Now()
	for {
		h.mu.Lock()
		batch := make([]*command, 0, min(len(h.q), maxTake))
		for len(h.q) > 0 && len(batch) < maxTake {
			c := h.q[0]
			h.q[0] = nil
			h.q = h.q[1:]
			if c.ctx.Err() == nil {
				batch = append(batch, c)
			}
		}
		if len(batch) == 0 {
			h.running = false
			h.invalidate()
			clear(h.since)
			h.mu.Unlock()
			return
		}
		if now := w.clock.Now(); now.Sub(pruned) > w.cfg.Window {
			// Forget requests whose callers did not ask again.
			pruned = now
			for r, a := range h.since {
				if now.Sub(a.last) > w.cfg.Window {
					delete(h.since, r)
				}
			}
		}
		h.mu.Unlock()
		// Serve requests in the order they first arrived.
		slices.SortStableFunc(batch, func(a, b *command) int { return a.enqueued.Compare(b.enqueued) })
		if w.client != nil && !w.cfg.LocalQueue {
			if lease != nil && (w.clock.Now().Sub(leaseAt) > w.cfg.QueueSlice || !lease.Held()) {
				releaseLease()
				h.invalidate() // others may write while we do not hold it
			}
			if lease == nil && !w.clock.Now().Before(noLeaseUntil) {
				actx, cancel := context.WithTimeout(context.Background(), w.queueWait())
				l, err := w.client.Acquire(actx, w.queueLeaseName(h.id), leasehold.TTL(w.queueTTL()))
				cancel()
				if err == nil {
					lease, leaseAt = l, w.clock.Now()
				} else {
					// A holder that does not let go within a few slices
					// is gone (or its store keeps a dead grant longer
					// than our TTL: etcd, at least 2 s): go on without
					// the lease for a while instead of asking again for
					// every batch.
					noLeaseUntil = w.clock.Now().Add(w.queueTTL())
				}
				// Without the lease the batch is still correct (every
				// write is conditioned on the version); it only competes.
			}
		}
		rest := w.runBatch(h, batch)
		runtime.Gosched() // let the callers just answered ask again before the next batch
		h.mu.Lock()
		for _, c := range batch {
			if c.final && !slices.Contains(rest, c) {
				delete(h.since, c.requestID)
			}
		}
		h.mu.Unlock()
		if len(rest) > 0 {
			h.mu.Lock()
			h.q = append(rest, h.q...)
			h.mu.Unlock()
		}
	}
}

// queueTTL is the TTL of the queue head's FIFO lease: five queue slices
// (at least 200ms, at most LeaseTTL), renewed by keepalive while the head
// holds it. The head lets it go after a slice; a head whose process dies
// holding it keeps the other processes' heads out for at most this long
// (before issue 28 it was LeaseTTL without keepalive: a SIGKILLed process
// stalled the instance for 10 s).
func (w *Workflows) queueTTL() time.Duration {
	return min(max(5*w.cfg.QueueSlice, 200*time.Millisecond), w.cfg.LeaseTTL)
}

// queueWait is how long a queue head waits for the FIFO lease before it
// goes on without it: the lease's TTL plus a slice (a live holder lets go
// after a slice and a batch, so this covers a few other processes' heads
// ahead of it), at most LockWait. A head that waited longer would stall the
// instance for as long as a dead holder's grant or queue entry survives on
// its store, which on etcd is seconds (issue 28).
func (w *Workflows) queueWait() time.Duration {
	return min(w.queueTTL()+w.cfg.QueueSlice, w.cfg.LockWait)
}

// refusalsPerBatch bounds the refusals one batch answers: under a herd of
// callers that ask again whenever told the instance moved on, answering
// all of them at once would wake them all for every transition applied.
const refusalsPerBatch = 8

// slot is one command's place in a batch.
type slot struct {
	c       *command
	rec     instRec // the instance as this command finds it (after those before it)
	apply   bool
	settled bool // res/err are final without a check of the request id
	res     Result
	err     error
}

// runBatch applies batch (in order) in as few transactions as it takes
// and delivers every result; it returns the commands it left for the
// next batch (those that did not fit, from the first on).
func (w *Workflows) runBatch(h *hotInstance, batch []*command) []*command {
	ctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.LockWait, 30*time.Second))
	defer cancel()
	deliver := func(c *command, res Result, err error) {
		// A refusal leaves the request free to ask again; anything else
		// is its final answer.
		var ws *WrongStateError
		c.final = !(err == nil && res.Outcome == AlreadyDone) && !errors.As(err, &ws)
		if !c.final {
			// Told to ask again: it keeps its place for a Window from
			// now, however long it waited for this answer.
			h.mu.Lock()
			h.since[c.requestID] = arrival{first: c.enqueued, last: w.clock.Now()}
			h.mu.Unlock()
		}
		c.done <- outcome{res, err}
	}
	fail := func(cs []*command, err error) {
		for _, c := range cs {
			deliver(c, Result{}, err)
		}
	}
	confirmed := false
	for attempt := 1; ; attempt++ {
		fresh := confirmed // h.cache was read in this attempt
		confirmed = false
		if h.cache == nil {
			rec, ver, err := w.readInstance(ctx, h.id)
			if err != nil {
				fail(batch, err)
				return nil
			}
			h.cache, h.cacheVer = &rec, ver
			fresh = true
		}
		cur := *h.cache
		p := &plan{id: h.id, version: h.cacheVer}
		slots := make([]slot, 0, len(batch))
		var rest []*command
		seen := make(map[string]bool, len(batch))
		refusals := 0
		for i, c := range batch {
			if seen[c.requestID] {
				rest = batch[i:] // the same request twice: the second waits for the first's outcome
				break
			}
			s := slot{c: c, rec: cur}
			if cur.State == c.from {
				if p.ops()+4 > leasehold.MaxTxnOps || len(p.applied) >= w.cfg.MaxBatch {
					rest = batch[i:]
					break
				}
				e := w.entry(c, cur.Version, Queued, 0)
				cur.State, cur.Version, cur.Last = c.to, e.Version, &e
				p.applied = append(p.applied, e)
				s.apply = true
				s.res = applied(c, e, attempt)
			} else if cur.Last != nil && cur.Last.RequestID == c.requestID {
				s.res, s.err = w.repeated(c, *cur.Last, Queued, attempt)
				s.settled = true
			} else if refusals >= refusalsPerBatch {
				// The rest wait for the next batch, so that each batch
				// wakes only a few callers to ask again.
				rest = batch[i:]
				break
			} else if _, ok := h.known[c.requestID]; ok {
				s.res, s.err = w.refuse(c, cur, Queued, attempt)
				s.settled = true
				refusals++
			} else {
				if p.ops()+1 > leasehold.MaxTxnOps {
					rest = batch[i:]
					break
				}
				p.checked = append(p.checked, c.requestID)
				s.res, s.err = w.refuse(c, cur, Queued, attempt)
				refusals++
			}
			seen[c.requestID] = true
			slots = append(slots, s)
		}
		p.next = cur
		if len(p.applied) == 0 && !fresh {
			// Nothing to write, so no version condition will check the
			// head's view: another process may have moved the instance
			// since the head last wrote or read it. Answer only from a
			// view confirmed now; a changed instance is planned again.
			rec, ver, err := w.readInstance(ctx, h.id)
			if err != nil {
				fail(batch, err)
				return nil
			}
			if ver != h.cacheVer {
				h.invalidate()
				h.cache, h.cacheVer = &rec, ver
				confirmed = true // plan again from rec, as read now
				continue
			}
		}
		if len(p.applied) == 0 {
			// Nothing to write: refusals check their request ids by
			// reading (at once).
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, s := range slots {
				if s.settled {
					deliver(s.c, s.res, s.err)
					continue
				}
				wg.Go(func() {
					res, err := w.refusal(ctx, s.c, s.rec, Queued, attempt)
					var ws *WrongStateError
					if (err == nil && res.Outcome == AlreadyDone) || errors.As(err, &ws) {
						mu.Lock()
						h.known[s.c.requestID] = struct{}{}
						mu.Unlock()
					}
					deliver(s.c, res, err)
				})
			}
			wg.Wait()
			return rest
		}
		t, err := w.txn(p)
		if err != nil {
			fail(batch, err)
			return nil
		}
		out, err := w.records.Txn(ctx, t)
		kind, request := w.classify(h.id, err)
		switch kind {
		case conflictNone:
			if err != nil {
				h.invalidate()
				fail(batch[:len(slots)], err)
				return rest
			}
			next := p.next
			h.cache, h.cacheVer = &next, out.Versions[w.instKey(h.id)]
			if h.cacheVer == 0 {
				h.invalidate()
			}
			for _, r := range p.checked {
				h.known[r] = struct{}{}
			}
			for _, e := range p.applied {
				delete(h.known, e.RequestID)
			}
			for _, s := range slots {
				deliver(s.c, s.res, s.err)
			}
			return rest
		case conflictRequest:
			// A request id in the batch was applied before: answer it as
			// repeated and plan the rest again.
			var e Entry
			var found bool
			e, found, err = w.readRequest(ctx, h.id, request)
			if err != nil {
				fail(batch, err)
				return nil
			}
			for i, c := range batch {
				if c.requestID == request {
					if found {
						res, rerr := w.repeated(c, e, Queued, attempt)
						deliver(c, res, rerr)
						batch = append(batch[:i:i], batch[i+1:]...)
					}
					break
				}
			}
		default:
			// Someone else wrote the instance (another process, or a
			// transition outside the queue): read it afresh.
			h.invalidate()
			w.m.conflict()
		}
		if attempt >= w.cfg.MaxAttempts*4 {
			fail(batch, fmt.Errorf("workflow %q instance %q: the queue's transaction %w", w.def.Name, h.id,
				&leasehold.RetriesExhaustedError{Key: w.instKey(h.id), Attempts: attempt}))
			return nil
		}
	}
}
