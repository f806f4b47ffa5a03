package redis

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

// The FIFO queue of a name (AcquireWait). Its keys share the name's hash
// tag with the lease and the fence (see lease_lib.lua):
//
//	<lease key>:q  sorted set: waiter id -> arrival number (fence field q)
//	<lease key>:w  hash: d:<id> = liveness deadline (server ms), r:<id> = request
//
// A waiter subscribes (the store's one subscription), runs wait.lua, which
// enqueues it or grants it the lease, and then waits for a message
// addressed to it (name NUL waiter id [NUL token NUL acquired_us NUL
// now_ms] for a grant; name NUL waiter id NUL wait_ms: it is the head now
// and the lease is held for wait_ms more) or for its timer: a third of the
// liveness window (to refresh its entry), or, at the head (the first live
// entry), the holder's remaining time. Each timer wakeup runs wait.lua
// again, which also hands an expired holder's lease to the head. A release
// (release.lua), an acquire that finds the holder expired (acquire.lua) and
// a leaving waiter (leave.lua) hand the lease to the live head in their
// own atomic step, publish the grant to it alone, and tell the next live
// waiter that it is the head now (so that, should the new holder expire
// without releasing, it steps then, not at its next refresh).

// queueStats counts, for tests, the wait.lua runs of this store's waiters
// and the messages delivered to them.
type queueStats struct {
	waitRuns, delivered atomic.Int64
	// staleGrants counts grant messages a waiter set aside because a
	// later step of its own found it queued, not holding the lease.
	staleGrants atomic.Int64
	// beforeStep, if set (tests), runs before each wait.lua run.
	beforeStep func()
}

// stepTimeout bounds one wait.lua run of a waiter whose context ended
// while it was in flight.
const stepTimeout = 10 * time.Second

// waitMsg is what the subscriber hands a queued waiter: a grant, news
// that it is the head now and the lease is held for headMs more, or (the
// zero value) a request to run its next step now.
type waitMsg struct {
	grant  bool
	head   bool
	token  uint64
	acqUs  int64
	nowMs  int64
	headMs int64
}

// addWaiter registers a queued waiter's mailbox.
func (s *Store) addWaiter(key string) (chan waitMsg, error) {
	ch := make(chan waitMsg, 8)
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	if s.closed.Load() {
		return nil, leasehold.ErrClosed
	}
	if s.w.waiters == nil {
		s.w.waiters = map[string]chan waitMsg{}
	}
	s.w.waiters[key] = ch
	return ch, nil
}

func (s *Store) removeWaiter(key string) {
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	delete(s.w.waiters, key)
}

