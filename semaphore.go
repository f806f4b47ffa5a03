package leasehold

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/check"
)

// ErrNoPermit reports that every permit of a semaphore is held.
var ErrNoPermit = errors.New("all permits are held")

// ErrMismatch is matched by every *MismatchError.
var ErrMismatch = errors.New("name in use with another permit count, or as a lock and a semaphore")

// MismatchError reports a semaphore asked for with another permit count
// than a live holder recorded, or a name used both as a plain lease (a
// lock) and as a semaphore. Nothing is held when it is returned: a permit
// or lease taken before the check was released. It matches ErrMismatch
// and ErrInvalid (it is not retried).
type MismatchError struct {
	Name   string // the semaphore's (or lock's) name
	Reason string
}

func (e *MismatchError) Error() string { return fmt.Sprintf("%s: %s", e.Name, e.Reason) }

// Is makes a *MismatchError match ErrMismatch and ErrInvalid.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch || target == ErrInvalid }

// permitsPrefix starts the line that records a permit's N in its data.
const permitsPrefix = "leasehold-permits="

// permitData is the data a permit of a semaphore of n permits is
// acquired with: the line recording n, then the caller's data.
func permitData(n int, data []byte) []byte {
	return append([]byte(permitsPrefix+strconv.Itoa(n)+"\n"), data...)
}

// PermitCount returns the permit count recorded in a permit's lease data,
// the caller's data after it, and whether one was recorded.
func PermitCount(data []byte) (n int, rest []byte, ok bool) {
	s, ok := strings.CutPrefix(string(data), permitsPrefix)
	if !ok {
		return 0, data, false
	}
	num, _, found := strings.Cut(s, "\n")
	n, err := strconv.Atoi(num)
	if !found || err != nil || n < 1 || n > MaxPermits || strconv.Itoa(n) != num {
		return 0, data, false
	}
	return n, data[len(permitsPrefix)+len(num)+1:], true
}

// MaxPermits is the largest N a Semaphore accepts.
const MaxPermits = 1024

// permitSep separates a semaphore's name from a permit's index in the
// permit's lease name: NAME/permit/INDEX.
const permitSep = "/permit/"

// Semaphore hands out at most N permits of one name at once. Each permit is
// a lease of its own, named NAME/permit/I for I in [0, N), with its own
// fencing token, keepalive and loss signal: a crashed holder's permit comes
// back by itself when its lease expires, so permits never leak.
//
// N is recorded with each permit: the permit's lease data starts with the
// line "leasehold-permits=N" (Holders and Lease.Data leave it out). A
// Semaphore that finds a live permit recorded with another N, or NAME held
// as a plain lease (a lock), does not keep the permit it took: it releases
// it and returns a *MismatchError. Every user of a name must give the same
// N; to change N, wait until no permit is held. The check is made after
// each grant (write, then read), so that of two users who acquire at once
// with different N, or one a permit and one the lock NAME, at least one is
// refused (the lock side checks when "leasehold run" takes it; a plain
// Client.Acquire does not look for permits). Permits taken by clients that
// do not record N (older versions) are not checked.
// A Semaphore is safe for concurrent use.
type Semaphore struct {
	c    *Client
	name string
	n    int
}

// Semaphore returns the semaphore NAME with n permits. The name must leave
// room for the permit suffix within MaxNameLen.
func (c *Client) Semaphore(name string, n int) (*Semaphore, error) {
	if n < 1 || n > MaxPermits {
		return nil, invalid("permits", "%d must be in [1, %d]", n, MaxPermits)
	}
	if err := asInvalid(check.Name(name)); err != nil {
		return nil, err
	}
	if check.Name(permitName(name, n-1)) != nil {
		return nil, invalid("name", "%q is too long to carry a permit suffix", name)
	}
	return &Semaphore{c: c, name: name, n: n}, nil
}

func permitName(name string, i int) string { return name + permitSep + strconv.Itoa(i) }

// PermitIndex returns the permit index encoded in a permit lease's name,
// and whether the name is a permit of the semaphore name.
func PermitIndex(semaphore, leaseName string) (int, bool) {
	rest, ok := strings.CutPrefix(leaseName, semaphore+permitSep)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == rest
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns N.
func (s *Semaphore) Permits() int { return s.n }

// Holders returns the live permits (of any index, also those at or above
// N), sorted by lease name, with the record of N left out of their data.
func (s *Semaphore) Holders(ctx context.Context) ([]Record, error) {
	recs, err := s.c.store.List(ctx, s.name+permitSep)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if _, ok := PermitIndex(s.name, r.Name); ok {
			_, r.Data, _ = PermitCount(r.Data)
			out = append(out, r)
		}
	}
	return out, nil
}

