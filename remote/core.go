package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

// The client core: what a store does for its caller whatever the protocol
// — validation, closing, holder secrets, request ids, the holder's side of
// acquire, renew and release, waiting in the server's queue (long-polls,
// giving up, a grant that races with the give-up), sessions — written once
// over a transport, which encodes one request, sends it and decodes its
// reply into the shared shapes and errors. HTTPStore (http_transport.go)
// and RESPStore (resp_transport.go) are the two transports.

// transport is one protocol's exchange of single requests with a server.
// Its errors are the package's: leasehold's errors, *ProblemError or
// *RESPError, leasehold.ErrClosed once the store is closed, ctx's error
// (possibly wrapped) when ctx ends first.
type transport interface {
	// sendAcquire sends one acquire of req attached to session ("" for
	// none): wait 0 tries once; wait > 0 waits up to that long in the
	// server's queue. If ctx ends before the reply, a transport that still
	// reads it (see waitPolicy.cancelLosesReply) calls late, if set, on a
	// goroutine of its own, with the grant the reply brought (nil error) or
	// with the error that says none came.
	sendAcquire(ctx context.Context, req *leasehold.AcquireRequest, session string, wait time.Duration, late func(grant, error)) (grant, error)
	// sendPermit is sendAcquire of one of the n permits of semaphore sem
	// (req.Name is ignored); the grant names the permit.
	sendPermit(ctx context.Context, sem string, n int, req *leasehold.AcquireRequest, session string, wait time.Duration, late func(grant, error)) (grant, error)
	// sendGiveUp gives up the wait of req's request id (an acquire with
	// give-up set): the server drops the place it keeps for it, releases
	// the grant that request holds and answers with it; it never grants
	// (a free lease is ErrNotFound, another's a *leasehold.HeldError).
	sendGiveUp(ctx context.Context, req *leasehold.AcquireRequest) (grant, error)
	// sendHolder sends a renew of the grant for ttl, or (ttl 0) its
	// release, with the grant's secret unless it is "".
	sendHolder(ctx context.Context, name, owner string, token uint64, ttl time.Duration, secret string) error
	// sendLease asks for the named lease's record (Get), or with force
	// frees it and returns the grant it ended (ForceRelease).
	sendLease(ctx context.Context, name string, force bool) (leasehold.Record, error)
	// sendList reads the leases under prefix, page by page.
	sendList(ctx context.Context, prefix string) ([]leasehold.Record, error)
	// sendReady asks whether the server can serve.
	sendReady(ctx context.Context) error
	// sendOpenSession opens a session of ttl and returns its id.
	sendOpenSession(ctx context.Context, ttl time.Duration) (string, error)
	// sendKeepalive keeps the session alive; sendCloseSession ends it.
	sendKeepalive(ctx context.Context, id string) error
	sendCloseSession(ctx context.Context, id string) error
}

// grant is an acquire's answer: the record and its secret (holder proof),
// "" if the server gives none.
type grant struct {
	rec    leasehold.Record
	secret string
}

// waitPolicy is how AcquireWait waits over a transport. Its fields name
// what the two transports do differently.
type waitPolicy struct {
	// chunk is the longest wait of one request (the server's long-poll).
	chunk time.Duration
	// releaseEnded: a grant that is answered although ctx ended is
	// released, and ctx's error returned (RESP, which still reads the
	// reply a moment after ctx ends); else the grant is returned (HTTP).
	releaseEnded bool
	// cancelLosesReply: the end of ctx cancels the request and loses its
	// reply, so after an error with ctx ended the core reclaims a grant
	// that may have been made (HTTP); else the transport reports a late
	// reply, or its absence, through sendAcquire's late (RESP).
	cancelLosesReply bool
	// retry, if set, reports an error after which waiting goes on (a
	// server shutting down or not ready) and the server's Retry-After.
	retry func(err error) (retryAfter time.Duration, ok bool)
}

