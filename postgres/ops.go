package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Every operation is one statement (TryAcquire: grabSQL, and acquireSQL
// when grabSQL decides nothing): one round trip, one implicit
// transaction, decided by the database with the rules of
// storekit/leasestate written in SQL. A row is live when it is held and
// expires_at is after now(), the start of the statement's transaction: one
// instant for the whole statement, so its WHERE and SET clauses cannot
// disagree about whether the lease is live.

// live is the lease-is-live predicate on the conflicting row l.
const live = `l.held AND l.expires_at > now()`

// acquireSQL grants the lease when its row is free, expired or missing (the
// token goes up by one; a new row starts at 1), or re-grants it to a retry
// of the acquire that holds it (same owner and non-empty request id: same
// token, fresh expiry), and otherwise reports the holder, all in one
// statement:
//
//   - cur reads the row in the statement's snapshot. If it shows a live
//     holder that this request is not a retry of, the answer is "held by
//     cur" as of the snapshot, and nothing is written or locked: a refusal
//     is a read, with no transaction id, WAL record or commit flush.
//   - Otherwise g runs the conditional upsert. Under READ COMMITTED, ON
//     CONFLICT locks and judges the latest version of the row, which may be
//     newer than the snapshot; its WHERE is the authority.
//   - If g refused, h reads the holder with a locking read, which follows
//     the row to that latest version (locked by this statement, so it cannot
//     change). A row inserted after the snapshot stays invisible to h; the
//     statement then returns no row and is run again.
//
// A free lease is not granted while live waiters are queued for it (qh,
// the head of the queue table, queue_schema.go): the answer is then "held"
// by the head waiter's owner, with token 0 and a short retry hint, and
// nothing is written. Only a retry of the live holder's own acquire is
// served past a queue. The queue is read only when the row says queued
// (the uncontended case reads no queue): excluded.queued carries the
// snapshot's queued into g, whose WHERE refuses a row that became queued
// after the snapshot (qh did not look at its queue): h then reads it, and
// the statement runs again. A new row's queued tells whether the name
// already has queue rows (Watch interests recorded before the row
// existed).
//
// The gate e (epoch.go) shuts every grant while the database's timeline
// is not the one recorded, or its hold-back lasts: the answer is then only
// the gate's (owner gateHoldback or gateTimeline), and a grant's token is
// above the epoch's floor (carried in excluded.token).
var acquireSQL = `WITH e AS (` + gateSQL("%[1]s") + `
), cur AS (
	SELECT token, owner, expires_at, acquired_at, ttl_us, held, queued,
		held AND expires_at > now() AND NOT ($3::text <> '' AND owner = $2::text AND request_id = $3::text) AS blocks,
		held AND expires_at > now() AND $3::text <> '' AND owner = $2::text AND request_id = $3::text AS retry
	FROM %[1]s WHERE name = $1::text
), qh AS (
	SELECT q.owner FROM %[2]s q
	WHERE q.name = $1::text AND NOT q.watch AND q.alive_until > now()
		AND EXISTS (SELECT FROM cur WHERE queued AND NOT (blocks OR retry))
	ORDER BY q.seq LIMIT 1
), g AS (
	INSERT INTO %[1]s AS l (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at, queued)
	SELECT $1::text, $2::text, $3::text, (SELECT floor + 1 FROM e), $4::bytea, $5::bigint,
		now() + $5::bigint * interval '1 microsecond', true, now(),
		coalesce((SELECT queued FROM cur), EXISTS (SELECT FROM %[2]s q WHERE q.name = $1::text))
	WHERE NOT EXISTS (SELECT FROM cur WHERE blocks) AND NOT EXISTS (SELECT FROM qh) AND (SELECT open FROM e)
	ON CONFLICT (name) DO UPDATE SET
		token = CASE WHEN ` + live + ` THEN l.token ELSE greatest(l.token + 1, excluded.token) END,
		acquired_at = CASE WHEN ` + live + ` THEN l.acquired_at ELSE now() END,
		owner = excluded.owner, request_id = excluded.request_id, data = excluded.data,
		ttl_us = excluded.ttl_us, expires_at = excluded.expires_at, held = true
	WHERE (NOT (` + live + `) AND (NOT l.queued OR excluded.queued))
		OR ($3::text <> '' AND l.owner = $2::text AND l.request_id = $3::text)
	RETURNING l.token, l.owner, l.expires_at, l.acquired_at, l.ttl_us, l.held
), h AS (
	SELECT token, owner, expires_at, acquired_at, ttl_us, held FROM %[1]s
	WHERE name = $1::text AND NOT EXISTS (SELECT FROM g) AND NOT EXISTS (SELECT FROM cur WHERE blocks)
		AND NOT EXISTS (SELECT FROM qh) AND (SELECT open FROM e)
	FOR SHARE
)
SELECT true, token, owner, expires_at, acquired_at, ttl_us, held, now() FROM g
UNION ALL
SELECT false, token, owner, expires_at, acquired_at, ttl_us, held, now() FROM cur WHERE blocks AND (SELECT open FROM e)
UNION ALL
SELECT false, 0, owner, now() + interval '` + queueHintSQL + `', now(), 0, true, now() FROM qh WHERE (SELECT open FROM e)
UNION ALL
SELECT false, token, owner, expires_at, acquired_at, ttl_us, held, now() FROM h
UNION ALL
SELECT false, 0, ` + gateAnswerSQL + `, coalesce(e.until, now()), now(), 0, true, now() FROM e WHERE NOT e.open`

// grantable is true of a lease row x that an acquire may take at once,
// without looking at the queue: free (released, expired) and not queued,
// or live and held by this very acquire (a retry: same owner and non-empty
// request id).
func grantable(x string) string {
	return `((NOT (` + x + `.held AND ` + x + `.expires_at > now()) AND NOT ` + x + `.queued)
		OR (` + x + `.held AND ` + x + `.expires_at > now() AND $3::text <> '' AND ` + x + `.owner = $2::text AND ` + x + `.request_id = $3::text))`
}

// grabSQL is the fast path of TryAcquire: acquireSQL's grant (g), for a
// row that exists and is grantable in the statement's snapshot (c), so
// that it inserts nothing otherwise: no row lock, no write; ON CONFLICT
// judges the row's latest version again. Not granted, it returns the
// live holder as the snapshot shows it (a refusal: a read, one round
// trip), else no row, and then acquireSQL decides (a new name, a queue, a
// concurrent change). So the uncontended acquire reads no queue.
var grabSQL = `WITH e AS (` + gateSQL("%[1]s") + `
), g AS (
	INSERT INTO %[1]s AS l (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at)
	SELECT $1::text, $2::text, $3::text, e.floor + 1, $4::bytea, $5::bigint,
		now() + $5::bigint * interval '1 microsecond', true, now()
	FROM %[1]s c, e WHERE c.name = $1::text AND ` + grantable("c") + ` AND e.open
	ON CONFLICT (name) DO UPDATE SET
		token = CASE WHEN ` + live + ` THEN l.token ELSE greatest(l.token + 1, excluded.token) END,
		acquired_at = CASE WHEN ` + live + ` THEN l.acquired_at ELSE now() END,
		owner = excluded.owner, request_id = excluded.request_id, data = excluded.data,
		ttl_us = excluded.ttl_us, expires_at = excluded.expires_at, held = true
	WHERE ` + grantable("l") + `
	RETURNING l.token, l.owner, l.expires_at, l.acquired_at, l.ttl_us, l.held
)
SELECT true, token, owner, expires_at, acquired_at, ttl_us, held, now() FROM g
UNION ALL
SELECT false, token, owner, expires_at, acquired_at, ttl_us, held, now() FROM %[1]s c
WHERE c.name = $1::text AND c.held AND c.expires_at > now()
	AND NOT ($3::text <> '' AND c.owner = $2::text AND c.request_id = $3::text) AND NOT EXISTS (SELECT FROM g)
	AND (SELECT open FROM e)
UNION ALL
SELECT false, 0, ` + gateAnswerSQL + `, coalesce(e.until, now()), now(), 0, true, now() FROM e WHERE NOT e.open`

// renewSQL extends a live lease of that owner and token.
const renewSQL = `UPDATE %s SET ttl_us = $4::bigint, expires_at = now() + $4::bigint * interval '1 microsecond'
	WHERE name = $1::text AND owner = $2::text AND token = $3::bigint AND held AND expires_at > now()`

// releaseSQL frees the latest grant of that owner and token, held or
// already released (so a repeated release succeeds), in one statement.
// When the row is not queued (nobody waits for or watches the name:
// queue_schema.go) that is the plain UPDATE f, and the answer 1: no
// function call, no notification. Otherwise (or when there is no such
// grant) the same statement calls the release function, which frees the
// grant, hands the lease to the live head of the name's queue, if any,
// notifying that waiter alone, and notifies the name (for Watch) only
// when a Store watches it; it returns 0 when there was no such grant.
// Under READ COMMITTED f judges the row's latest version: a row that a
// waiter marked queued before f locked it goes to the function, and a
// waiter that comes after finds it free. (A CASE evaluates the function
// only when f changed nothing.)
const releaseSQL = `WITH f AS (
	UPDATE %[1]s l SET held = false
	WHERE l.name = $1::text AND l.owner = $2::text AND l.token = $3::bigint AND NOT l.queued
	RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT FROM f) THEN 1 ELSE %[2]s($1::text, $2::text, $3::bigint, $4::text) END`

const getSQL = `SELECT owner, token, data, ttl_us, expires_at, acquired_at, now() FROM %s
	WHERE name = $1::text AND held AND expires_at > now()`

// listSQL: the range [$1, $2) on the "C"-collated primary key bounds the
// scan ($2 is NULL when the prefix has no upper bound); starts_with, exact
// for any prefix (no pattern characters, unlike LIKE), decides.
const listSQL = `SELECT name, owner, token, data, ttl_us, expires_at, acquired_at, now() FROM %s
	WHERE held AND expires_at > now()
		AND name >= $1::text COLLATE "C" AND ($2::text IS NULL OR name < $2::text COLLATE "C")
		AND starts_with(name, $1::text)
	ORDER BY name`

type queries struct {
	grab, acquire, renew, release, get, list string
	observe                                  string // epoch.go
	wait, leave, mine, interest              string // queue.go
	queueTable                               string
}

func buildQueries(table string, o queueObjects) queries {
	return queries{
		grab:       fmt.Sprintf(grabSQL, table),
		observe:    fmt.Sprintf(observeSQL, table),
		acquire:    fmt.Sprintf(acquireSQL, table, o.queue),
		renew:      fmt.Sprintf(renewSQL, table),
		release:    fmt.Sprintf(releaseSQL, table, o.release),
		wait:       fmt.Sprintf(waitSQL, o.wait),
		leave:      fmt.Sprintf(leaveSQL, o.queue),
		mine:       fmt.Sprintf(mineSQL, table),
		interest:   fmt.Sprintf(interestSQL, o.queue, table),
		queueTable: o.queue,
		get:        fmt.Sprintf(getSQL, table),
		list:       fmt.Sprintf(listSQL, table),
	}
}

// acquireAttempts bounds the re-runs of acquireSQL when the holder it
// refused for was inserted after the statement's snapshot.
const acquireAttempts = 4

// TryAcquire implements leasehold.Store.
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Record{}, err
	}
	data := req.Data
	if data == nil {
		data = []byte{}
	}
	// A retry after a lost connection is safe only with a request id: if the
	// lost attempt was granted, the retry gets that grant back.
	retried := req.RequestID == ""
	for attempt := 0; attempt <= acquireAttempts; attempt++ {
		var granted, held bool
		var token, ttl int64
		var owner string
		var expires, acquired, now time.Time
		q := s.q.acquire
		if attempt == 0 {
			q = s.q.grab // the fast path; no row: acquireSQL decides
		}
		err := s.acquireRow(ctx, req, q, []any{req.Name, req.Owner, req.RequestID, data, micros(req.TTL)},
			&granted, &token, &owner, &expires, &acquired, &ttl, &held, &now)
		switch {
		case attempt == 0 && errors.Is(err, pgx.ErrNoRows):
			continue
		case err == nil && !granted && gateShut(owner):
			herr, retry := s.shut(ctx, req.Name, owner, expires, now)
			if !retry {
				return leasehold.Record{}, herr
			}
		case err == nil && granted:
			return leasehold.Record{
				Name: req.Name, Owner: req.Owner, Token: uint64(token), Data: req.Data,
				TTL: time.Duration(ttl) * time.Microsecond, Remaining: expires.Sub(now), Acquired: acquired,
			}, nil
		case err == nil && held && expires.After(now):
			return leasehold.Record{}, &leasehold.HeldError{
				Name: req.Name, Owner: owner, Token: uint64(token), Remaining: expires.Sub(now), Acquired: acquired,
			}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			if !s.again(ctx, err) || retried {
				return leasehold.Record{}, s.fail(ctx, err)
			}
			retried = true
		default:
			s.reruns.Add(1)
		}
	}
	return leasehold.Record{}, fmt.Errorf("postgres: acquire %q: refused %d times, each time for a holder inserted concurrently; not granted, try again",
		req.Name, acquireAttempts)
}