// deliver hands a message addressed to one waiter to it, if it is here
// (without blocking: a message lost here is made up by the waiter's next
// poll). Duplicates are harmless: a waiter takes the first grant and
// unregisters.
func (s *Store) deliver(payload string) {
	parts := strings.Split(payload, "\x00")
	if len(parts) != 2 && len(parts) != 3 && len(parts) != 5 {
		return
	}
	var m waitMsg
	if len(parts) == 3 {
		ms, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return
		}
		m = waitMsg{head: true, headMs: ms}
	}
	if len(parts) == 5 {
		tok, err1 := strconv.ParseUint(parts[2], 10, 64)
		acq, err2 := strconv.ParseInt(parts[3], 10, 64)
		now, err3 := strconv.ParseInt(parts[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		m = waitMsg{grant: true, token: tok, acqUs: acq, nowMs: now}
	}
	s.w.wmu.Lock()
	ch := s.w.waiters[parts[0]+"\x00"+parts[1]]
	s.w.wmu.Unlock()
	if ch != nil {
		s.qstats.delivered.Add(1)
		select {
		case ch <- m:
		default:
		}
	}
}

// wakeAllWaiters makes every queued waiter poll (the subscription came
// back: a grant message may have been missed).
func (s *Store) wakeAllWaiters() {
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	for _, ch := range s.w.waiters {
		select {
		case ch <- waitMsg{}:
		default:
		}
	}
}

// closeWaiters closes every waiter's mailbox (the store is closing).
func (s *Store) closeWaiters() {
	s.w.wmu.Lock()
	defer s.w.wmu.Unlock()
	for k, ch := range s.w.waiters {
		close(ch)
		delete(s.w.waiters, k)
	}
}

// AcquireWait implements leasehold.Queuer: it queues req in the name's
// FIFO queue in Redis (shared by every process using the same prefix) and
// returns once the lease is granted to it, in arrival order, or ctx ends
// (ctx's error; its entry is removed, and a grant that raced with the end
// is released). req is validated as TryAcquire does; an empty RequestID
// gets a random one. While it waits it refreshes its entry every third of
// the liveness window (WithLiveness). Client.Acquire uses it.
//
// The entry's id is derived from req's owner and request id: a call that
// fails (a Redis error) leaves the entry queued until its liveness
// deadline, and a retry of the same request resumes it, keeping its
// place. Called with a ctx that has already ended, AcquireWait removes the
// entry this request left in the queue and releases a grant made to it
// (best effort, bounded by a timeout of its own), and returns ctx's error.
func (s *Store) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if ctx.Err() != nil {
		// The caller gave up: remove what an earlier call with this
		// request left behind (an entry, or a grant made to it).
		if req.RequestID != "" && !s.closed.Load() {
			return leasehold.Record{}, s.leave(ctx, req, waiterID(req))
		}
		return leasehold.Record{}, ctx.Err()
	}
	if err := s.usable(ctx); err != nil {
		return leasehold.Record{}, err
	}
	if req.RequestID == "" {
		req.RequestID = randid.Hex(12)
	}
	id := waiterID(req)
	key := req.Name + "\x00" + id
	mbox, err := s.addWaiter(key)
	if err != nil {
		return leasehold.Record{}, err
	}
	defer s.removeWaiter(key)
	if err := s.subscribed(ctx); err != nil {
		return leasehold.Record{}, err
	}
	keys := s.nameKeys(req.Name)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	markerChanges := 0
	var refreshAt time.Time // when the entry's next refresh is due
	// queuedUs is the server time (µs) of the latest step that found this
	// request queued, not holding the lease. A grant message made before
	// it (a handover whose grant expired or was taken before that step
	// ran, the step then enqueueing the request again) is stale: taking
	// it returned a lapsed lease and left the new entry behind, to be
	// handed a grant nobody would collect.
	var queuedUs int64
	for {
		if ctx.Err() != nil {
			return leasehold.Record{}, s.leave(ctx, req, id)
		}
		e, err := s.epoch(ctx)
		if err != nil {
			return leasehold.Record{}, s.waitFailed(ctx, req, id, err)
		}
		if s.qstats.beforeStep != nil {
			s.qstats.beforeStep()
		}
		s.qstats.waitRuns.Add(1)
		// The step runs to its end even if ctx ends meanwhile: an
		// abandoned reply would leave it unknown whether it enqueued or
		// granted, and the leave step that follows could even reach
		// Redis first (another connection). But the caller does not wait
		// for it past ctx's end (replies that come late made a call
		// return seconds after its timeout): the step's end and then the
		// leave run in the background (leaveAfter). Only a failure of
		// Redis itself leaves it unknown (the entry then expires).
		step := make(chan struct{})
		var res []any
		var serr error
		go func() {
			defer close(step)
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
			defer cancel()
			res, serr = s.runAcked(sctx, lua.wait, keys, s.epochArgs(e, req.Name, req.Owner, req.RequestID,
				string(req.Data), int64(req.TTL), id, s.liveness.Milliseconds())...).Slice()
		}()
		select {
		case <-step:
		case <-ctx.Done():
			return leasehold.Record{}, s.leaveAfter(ctx, req, id, step)
		}
		err = serr
		if ue := (*UnreplicatedError)(nil); errors.As(err, &ue) && ctx.Err() == nil {
			// The step (a grant or an enqueue) took effect on the
			// primary, but fewer replicas than asked have it: step again
			// with the same request, which gets a grant made to it back
			// and waits for the replicas again, until ctx ends; leave
			// then releases the grant, so none is left held by nobody.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return leasehold.Record{}, s.waitFailed(ctx, req, id, s.translate(ctx, "acquire wait", err))
		}
		code, _ := toInt(res[0])
		var wait time.Duration
		switch {
		case code == 4:
			s.invalidateEpoch()
			if markerChanges++; markerChanges == 3 {
				return leasehold.Record{}, s.waitFailed(ctx, req, id, errors.New("redis acquire wait: the restart marker keeps changing"))
			}
			continue
		case (code == 0 || code == 3) && len(res) == 4:
			token, acq, now := grantReply(res)
			if s.ep.dials.Load() != e.dials {
				if err := s.confirm(ctx, req, token, now); err != nil {
					var he *leasehold.HeldError
					if errors.As(err, &he) {
						continue // undone: held back after a restart; wait on
					}
					return leasehold.Record{}, s.waitFailed(ctx, req, id, err)
				}
			}
			return s.granted(ctx, req, token, acq)
		case code == 1 && len(res) == 5:
			rank, _ := toInt(res[1])
			pttl, _ := toInt(res[2])
			holdMs, _ := toInt(res[3])
			queuedUs, _ = toInt(res[4])
			refreshAt = time.Now().Add(s.liveness / 3)
			wait = s.liveness / 3
			if rank == 0 {
				switch {
				case pttl > 0:
					wait = min(wait, time.Duration(pttl+1)*time.Millisecond)
				case holdMs > 0:
					wait = min(wait, time.Duration(holdMs+1)*time.Millisecond)
				}
			}
		default:
			return leasehold.Record{}, s.waitFailed(ctx, req, id, fmt.Errorf("redis acquire wait: unexpected reply %v", res))
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		for step := false; !step; {
			select {
			case <-ctx.Done():
				return leasehold.Record{}, s.leave(ctx, req, id)
			case <-timer.C:
				step = true
			case m, ok := <-mbox:
				if !ok {
					return leasehold.Record{}, leasehold.ErrClosed
				}
				switch {
				case m.head:
					// Head now (the waiter before it was granted the
					// lease or left): step when the holder's grant
					// expires, or when the refresh is due.
					// Since Go 1.23 a reset timer delivers nothing stale.
					timer.Reset(max(0, min(time.Until(refreshAt), time.Duration(m.headMs+1)*time.Millisecond)))
				case !m.grant:
					timer.Stop()
					step = true
				case m.acqUs < queuedUs:
					s.qstats.staleGrants.Add(1)
				default:
					rec, err := s.grantMessage(ctx, req, m)
					if err == nil || !errors.As(err, new(*leasehold.HeldError)) {
						return rec, err
					}
					// Undone: made under facts a restart had changed; wait on.
					timer.Stop()
					step = true
				}
			}
		}
	}
}

// waiterID is the id of req's queue entry: derived from its owner and
// request id, so that a retry of the request (after an error, from any
// process) finds its entry and keeps its place, and a caller that gives
// up can remove it (AcquireWait with an ended ctx). Owners and request
// ids have no NUL.
func waiterID(req leasehold.AcquireRequest) string {
	h := sha256.Sum256([]byte(req.Owner + "\x00" + req.RequestID))
	return hex.EncodeToString(h[:8])
}

// grantMessage takes a grant published to this waiter. The grant was made
// with the granting client's view of restarts; if this store has dialled
// since its own check (as it must have if Redis restarted since), it
// checks again and undoes a grant that fell inside a hold-back or below a
// floor (reported as a HeldError: the waiter waits on).
func (s *Store) grantMessage(ctx context.Context, req leasehold.AcquireRequest, m waitMsg) (leasehold.Record, error) {
	e, err := s.epoch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return leasehold.Record{}, s.leave(ctx, req, "")
		}
		return leasehold.Record{}, err
	}
	if m.nowMs < e.holdUntil || int64(m.token) < e.floor {
		if err := s.confirm(ctx, req, m.token, m.nowMs); err != nil {
			return leasehold.Record{}, err
		}
	}
	return s.granted(ctx, req, m.token, m.acqUs)
}