// core is the client core of a store: its transport, its lifetime and the
// secrets of the grants acquired through it. A store embeds it and sets
// it up with init.
type core struct {
	t    transport
	wait waitPolicy

	ctx    context.Context // ends at Close: ends the sessions' keepalives, watches and clean-ups
	cancel context.CancelFunc
	closed atomic.Bool

	// secrets are the holder proofs of the grants acquired here (its
	// sessions' stores included).
	secrets *holderSecrets

	// polls, if set, is told of each request of a wait (ObservePolls).
	polls atomic.Pointer[PollObserver]

	// giveUps are the give-ups of waits running in the background, which
	// Close awaits (awaitGiveUps).
	giveUps tracker
}

// tracker counts work running in the background, so that Close can await
// it (bounded).
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

// run runs f on a goroutine of its own, counted until it returns.
func (t *tracker) run(f func()) {
	t.add()
	go func() {
		defer t.done()
		f()
	}()
}

func (t *tracker) add() {
	t.mu.Lock()
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
	t.mu.Unlock()
}

// wait waits until nothing runs, or for d at most.
func (t *tracker) wait(d time.Duration) {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	zero := t.zero
	t.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-zero:
	case <-timer.C:
	}
}

// awaitGiveUps is the first step of a store's Close: the give-ups of
// waits whose callers gave up, running in the background, are awaited
// (for reclaimTimeout at most), so that a process that closes its store
// before it exits has sent them. Without this, "leasehold run -w" exited
// with its place still kept in the server's queue, and a release then
// granted the lease to the waiter that had gone (issue 27's red team, #5).
func (c *core) awaitGiveUps() { c.giveUps.wait(reclaimTimeout) }

// PollObserver is told of one request of a wait (a long-poll, or a try:
// wait 0) as it is sent, with how long the server is asked to wait at
// most; the func it returns is called with the request's outcome when it
// ends (nil: a grant; an error matching leasehold.ErrHeld: the poll ran
// out or the try was refused, the lease still held; else the request's
// error). It must not block.
type PollObserver func(wait time.Duration) (done func(err error))

// ObservePolls has f told of each request of AcquireWait (and of a
// semaphore's wait) and of each TryAcquire on this connection, from now
// on; nil stops it. The tries count because a Client's wait starts with
// one: a server stopped just before it went unreported (CI, 2026-12-05:
// the try waited out the store's 10-minute timeout in silence). A
// request that has not ended well past the wait it asked for shows a
// server that does not answer (stopped, hung), which the wait itself
// cannot tell from a lease held all along: "leasehold run" says so while
// it waits (issue 29's red team, #3).
func (c *core) ObservePolls(f PollObserver) {
	if f == nil {
		c.polls.Store(nil)
		return
	}
	c.polls.Store(&f)
}

// observe tells the poll observer, if any, of a request that asks the
// server to wait at most wait; the func it returns takes the request's
// outcome.
func (c *core) observe(wait time.Duration) (done func(error)) {
	if f := c.polls.Load(); f != nil {
		return (*f)(wait)
	}
	return func(error) {}
}

func (c *core) init(t transport, wait waitPolicy) {
	c.t, c.wait = t, wait
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.secrets = newHolderSecrets()
}

func (c *core) check() error {
	if c.closed.Load() {
		return leasehold.ErrClosed
	}
	return nil
}

// sessionID is k's id, or "" for nil (no session).
func (k *keeper) sessionID() string {
	if k == nil {
		return ""
	}
	return k.id
}

// keepSecret keeps the secret of a grant made through session k (or none).
func (c *core) keepSecret(g grant, k *keeper) {
	if k == nil {
		c.secrets.put(g.rec, g.secret, "")
		return
	}
	c.secrets.put(g.rec, g.secret, k.id)
	if k.Err() != nil {
		c.secrets.dropSession(k.id) // ended meanwhile: its grants are freed
	}
}

// tryAcquire makes one attempt, attached to session k (nil: none).
func (c *core) tryAcquire(ctx context.Context, req leasehold.AcquireRequest, k *keeper) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := c.check(); err != nil {
		return leasehold.Record{}, err
	}
	polled := c.observe(0)
	g, err := c.t.sendAcquire(ctx, &req, k.sessionID(), 0, nil)
	polled(err)
	if err != nil {
		return leasehold.Record{}, err
	}
	c.keepSecret(g, k)
	return g.rec, nil
}