// Renew implements leasehold.Store.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	if token > 1<<63-1 {
		return leasehold.ErrNotHeld // never granted
	}
	// Repeating a renewal is harmless: a lost one that was applied is
	// applied again from a later instant.
	tag, err := s.pool.Exec(ctx, s.q.renew, name, owner, int64(token), micros(ttl))
	if s.again(ctx, err) {
		tag, err = s.pool.Exec(ctx, s.q.renew, name, owner, int64(token), micros(ttl))
	}
	if err != nil {
		return s.fail(ctx, err)
	}
	if tag.RowsAffected() != 1 {
		return leasehold.ErrNotHeld
	}
	return nil
}

// Release implements leasehold.Store, in one round trip. When nobody
// waits for or watches the name it is a plain UPDATE (no function call,
// no notification). Otherwise the same statement calls the release
// function: if waiters are queued (AcquireWait), the live head is granted
// the lease in the same transaction and notified alone; else watchers of
// the name are notified through NOTIFY when the release commits. Watchers
// in this process are notified at once.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	if token > 1<<63-1 {
		return leasehold.ErrNotHeld
	}
	var outcome int
	err := s.pool.QueryRow(ctx, s.q.release, name, owner, int64(token), s.watch.channel).Scan(&outcome)
	if first := err; s.again(ctx, err) {
		// Releasing twice is harmless, but if the lost attempt released it
		// and someone took it over since, the retry is refused: that
		// refusal would be wrong, so the outcome is reported unknown.
		err = s.pool.QueryRow(ctx, s.q.release, name, owner, int64(token), s.watch.channel).Scan(&outcome)
		if err == nil && outcome == 0 {
			return s.fail(ctx, first)
		}
	}
	if err != nil {
		return s.fail(ctx, err)
	}
	if outcome == 0 {
		return leasehold.ErrNotHeld
	}
	if outcome == 1 {
		s.watch.notify(name)
	}
	return nil
}