// TryAcquire takes one free permit. When all are held it returns an error
// matching ErrNoPermit that also wraps the *HeldError of the permit that
// expires first (errors.As). The lease it returns is the permit's (Name is
// NAME/permit/I).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	cfg, err := s.config(opts)
	if err != nil {
		return nil, err
	}
	if pw, ok := s.c.store.(PermitWaiter); ok {
		l, err := s.fromStore(ctx, pw, cfg, 0)
		if !errors.Is(err, errors.ErrUnsupported) {
			return l, err
		}
	}
	l, _, err := s.try(ctx, cfg)
	return l, err
}

// config reads opts as Client.Acquire does and puts the record of N in
// front of the data.
func (s *Semaphore) config(opts []AcquireOption) (acquireConfig, error) {
	_, cfg, err := s.c.config(permitName(s.name, 0), opts)
	if err != nil {
		return cfg, err
	}
	data := permitData(s.n, cfg.data)
	if len(data) > MaxDataLen {
		return cfg, invalid("data", "%d bytes is too long for a permit: at most %d, since the permit count takes %d", len(cfg.data), MaxDataLen-(len(data)-len(cfg.data)), len(data)-len(cfg.data))
	}
	cfg.data = data
	return cfg, nil
}

// verify checks, once the permit l was granted, that no live permit of
// the semaphore records another N and that NAME is not held as a plain
// lease; on a mismatch (or an error reading) it releases l. Checked after
// the grant, so that of two conflicting users at least one sees the other.
func (s *Semaphore) verify(ctx context.Context, l *Lease) (*Lease, error) {
	err := s.mismatch(ctx)
	if err == nil {
		_, l.data, _ = PermitCount(l.data)
		return l, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = l.Release(rctx)
	return nil, err
}

// mismatch reads NAME and the semaphore's permits and returns a
// *MismatchError if they conflict with s.
func (s *Semaphore) mismatch(ctx context.Context) error {
	rec, err := s.c.store.Get(ctx, s.name)
	switch {
	case err == nil:
		return &MismatchError{Name: s.name, Reason: fmt.Sprintf(
			"held as a plain lease (a lock) by %s (token %d), so it cannot be a semaphore too; use another name for one of them", rec.Owner, rec.Token)}
	case !errors.Is(err, ErrNotFound):
		return err
	}
	recs, err := s.c.store.List(ctx, s.name+permitSep)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if _, ok := PermitIndex(s.name, r.Name); !ok {
			continue
		}
		if n, _, ok := PermitCount(r.Data); ok && n != s.n {
			return &MismatchError{Name: s.name, Reason: fmt.Sprintf(
				"a semaphore of %d permits (recorded by %s, holder of %s), not %d; every user must give the same count (to change it, wait until no permit is held)", n, r.Owner, r.Name, s.n)}
		}
	}
	return nil
}

// permitWaitForever is the wait of Acquire's AcquirePermit: until ctx
// ends.
const permitWaitForever = time.Duration(1<<63 - 1)

// fromStore takes a permit with the store's AcquirePermit (waiting up to
// wait in its queue). A grant made during a long wait is renewed at once,
// to know its expiry afresh (as Client.Acquire does with a Queuer).
func (s *Semaphore) fromStore(ctx context.Context, pw PermitWaiter, cfg acquireConfig, wait time.Duration) (*Lease, error) {
	req := AcquireRequest{Owner: s.c.owner, RequestID: cfg.requestID, TTL: cfg.ttl, Data: cfg.data}
	t0, b0 := s.c.clock.Now(), s.c.clock.Boot()
	rec, err := pw.AcquirePermit(ctx, s.name, s.n, req, wait)
	if err != nil {
		return nil, err
	}
	if wait > 0 && s.c.clock.Now().Sub(t0) > req.TTL/3 {
		t0, b0 = s.c.clock.Now(), s.c.clock.Boot()
		if err := s.c.store.Renew(ctx, rec.Name, rec.Owner, rec.Token, req.TTL); err != nil {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.c.store.Release(rctx, rec.Name, rec.Owner, rec.Token)
			cancel()
			return nil, err
		}
	}
	return s.verify(ctx, s.c.newLease(rec, req.RequestID, t0, b0, cfg.keepalive))
}