// acquireWait waits in the server's queue for the lease, attached to
// session k (nil: none), in requests of up to wait.chunk with the same
// request id (made here if req has none, so that its repeated requests
// never wait behind their own grant), until it is granted or ctx ends.
// "Held" (a chunk ran out) asks again; other errors are returned at once,
// but those wait.retry accepts, which ask again after a pause. When ctx
// ends, a grant that raced with the end is released: one answered (see
// wait.releaseEnded), one answered too late, and one whose reply was lost,
// which is looked for by request id.
//
// Called with ctx already ended and a request id, it gives up that
// request's wait at once (giveUpWait, bounded by reclaimTimeout) and
// returns ctx's error: the clean-up leasehold.Client asks for when it
// gives up after a wait that failed.
func (c *core) acquireWait(ctx context.Context, req leasehold.AcquireRequest, k *keeper) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if ctx.Err() != nil && req.RequestID != "" {
		if err := c.check(); err != nil {
			return leasehold.Record{}, err
		}
		c.giveUpWait(req, k)
		return leasehold.Record{}, ctx.Err()
	}
	if req.RequestID == "" {
		req.RequestID = randid.Hex(12)
	}
	return c.waitLoop(ctx, req, k, c.t.sendAcquire, func() { c.giveUpWait(req, k) }, nil, time.Time{})
}

// giveUpWait gives up the wait of req (its request id) whose caller has
// gone: one give-up (sendGiveUp), which the server answers by dropping the
// place it keeps between polls and releasing the grant the place got
// meanwhile, if any; then it looks for a grant whose reply was lost, at
// reclaimLooks: the server may grant the wait after the caller gave up,
// until it learns that the request's connection closed (a holder's
// release that arrives first hands the lease to the waiter that left); if
// the lease is held by req's owner, another give-up releases that grant
// if it is the request's. A give-up never takes a lease: before it, a try (wait 0) with the request
// id did, when the lease was free by then, for a caller that had gone
// (CI run 79: four grants nobody asked for, one after the bound the
// conformance suite allows). Bounded by reclaimTimeout.
func (c *core) giveUpWait(req leasehold.AcquireRequest, k *keeper) {
	ctx, cancel := context.WithTimeout(c.ctx, reclaimTimeout)
	defer cancel()
	if c.check() != nil {
		return
	}
	c.takeBack(req)(ctx)
	c.reclaimLooks(ctx, c.heldBy(req), c.takeBack(req))
}

// sendFunc is a transport's acquire (sendAcquire, or sendPermit of one
// semaphore).
type sendFunc func(ctx context.Context, req *leasehold.AcquireRequest, session string, wait time.Duration, late func(grant, error)) (grant, error)