// Get implements leasehold.Store.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Record{}, err
	}
	r := leasehold.Record{Name: name}
	var token, ttl int64
	var expires, now time.Time
	err := s.pool.QueryRow(ctx, s.q.get, name).Scan(&r.Owner, &token, &r.Data, &ttl, &expires, &r.Acquired, &now)
	if s.again(ctx, err) {
		err = s.pool.QueryRow(ctx, s.q.get, name).Scan(&r.Owner, &token, &r.Data, &ttl, &expires, &r.Acquired, &now)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	if err != nil {
		return leasehold.Record{}, s.fail(ctx, err)
	}
	fill(&r, token, ttl, expires, now)
	return r, nil
}

// List implements leasehold.Store. Names are ordered byte for byte, as Go
// compares strings.
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var end any // NULL: no upper bound
	if e, ok := prefixEnd(prefix); ok {
		end = e
	}
	out, err := s.list(ctx, prefix, end)
	if s.again(ctx, err) {
		out, err = s.list(ctx, prefix, end)
	}
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return out, nil
}

func (s *Store) list(ctx context.Context, prefix string, end any) ([]leasehold.Record, error) {
	rows, err := s.pool.Query(ctx, s.q.list, prefix, end)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leasehold.Record
	for rows.Next() {
		var r leasehold.Record
		var token, ttl int64
		var expires, now time.Time
		if err := rows.Scan(&r.Name, &r.Owner, &token, &r.Data, &ttl, &expires, &r.Acquired, &now); err != nil {
			return nil, err
		}
		fill(&r, token, ttl, expires, now)
		out = append(out, r)
	}
	return out, rows.Err()
}

func fill(r *leasehold.Record, token, ttl int64, expires, now time.Time) {
	r.Token, r.TTL, r.Remaining = uint64(token), time.Duration(ttl)*time.Microsecond, expires.Sub(now)
	if len(r.Data) == 0 {
		r.Data = nil
	}
}

// micros converts a TTL to the table's microseconds, rounding up so that the
// server never expires a lease before the TTL its holder asked for.
func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// prefixEnd returns the least string greater than every string that starts
// with prefix: prefix with its last rune below U+10FFFF incremented (U+D7FF
// steps over the surrogates to U+E000) and what follows it dropped. In
// UTF-8, byte order is code point order, so [prefix, end) under the "C"
// collation holds exactly the names with that prefix. ok is false when
// there is no such string (empty prefix, or all U+10FFFF).
func prefixEnd(prefix string) (end string, ok bool) {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		switch r[i] {
		case utf8.MaxRune:
			continue
		case 0xD7FF:
			r[i] = 0xE000
		default:
			r[i]++
		}
		return string(r[:i+1]), true
	}
	return "", false
}
