package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

var _ leasehold.Queuer = (*Store)(nil)

// DefaultWaiterWindow is the liveness window of a queued waiter (and of a
// Watch interest) unless WithWaiterWindow sets another.
const DefaultWaiterWindow = 5 * time.Second

// Bounds of WithWaiterWindow.
const (
	MinWaiterWindow = 300 * time.Millisecond
	MaxWaiterWindow = 10 * time.Minute
)

// WithWaiterWindow sets how long a queued waiter's entry (AcquireWait)
// stays live without news from its waiter, by the server's clock. A waiter
// renews it every third of the window while it waits, so a waiter that
// crashed, or lost its connection, blocks the queue for at most the window
// and a third (the entries behind it are granted once it lapses, by a
// release or by the next waiter's renewal). The same window
// bounds how long a release keeps notifying a name after the last Watch of
// it ended. Default DefaultWaiterWindow; it must lie within
// [MinWaiterWindow, MaxWaiterWindow], else Open and New return an
// *leasehold.InvalidError.
func WithWaiterWindow(d time.Duration) Option { return func(c *config) { c.window = d } }

// waiterPrefix starts a notification addressed to one waiter: a control
// character, which no lease name has.
const waiterPrefix = "\x01"

// queueHintSQL is the Remaining of the HeldError TryAcquire returns for a
// free lease that waiters are queued for (an interval literal).
const queueHintSQL = "100 milliseconds"

// deadlineMargin: a waiter whose context has a deadline keeps its entry
// live only until this long before it, so that a release rarely grants it
// the lease as it gives up (which would hold the lease for nothing until
// the waiter released it again).
const deadlineMargin = 25 * time.Millisecond

// stepTimeout bounds one call of the wait function (ctx ends it too).
const stepTimeout = 30 * time.Second

// listenWait bounds how long AcquireWait waits for the Store's listener to
// be listening before it first enqueues (a notification sent before would
// be missed, which only delays the waiter until its next renewal).
const listenWait = 2 * time.Second

const (
	waitSQL = `SELECT r_granted, r_token, r_owner, r_expires, r_acquired, r_head, r_now
	FROM %s($1::text, $2::text, $3::text, $4::text, $5::bytea, $6::bigint, $7::bigint)`
	// leaveSQL drops a waiter's entry, and when it was the live head, wakes
	// the next live waiter (a notification that is not a grant), which
	// then learns that it is the head and waits for the holder's expiry.
	// With an empty waiter ($2) it deletes every entry of owner $4 and
	// request id $5 instead (AcquireWait called with an ended context).
	// The statement's reads do not see its own deletions: the next head
	// is looked for among the entries it did not delete.
	leaveSQL = `WITH d AS (
		DELETE FROM %[1]s WHERE name = $1::text
			AND (waiter = $2::text OR ($2::text = '' AND $5::text <> '' AND NOT watch AND owner = $4::text AND request_id = $5::text))
		RETURNING seq
	), f AS (
		SELECT min(seq) AS seq FROM d
	), n AS (
		SELECT q.waiter FROM %[1]s q, f
		WHERE q.name = $1::text AND NOT q.watch AND q.alive_until > now() AND q.seq > f.seq
			AND q.seq NOT IN (SELECT seq FROM d)
			AND NOT EXISTS (SELECT FROM %[1]s a WHERE a.name = $1::text AND NOT a.watch AND a.alive_until > now() AND a.seq < f.seq)
		ORDER BY q.seq LIMIT 1
	)
	SELECT (SELECT count(*) FROM d)::int, (SELECT count(*) FROM (SELECT pg_notify($3::text, chr(1) || n.waiter || ' wake') FROM n) x)::int`
	// mineSQL finds the grant made to a waiter that left.
	mineSQL = `SELECT token FROM %s WHERE name = $1::text AND owner = $2::text AND request_id = $3::text AND held`
	// interestSQL records (or extends) this Store's interest in names, and
	// marks their lease rows queued (queue_schema.go). The lease rows are
	// locked first, in name order (k, then m), and the queue rows after
	// them (the INSERT waits for m), as the functions do: no lock cycle.
	// Every row is locked, marked or not, so that a function that clears
	// queued under the row's lock sees the watch row committed. A name
	// without a lease row gets queued when its row is inserted.
	interestSQL = `WITH k AS (
		SELECT l.name FROM %[2]s l WHERE l.name = ANY($1::text[]) ORDER BY l.name FOR UPDATE
	), m AS (
		UPDATE %[2]s l SET queued = true FROM k WHERE l.name = k.name AND NOT l.queued RETURNING l.name
	)
	INSERT INTO %[1]s AS q (name, waiter, watch, owner, request_id, ttl_us, data, alive_until)
	SELECT n, $2::text, true, '', '', 0, '', clock_timestamp() + $3::bigint * interval '1 microsecond'
	FROM unnest($1::text[]) AS n
	WHERE (SELECT count(*) FROM m) >= 0
	ON CONFLICT (name, waiter) DO UPDATE SET alive_until = excluded.alive_until`
)

