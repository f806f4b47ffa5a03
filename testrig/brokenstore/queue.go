package brokenstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// QueueStore is a Store that queues waiters itself (a leasehold.Queuer):
// a freed lease goes to the oldest waiter, TryAcquire does not take a free
// lease ahead of queued waiters (it names the head, token 0), and a waiter
// whose context ends leaves the queue. With bug 0 it keeps that FIFO
// contract (the positive control of the queue checks); with one of
// QueueBugs it breaks it in one way.
//
// AcquireWait notices the holder's expiry by polling every 2ms of real
// time, whatever the store's clock.
type QueueStore struct {
	*Store
	queues map[string][]*waiter // guarded by Store.mu
	freed  map[string]time.Time // QueueOvertake: when each name was released
	waits  int
}

// overtakeLag is how long, with QueueOvertake, a released lease stays free
// before a polling waiter takes it: a window in which any TryAcquire
// overtakes the queue, wide enough that a check sees it however loaded
// the machine is (with the 2ms poll alone, the waiter was sometimes first
// and the bug went unseen in CI).
const overtakeLag = 300 * time.Millisecond

type waiter struct {
	req leasehold.AcquireRequest
	ch  chan leasehold.Record // receives the grant; buffered
}

var (
	_ leasehold.Store  = (*QueueStore)(nil)
	_ leasehold.Queuer = (*QueueStore)(nil)
)

// NewQueuer returns a queueing store with the given bug (0: none).
func NewQueuer(bug Bug, opts ...Option) *QueueStore {
	return &QueueStore{Store: New(bug, opts...), queues: map[string][]*waiter{}, freed: map[string]time.Time{}}
}

// retryLocked reports whether req retries the acquire that holds name now.
func (q *QueueStore) retryLocked(req leasehold.AcquireRequest) bool {
	cur := q.rows[req.Name]
	return cur.Live(q.now()) && req.RequestID != "" && cur.RequestID == req.RequestID && cur.Owner == req.Owner
}

// handoffLocked grants a free lease to the head waiter (the newest, with
// QueueLIFO), as the release or expiry that freed it would.
func (q *QueueStore) handoffLocked(name string) {
	for {
		ws := q.queues[name]
		if len(ws) == 0 || q.rows[name].Live(q.now()) {
			return
		}
		i := 0
		if q.bug == QueueLIFO {
			i = len(ws) - 1
		}
		w := ws[i]
		rest := append(append([]*waiter(nil), ws[:i]...), ws[i+1:]...)
		if len(rest) == 0 {
			delete(q.queues, name)
		} else {
			q.queues[name] = rest
		}
		if rec, err := q.tryAcquireLocked(w.req); err == nil {
			w.ch <- rec
		}
	}
}

// TryAcquire implements leasehold.Store: it refuses while waiters are
// queued (unless QueueOvertake).
func (q *QueueStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return leasehold.Record{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bug != QueueOvertake {
		q.handoffLocked(req.Name)
	}
	if ws := q.queues[req.Name]; len(ws) > 0 && q.bug != QueueOvertake && !q.retryLocked(req) {
		if cur := q.rows[req.Name]; cur.Live(q.now()) {
			return leasehold.Record{}, &leasehold.HeldError{Name: cur.Name, Owner: cur.Owner, Token: cur.Token,
				Remaining: time.Duration(cur.Expires - q.now()), Acquired: cur.Acquired}
		}
		return leasehold.Record{}, &leasehold.HeldError{Name: req.Name, Owner: ws[0].req.Owner, Remaining: time.Millisecond}
	}
	return q.tryAcquireLocked(req)
}

// Release implements leasehold.Store: the freed lease goes to the head
// waiter in the same step.
func (q *QueueStore) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.releaseLocked(name, owner, token)
	if q.bug != QueueOvertake {
		q.handoffLocked(name)
	} else if err == nil {
		// The head takes it at a poll overtakeLag later; a TryAcquire
		// meanwhile is first.
		q.freed[name] = time.Now()
	}
	return err
}

// Queued reports whether owner waits in the queue of name.
func (q *QueueStore) Queued(name, owner string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.queues[name] {
		if w.req.Owner == owner {
			return true
		}
	}
	return false
}

// Get implements leasehold.Store, handing an expired lease to the head
// waiter first.
func (q *QueueStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	q.mu.Lock()
	q.handoffLocked(name)
	q.mu.Unlock()
	return q.Store.Get(ctx, name)
}

// AcquireWait implements leasehold.Queuer, with the bug.
func (q *QueueStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return leasehold.Record{}, err
	}
	q.mu.Lock()
	q.handoffLocked(req.Name)
	if q.bug == WaitGrantWhileHeld {
		if q.waits++; q.waits%2 == 0 && !q.retryLocked(req) {
			if cur := q.rows[req.Name]; cur != nil {
				c := *cur
				c.Held = false
				q.rows[req.Name] = &c
			}
			rec, err := q.tryAcquireLocked(req)
			q.mu.Unlock()
			return rec, err
		}
	}
	if len(q.queues[req.Name]) == 0 || q.retryLocked(req) {
		rec, err := q.tryAcquireLocked(req)
		if err == nil {
			q.mu.Unlock()
			return rec, nil
		}
	}
	w := &waiter{req: req, ch: make(chan leasehold.Record, 1)}
	q.queues[req.Name] = append(q.queues[req.Name], w)
	q.mu.Unlock()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case rec := <-w.ch:
			return rec, nil
		case <-tick.C:
			q.mu.Lock()
			if q.bug != QueueOvertake || time.Since(q.freed[req.Name]) >= overtakeLag {
				q.handoffLocked(req.Name)
			}
			q.mu.Unlock()
			continue
		case <-ctx.Done():
		}
		q.mu.Lock()
		if q.bug != QueueOrphan {
			ws := q.queues[req.Name]
			for i, x := range ws {
				if x == w {
					q.queues[req.Name] = append(append([]*waiter(nil), ws[:i]...), ws[i+1:]...)
					break
				}
			}
			select {
			case rec := <-w.ch: // granted as ctx ended: give it back
				_ = q.releaseLocked(rec.Name, rec.Owner, rec.Token)
				q.handoffLocked(req.Name)
			default:
			}
		}
		q.mu.Unlock()
		return leasehold.Record{}, ctx.Err()
	}
}

// Lossy is a Queuer over a Store whose waits all fail as a lost connection
// would (after which the wait's entry may be left in a real store's
// queue). It records each AcquireWait call, and whether its context had
// already ended (the clean-up call the Queuer contract asks of a caller
// that gives up): tests check that callers make that call.
type Lossy struct {
	leasehold.Store
	mu    sync.Mutex
	ended []bool
	reqs  []leasehold.AcquireRequest
}

// AcquireWait records the call and fails: with ctx's error if ctx had
// ended, else as a lost connection.
func (q *Lossy) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	q.mu.Lock()
	q.ended = append(q.ended, ctx.Err() != nil)
	q.reqs = append(q.reqs, req)
	q.mu.Unlock()
	if ctx.Err() != nil {
		return leasehold.Record{}, ctx.Err()
	}
	return leasehold.Record{}, errors.New("connection reset by peer")
}

// Calls returns, for each AcquireWait so far, its request and whether its
// context had ended when it was called.
func (q *Lossy) Calls() (reqs []leasehold.AcquireRequest, ended []bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.reqs), slices.Clone(q.ended)
}