// acquireFromStore is Acquire on a store that queues a semaphore's
// waiters itself (PermitWaiter): one try, so that OnWait learns the
// holder that expires first, then a wait in the store's queue, repeated
// with the same request id after transient errors. ok is false when the
// store's server lacks the operation (nothing was changed).
func (s *Semaphore) acquireFromStore(ctx context.Context, pw PermitWaiter, cfg acquireConfig) (l *Lease, ok bool, err error) {
	l, err = s.fromStore(ctx, pw, cfg, 0)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, false, nil
	}
	bo := backoff.New(s.c.backoffMin, s.c.backoffMax)
	for err != nil {
		var held *HeldError
		switch {
		case ctx.Err() != nil:
			return nil, true, ctx.Err()
		case errors.As(err, &held):
			if cfg.onWait != nil {
				cfg.onWait(held)
			}
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
			return nil, true, err
		default:
			if cfg.onError != nil {
				cfg.onError(err)
			}
			if backoff.Sleep(ctx, bo.Next()) != nil {
				return nil, true, ctx.Err()
			}
		}
		l, err = s.fromStore(ctx, pw, cfg, permitWaitForever)
	}
	l, err = keepUnlessDone(ctx, l)
	return l, true, err
}

// try makes one pass over the free permits; on ErrNoPermit it also returns
// the holder whose permit expires first.
func (s *Semaphore) try(ctx context.Context, cfg acquireConfig) (*Lease, *HeldError, error) {
	holders, err := s.Holders(ctx)
	if err != nil {
		return nil, nil, err
	}
	held := make(map[int]bool, len(holders))
	var soonest *HeldError
	note := func(h *HeldError) {
		if soonest == nil || h.Remaining < soonest.Remaining {
			soonest = h
		}
	}
	// Permits this client holds are tried first, with the request id: the
	// store gives the same grant back when it is this acquire's (a retry
	// after a lost answer, the caller's or Acquire's own), so that one
	// acquire never holds two permits; another acquire's is refused.
	var mine []int
	for _, h := range holders {
		i, _ := PermitIndex(s.name, h.Name)
		held[i] = true
		if i < s.n {
			note(&HeldError{Name: h.Name, Owner: h.Owner, Token: h.Token, Remaining: h.Remaining, Acquired: h.Acquired})
			if h.Owner == s.c.owner {
				mine = append(mine, i)
			}
		}
	}
	free := make([]int, 0, s.n)
	for i := 0; i < s.n; i++ {
		if !held[i] {
			free = append(free, i)
		}
	}
	rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	for _, i := range append(mine, free...) {
		req := AcquireRequest{Name: permitName(s.name, i), Owner: s.c.owner, RequestID: cfg.requestID, TTL: cfg.ttl, Data: cfg.data}
		l, err := s.c.try(ctx, req, cfg)
		if err == nil {
			l, err = s.verify(ctx, l)
			return l, nil, err
		}
		var he *HeldError
		if !errors.As(err, &he) {
			return nil, nil, err
		}
		note(he)
	}
	if soonest == nil { // every permit at or above N: none of ours expires first
		soonest = &HeldError{Name: s.name, Remaining: s.c.backoffMax}
	}
	return nil, soonest, fmt.Errorf("semaphore %q (%d permits): %w; the next to expire: %w", s.name, s.n, ErrNoPermit, soonest)
}

// Acquire takes one permit, waiting until one is free or ctx ends; OnWait
// is called with the permit that expires first each time all are held.
// On a store that queues a semaphore's waiters itself (PermitWaiter: the
// leasehold server) it waits in that queue, in arrival order, and the
// server counts and lists it as a waiter. Elsewhere it waits on the
// store's push notifications for every permit where the store has them
// (and N is at most 64), else polls with jittered backoff; it never sleeps
// past the earliest expiry among the holders.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	cfg, err := s.config(opts)
	if err != nil {
		return nil, err
	}
	if pw, ok := s.c.store.(PermitWaiter); ok {
		if l, ok, err := s.acquireFromStore(ctx, pw, cfg); ok {
			return l, err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notify := s.watchAll(wctx)
	bo := backoff.New(s.c.backoffMin, s.c.backoffMax)
	for {
		l, soonest, err := s.try(ctx, cfg)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var held *HeldError
		if errors.Is(err, ErrNoPermit) {
			held = soonest
		}
		if err := s.c.pause(ctx, cfg, bo, notify, held, err); err != nil {
			return nil, err
		}
	}
}

// watchAll merges the store's notifications for every permit, or returns
// nil when the store cannot push or N is large.
func (s *Semaphore) watchAll(ctx context.Context) <-chan struct{} {
	w, ok := s.c.store.(Watcher)
	if !ok || s.n > 64 {
		return nil
	}
	out := make(chan struct{}, 1)
	for i := 0; i < s.n; i++ {
		ch, err := w.Watch(ctx, permitName(s.name, i))
		if err != nil {
			return nil
		}
		go func() {
			for range ch {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}()
	}
	return out
}