// interest records this Store's Watch interest in names (hub.refresh).
func (s *Store) interest(ctx context.Context, names []string) error {
	_, err := s.pool.Exec(ctx, s.q.interest, names, s.id, micros(s.window))
	if s.again(ctx, err) {
		_, err = s.pool.Exec(ctx, s.q.interest, names, s.id, micros(s.window))
	}
	return err
}

// step is the answer of one call of the wait function.
type step struct {
	granted  bool
	token    int64
	owner    string
	expires  time.Time
	acquired time.Time
	head     bool
	now      time.Time
}

// AcquireWait implements leasehold.Queuer: it waits in the name's queue, in
// the queue table, shared by every Store on the table, in the order in
// which the database enqueued the waiters. Each call of the wait function
// (queue_schema.go) grants the lease, or enqueues the waiter, or renews
// its entry; Release grants the lease to the live head directly and
// notifies it alone, with the token, so that the head usually learns its
// grant without another round trip. The waiter calls again every third of
// the waiter window (renewing its entry), and the head also at the
// holder's expiry, so a lost notification or an expired holder only
// delays it. If ctx ends, the waiter's entry is deleted, and a grant that
// raced with the end is released.
func (s *Store) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if s.closed.Load() {
		return leasehold.Record{}, leasehold.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		// The Queuer contract: an earlier call of this owner and request
		// id may have failed on its own (a lost connection) and left its
		// entry, or a grant handed to that entry since.
		if req.RequestID != "" {
			s.leave(ctx, req, "", req.RequestID)
		}
		return leasehold.Record{}, err
	}
	data := req.Data
	if data == nil {
		data = []byte{}
	}
	waiter := "w" + randid.Hex(12)
	rid := req.RequestID
	if rid == "" {
		rid = waiter // identifies the grant made to this waiter
	}
	notes, done, err := s.watch.await(ctx, waiter, listenWait)
	if err != nil {
		return leasehold.Record{}, err
	}
	defer done()
	for {
		sent := time.Now()
		var st step
		var lifeUS int64
		// The call ends with ctx (or after stepTimeout). A call cut in
		// flight may still enqueue the waiter, or commit a grant to it,
		// after the return: on a primary whose synchronous standby is
		// down, a cancelled commit wait leaves the transaction committed
		// locally. So a cut call is settled as a cut acquire is
		// (fence_cut.go): its backend is ended and waited for, then the
		// waiter's entry is deleted and a grant made to it released.
		cctx, cancel := context.WithTimeout(ctx, stepTimeout)
		life := s.window
		if dl, ok := ctx.Deadline(); ok {
			// A release does not hand the lease to a waiter about to give
			// up: it would arrive after the end, held meanwhile, and be
			// released again.
			life = min(life, time.Until(dl)-deadlineMargin)
		}
		lifeUS = micros(max(life, time.Microsecond))
		args := []any{req.Name, waiter, req.Owner, rid, data, micros(req.TTL), lifeUS}
		dest := []any{&st.granted, &st.token, &st.owner, &st.expires, &st.acquired, &st.head, &st.now}
		s.steps.Add(1)
		b, cut, err := s.waitRow(cctx, args, dest)
		if !cut && s.again(cctx, err) {
			b, cut, err = s.waitRow(cctx, args, dest) // a repeated call grants, enqueues or renews the same waiter
		}
		cancel()
		if cut {
			storekit.AfterEnd(ctx, 5*time.Second, func(lctx context.Context) {
				s.fence(lctx, b)
				s.leaveNow(lctx, req, waiter, rid)
			})
			return leasehold.Record{}, s.fail(ctx, err)
		}
		if err != nil {
			s.leave(ctx, req, waiter, rid)
			return leasehold.Record{}, s.fail(ctx, err)
		}
		if !st.granted && ctx.Err() != nil {
			s.leave(ctx, req, waiter, rid)
			return leasehold.Record{}, ctx.Err()
		}
		if st.granted {
			rec := leasehold.Record{
				Name: req.Name, Owner: req.Owner, Token: uint64(st.token), Data: req.Data,
				TTL: req.TTL, Remaining: st.expires.Sub(st.now), Acquired: st.acquired,
			}
			return s.keepUnlessDone(ctx, rec)
		}
		wait := s.window / 3
		if st.head && st.token != 0 {
			wait = min(wait, st.expires.Sub(st.now)+time.Millisecond)
		}
		if gateShut(st.owner) {
			// Held back after a promotion (epoch.go): record a new
			// timeline if need be, and call again when the hold-back ends.
			var he *leasehold.HeldError
			switch herr, retry := s.shut(ctx, req.Name, st.owner, st.expires, st.now); {
			case retry:
				wait = 0
			case errors.As(herr, &he):
				wait = min(wait, he.Remaining+time.Millisecond)
			}
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			s.leave(ctx, req, waiter, rid)
			return leasehold.Record{}, ctx.Err()
		case <-s.watch.stop: // closed: the entry lapses after the window
			t.Stop()
			return leasehold.Record{}, leasehold.ErrClosed
		case note := <-notes:
			t.Stop()
			s.notes.Add(1)
			if rec, ok := granted(note, req, sent, st.now); ok {
				return s.keepUnlessDone(ctx, rec)
			}
		case <-t.C:
		}
		if err := s.begin(ctx); err != nil {
			s.leave(ctx, req, waiter, rid)
			return leasehold.Record{}, err
		}
	}
}