// waitLoop is acquireWait's loop over send; reclaim gives up the wait of
// a caller that has gone (acquireWait's gives up the place the server
// keeps, and releases a grant whose reply was lost), run in the
// background, which the store's Close awaits; held, if
// set, is told each "held" answer. A non-zero until ends the wait then,
// with errWaitRanOut: the server is asked to wait no longer than that,
// and its answer is read (not cut off by a deadline of ctx).
func (c *core) waitLoop(ctx context.Context, req leasehold.AcquireRequest, k *keeper, send sendFunc, reclaim func(), held func(error), until time.Time) (leasehold.Record, error) {
	// late undoes, in the background, what a request did after the caller
	// gave up: a grant is released; without a reply, one is looked for by
	// request id and released.
	late := func(g grant, err error) {
		if err == nil {
			c.keepSecret(g, k)
			c.releaseAbandoned(g.rec)
			return
		}
		reclaim()
	}
	// The wait also ends when the store closes: its request is cancelled
	// (the server drops the waiter), and it returns ErrClosed. Without
	// this, a closed HTTP store's long-poll went on and could be granted
	// a lease that nobody could renew or release.
	caller := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.ctx, func() { cancel(leasehold.ErrClosed) })
	defer stop()
	ended := func() error {
		if err := caller.Err(); err != nil {
			return err
		}
		return context.Cause(ctx)
	}
	// gaveUp: the caller gave up after a request of this wait was sent:
	// the server may keep its place (or have granted it), so the wait is
	// given up in the background.
	sent := false
	gaveUp := func() {
		if sent && caller.Err() != nil {
			c.giveUps.run(reclaim)
		}
	}
	var bo *backoff.Backoff
	for {
		if err := c.check(); err != nil {
			return leasehold.Record{}, err
		}
		if ctx.Err() != nil {
			gaveUp()
			return leasehold.Record{}, ended()
		}
		wait := c.wait.chunk
		if dl, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(dl)), time.Millisecond)
		}
		if !until.IsZero() {
			left := time.Until(until)
			if left <= 0 {
				return leasehold.Record{}, errWaitRanOut
			}
			wait = max(min(wait, left), time.Millisecond)
		}
		polled := c.observe(wait)
		// lateDone is closed when this request's late has run.
		lateDone := make(chan struct{})
		var lateOnce sync.Once
		reqLate := func(g grant, err error) {
			defer lateOnce.Do(func() { close(lateDone) })
			late(g, err)
		}
		sent = true
		g, err := send(ctx, &req, k.sessionID(), wait, reqLate)
		polled(err)
		if err == nil {
			c.keepSecret(g, k)
		}
		if held != nil && errors.Is(err, leasehold.ErrHeld) {
			held(err)
		}
		switch {
		case err == nil && ctx.Err() != nil && (c.wait.releaseEnded || caller.Err() == nil):
			// Granted as ctx ended (or the store closed): the caller will
			// never use it.
			storekit.AfterEnd(ctx, 5*time.Second, func(rctx context.Context) { _ = c.release(rctx, g.rec.Name, g.rec.Owner, g.rec.Token) })
			return leasehold.Record{}, ended()
		case err == nil:
			return g.rec, nil
		case c.closed.Load():
			// The store closed under the request (RESP closes its
			// connections before the core's context ends): the server
			// dropped the waiter with the connection.
			return leasehold.Record{}, leasehold.ErrClosed
		case ctx.Err() != nil:
			switch {
			case c.wait.cancelLosesReply || errors.Is(err, leasehold.ErrHeld):
				// The reply is lost, or it came ("held": the poll ran out
				// as ctx ended, and the server keeps the place): give the
				// wait up, in the background (a hung server does not
				// stretch the caller's time).
				gaveUp()
			default:
				// Without a reply yet, the transport's late finishes the
				// work; Close awaits it.
				c.giveUps.run(func() {
					t := time.NewTimer(reclaimTimeout)
					defer t.Stop()
					select {
					case <-lateDone:
					case <-t.C:
					}
				})
			}
			return leasehold.Record{}, ended()
		case errors.Is(err, leasehold.ErrHeld):
			continue // this chunk of waiting ran out: ask again
		}
		if c.wait.retry != nil {
			if retryAfter, ok := c.wait.retry(err); ok {
				// The server is shutting down or not ready: wait a little
				// (a quarter of its Retry-After, and a backoff from 50ms
				// that spreads the waiters) and ask again (another
				// instance, or the restarted one).
				if bo == nil {
					bo = backoff.New(100*time.Millisecond, 2*time.Second)
				}
				if backoff.Sleep(ctx, retryAfter/4+bo.Next()) != nil {
					gaveUp()
					return leasehold.Record{}, ended()
				}
				continue
			}
		}
		return leasehold.Record{}, err
	}
}

// releaseAbandoned releases a grant whose caller had given up, within 5 s.
func (c *core) releaseAbandoned(rec leasehold.Record) {
	rctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	_ = c.release(rctx, rec.Name, rec.Owner, rec.Token)
}

// heldBy is reclaimLooks' seen of a lease's wait: the lease is held by
// req's owner.
func (c *core) heldBy(req leasehold.AcquireRequest) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		rec, err := c.lease(ctx, req.Name, false)
		if errors.Is(err, leasehold.ErrNotFound) {
			return false, nil
		}
		return err == nil && rec.Owner == req.Owner, err
	}
}

