package main

import (
	"sync"
	"time"
)

// orderCheck checks the arrival order of grants in the same-key measure,
// instead of assuming it. A client arrives when it calls the library's
// wait (a lower bound of the moment the engine learns of it: a FIFO store
// queues it at most a round trip or two later). A grant overtakes when
// another client that is still waiting arrived more than margin before
// the grantee did: the margin absorbs the time from the call to the
// enqueue on the engine, so that a FIFO queue scores 100 %, while a lock
// that goes back to its releaser (who calls wait again at once and takes
// it before the waiters notice) scores low.
type orderCheck struct {
	margin time.Duration

	mu         sync.Mutex
	waiting    map[int]time.Time // client -> arrival, while it waits
	grants     int
	overtakes  int
	lastHolder int
	changes    int
}

func newOrderCheck(margin time.Duration) *orderCheck {
	return &orderCheck{margin: margin, waiting: map[int]time.Time{}, lastHolder: -1}
}

// arrive records that client called wait at t.
func (o *orderCheck) arrive(client int, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waiting[client] = t
}

// leave records that client stopped waiting without a grant.
func (o *orderCheck) leave(client int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.waiting, client)
}

// grant records that client holds the lock. The grantee calls it before
// it releases, so calls come in grant order.
func (o *orderCheck) grant(client int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.waiting[client]
	delete(o.waiting, client)
	o.grants++
	if o.lastHolder != -1 && o.lastHolder != client {
		o.changes++
	}
	o.lastHolder = client
	if !ok {
		return
	}
	for _, other := range o.waiting {
		if other.Add(o.margin).Before(at) {
			o.overtakes++
			return
		}
	}
}

// result returns the grants, the share of them that went to another
// client than the one before (holder changes), and the share that
// overtook no earlier waiter (in arrival order).
func (o *orderCheck) result() (grants int, changes, inOrder float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.grants == 0 {
		return 0, 0, 0
	}
	return o.grants, float64(o.changes) / float64(max(o.grants-1, 1)), float64(o.grants-o.overtakes) / float64(o.grants)
}