// waitRow runs one call of the wait function on a connection of its own
// and scans its row into dest. cut reports a call that ctx ended in
// flight (pgx then closes the connection): its statement may still run,
// until its backend b is ended.
func (s *Store) waitRow(ctx context.Context, args, dest []any) (b backend, cut bool, err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return b, false, err
	}
	b = backendOf(c)
	err = c.QueryRow(ctx, s.q.wait, args...).Scan(dest...)
	cut = err != nil && ctx.Err() != nil && c.Conn().IsClosed()
	c.Release()
	return b, cut, err
}

// granted decodes the notification of a grant to a waiter: "id token
// micros". It is the waiter's grant only if it was made after the waiter's
// latest call (sent when sent, processed at last by the server's clock,
// which the grant's time is read from under the same lock): a grant made
// before it is stale (that call found it expired, and queued the waiter
// again). Made after it, it expires after sent + TTL: Remaining is counted
// from there.
func granted(note string, req leasehold.AcquireRequest, sent, last time.Time) (leasehold.Record, bool) {
	f := strings.Fields(note)
	if len(f) != 3 {
		return leasehold.Record{}, false
	}
	token, err1 := strconv.ParseUint(f[1], 10, 63)
	us, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || token == 0 || time.UnixMicro(us).Before(last.Truncate(time.Microsecond)) {
		return leasehold.Record{}, false
	}
	return leasehold.Record{
		Name: req.Name, Owner: req.Owner, Token: token, Data: req.Data,
		TTL: req.TTL, Remaining: req.TTL - time.Since(sent), Acquired: time.UnixMicro(us),
	}, true
}

// keepUnlessDone returns rec, or, when ctx ended as it was granted,
// releases it and returns ctx's error.
func (s *Store) keepUnlessDone(ctx context.Context, rec leasehold.Record) (leasehold.Record, error) {
	if err := ctx.Err(); err != nil {
		storekit.AfterEnd(ctx, 5*time.Second, func(rctx context.Context) { _ = s.Release(rctx, rec.Name, rec.Owner, rec.Token) })
		return leasehold.Record{}, err
	}
	return rec, nil
}

// leave deletes the waiter's entry, best effort. When it is already gone,
// a release may have granted the lease to the waiter (the release deletes
// the entry it grants to, in the same transaction, and would have waited
// for this deletion had it come first): that grant is released. With an
// empty waiter it removes what calls of req's owner and request id rid
// left: every entry of theirs, and a grant made to them.
func (s *Store) leave(ctx context.Context, req leasehold.AcquireRequest, waiter, rid string) {
	storekit.AfterEnd(ctx, 5*time.Second, func(lctx context.Context) { s.leaveNow(lctx, req, waiter, rid) })
}

// leaveNow is leave within lctx.
func (s *Store) leaveNow(lctx context.Context, req leasehold.AcquireRequest, waiter, rid string) {
	var dropped, woken int
	call := func() error {
		return s.pool.QueryRow(lctx, s.q.leave, req.Name, waiter, s.watch.channel, req.Owner, rid).Scan(&dropped, &woken)
	}
	err := call()
	if s.again(lctx, err) {
		err = call()
	}
	if err != nil || dropped > 0 && waiter != "" {
		return // dropped (or unknown: the entry lapses after the window)
	}
	// Not found, or unknown (then a grant expires after its TTL).
	var token int64
	if err := s.pool.QueryRow(lctx, s.q.mine, req.Name, req.Owner, rid).Scan(&token); err == nil {
		_ = s.Release(lctx, req.Name, req.Owner, uint64(token))
	}
}