// takeBack is a give-up of req's wait (sendGiveUp): the server releases
// the grant the request holds, if any, itself.
func (c *core) takeBack(req leasehold.AcquireRequest) func(context.Context) {
	return func(ctx context.Context) {
		if err := c.check(); err != nil {
			return
		}
		_, _ = c.t.sendGiveUp(ctx, &req)
	}
}

// reclaimLooks runs seen at each of reclaimLooks from now until it
// reports a grant that may be the request's (then it runs take, once) or
// fails, or ctx ends. take is a try with the request's id, which the
// server answers with the request's grant if it made one: sent only when
// seen, so that it does not take a lease or permit freed meanwhile.
func (c *core) reclaimLooks(ctx context.Context, seen func(context.Context) (bool, error), take func(context.Context)) {
	start := time.Now()
	for _, at := range reclaimLooks {
		if d := time.Until(start.Add(at)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		ok, err := seen(ctx)
		if err != nil {
			return
		}
		if ok {
			take(ctx)
			return
		}
	}
}

// reclaimLooks are when giveUpWait looks for a raced grant, from the
// give-up: on a quiet machine all within a second of the wait's return.
var reclaimLooks = []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond}

// reclaimTimeout bounds a give-up, its looks and releases included: a
// grant that raced with a wait's end is freed within it (or by its TTL),
// however slowly the server answers; the conformance runs allow that long
// (storetest's WaitCleanup).
const reclaimTimeout = 2 * time.Second

// errWaitRanOut ends a waitLoop whose until has passed.
var errWaitRanOut = errors.New("the wait ran out")

// renew renews a grant, sending its secret if this store has it.
func (c *core) renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := storekit.ValidateTTL(ttl); err != nil {
		return err
	}
	return c.holder(ctx, name, owner, token, ttl)
}

// release releases a grant, sending its secret if this store has it.
func (c *core) release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	return c.holder(ctx, name, owner, token, 0)
}

// holder sends the grant's renew (ttl > 0) or release (ttl 0), with the
// grant's secret if this store has it, and settles the secret by the
// answer.
func (c *core) holder(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := c.check(); err != nil {
		return err
	}
	err := c.t.sendHolder(ctx, name, owner, token, ttl, c.secrets.get(name, owner, token))
	c.secrets.settle(name, owner, token, ttl, err)
	return err
}

// lease returns the named lease's record, or with force frees the lease
// and returns the grant it ended.
func (c *core) lease(ctx context.Context, name string, force bool) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	if err := c.check(); err != nil {
		return leasehold.Record{}, err
	}
	return c.t.sendLease(ctx, name, force)
}

func (c *core) list(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.t.sendList(ctx, prefix)
}

func (c *core) ready(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.t.sendReady(ctx)
}

// openSession opens a session of ttl on the server and keeps it alive in
// the background (every TTL/3, see keeper.run) until its close (halt) or
// the store's Close, which ends it as lost. gone reports a keepalive's
// error that ends the session at once. The secrets of the session's
// grants are forgotten when it ends.
func (c *core) openSession(ctx context.Context, ttl time.Duration, opts []SessionOption, gone func(error) bool) (*keeper, error) {
	cfg, err := sessionOptions(ttl, opts)
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	t0, b0 := cfg.clock.Now(), cfg.clock.Boot()
	id, err := c.t.sendOpenSession(ctx, ttl)
	if err != nil {
		return nil, err
	}
	k := newKeeper(id, ttl, cfg, t0, b0)
	k.onEnd = func() { c.secrets.dropSession(id) }
	kctx, stop := context.WithCancel(c.ctx)
	k.stop = stop
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.run(kctx, t0, func(ctx context.Context) error { return c.t.sendKeepalive(ctx, id) }, gone)
		if !k.closing.Load() {
			// The store was closed: nothing keeps the session alive now.
			k.end(fmt.Errorf("session %s: %w: its store was closed", id, leasehold.ErrLost))
		}
	}()
	return k, nil
}