// granted returns a grant to the waiter, or releases it if ctx ended
// meanwhile (the caller has given up).
func (s *Store) granted(ctx context.Context, req leasehold.AcquireRequest, token uint64, acqUs int64) (leasehold.Record, error) {
	if err := ctx.Err(); err != nil {
		storekit.AfterEnd(ctx, 2*time.Second, func(rctx context.Context) { _ = s.Release(rctx, req.Name, req.Owner, token) })
		return leasehold.Record{}, err
	}
	return grantRecord(req, token, acqUs), nil
}

// grantReply reads a grant from the acquire and wait scripts' reply
// {code, token, acquired (Unix µs), now (Unix ms)}.
func grantReply(res []any) (token uint64, acqUs, nowMs int64) {
	token, _ = strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
	acqUs, _ = toInt(res[2])
	nowMs, _ = toInt(res[3])
	return token, acqUs, nowMs
}

// grantRecord is the Record of a new grant of req, made at acqUs (Unix
// µs).
func grantRecord(req leasehold.AcquireRequest, token uint64, acqUs int64) leasehold.Record {
	return leasehold.Record{
		Name: req.Name, Owner: req.Owner, Token: token, Data: bytes.Clone(req.Data),
		TTL: req.TTL, Remaining: req.TTL, Acquired: time.UnixMicro(acqUs),
	}
}

// waitFailed returns err from AcquireWait, removing the waiter's entry
// first if ctx ended (otherwise the entry expires with its liveness, and a
// grant made to it meanwhile goes to this request's retry by request id).
func (s *Store) waitFailed(ctx context.Context, req leasehold.AcquireRequest, id string, err error) error {
	if ctx.Err() != nil || storekit.DeadlinePassed(ctx) {
		return s.leave(ctx, req, id)
	}
	return err
}

// leave removes the waiter's entry, or releases the grant made to this
// request if one raced with the end of ctx, and returns ctx's error.
func (s *Store) leave(ctx context.Context, req leasehold.AcquireRequest, id string) error {
	return s.leaveAfter(ctx, req, id, nil)
}

// leaveAfter is leave once step (when not nil) is closed: a wait step still
// in flight when ctx ended, which may yet enqueue the request or grant it
// the lease. The caller is held up no longer than leave holds it.
func (s *Store) leaveAfter(ctx context.Context, req leasehold.AcquireRequest, id string, step <-chan struct{}) error {
	limit := 2 * time.Second
	if step != nil {
		limit += stepTimeout
	}
	storekit.AfterEnd(ctx, limit, func(rctx context.Context) {
		if step != nil {
			select {
			case <-step:
			case <-rctx.Done():
				return
			}
		}
		e, err := s.epoch(rctx)
		if err == nil {
			_ = s.run(rctx, lua.leave, s.nameKeys(req.Name), s.epochArgs(e, req.Name, req.Owner, req.RequestID, id)...).Err()
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded // passed by the clock; ctx's timer has not run yet
}
