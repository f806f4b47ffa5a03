package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/mutation"
)

// A promotion of an asynchronous replica can lose the last commits of the
// old primary: grants its holders were told about. The new primary would
// then grant those leases again at once, with the same or a smaller token.
// Every promotion starts a new timeline (PostgreSQL's history id, in the
// name of every WAL file), so the store records the timeline it last saw in
// the lease table, in a row no lease can have (its name starts with a
// control character; held is false, so Get and List never show it):
//
//	name        "\x01timeline"
//	request_id  the timeline id, as text
//	token       the epoch: the timeline id when first seen, and one more
//	            than the last epoch (or the new timeline id, if greater)
//	            at every change after that, so it only goes up
//	expires_at  the end of the hold-back after the change was seen
//	acquired_at when the change was seen
//
// Every statement or function that grants compares the server's timeline
// (pg_walfile_name(pg_current_wal_lsn()), which needs no privilege) with
// the row, in the same statement: it grants only when they agree and the
// hold-back is over, and a new grant's token is at least the epoch's floor,
// (epoch − 1) × 2^40 + 1, above every token an earlier epoch handed out
// (unless a name was granted 2^40 times in one epoch). On timeline 1 (a
// cluster never promoted) without the row, the floor is 0 and grants go on
// as before. When they disagree the statement grants nothing and the store
// runs observeSQL, which records the new timeline and starts the hold-back:
// no grant for the Store's hold-back (WithHoldback, by default
// DefaultHoldback: set it to at least the longest TTL in use), long enough
// for every lease the old primary granted and the new one lost to expire
// by its holder's own deadline.

// epochRow is the name of the row that records the timeline (an SQL
// literal).
const epochRow = `E'\x01timeline'`

// timelineSQL is the server's current timeline id: the first 8 hex digits
// of the name of the WAL file being written. Executable by any role (no
// superuser, no pg_monitor); an error on a standby, which cannot grant
// anyway.
const timelineSQL = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

// epochShift places the epoch in a token's high bits: the floor of epoch
// e is (e − 1) << epochShift.
const epochShift = 40

// gateSQL is a query of one row on the lease table t (an identifier, or a
// format verb standing for it): open (a grant may be made now), floor (a
// grant's token must be above it), seen (the row records the server's
// timeline: false means a change not yet recorded) and until (the
// hold-back's end, NULL without the row).
func gateSQL(t string) string {
	return `SELECT CASE WHEN ep.token IS NULL THEN x.tl = 1 ELSE ep.request_id = x.tl::text AND ep.expires_at <= now() END AS open,
		CASE WHEN ep.token IS NULL THEN 0 ELSE (ep.token - 1) << ` + fmt.Sprint(epochShift) + ` END AS floor,
		ep.token IS NOT NULL AND ep.request_id = x.tl::text AS seen, ep.expires_at AS until
	FROM (SELECT ` + timelineSQL + ` AS tl) x LEFT JOIN ` + t + ` ep ON ep.name = ` + epochRow
}

// Answers of a grant that the gate kept shut, in the owner column (a
// control character: no owner has one): the hold-back after a recorded
// change, or a change not recorded yet (run observeSQL).
const (
	gateHoldback = "\x01holdback"
	gateTimeline = "\x01timeline"
)

// gateAnswerSQL is the owner column of a shut gate's answer, from the gate
// row e.
const gateAnswerSQL = `CASE WHEN e.seen THEN chr(1) || 'holdback' ELSE chr(1) || 'timeline' END`

// observeSQL records the server's timeline in the epoch row, if the row
// does not have it yet, and starts the hold-back ($1, microseconds) from
// now; it returns the row's epoch, the hold-back's end and now, or no row
// when another Store recorded the timeline first. The row of a cluster
// never promoted (timeline 1) needs no hold-back.
const observeSQL = `WITH x AS (SELECT ` + timelineSQL + ` AS tl)
INSERT INTO %[1]s AS l (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at)
SELECT ` + epochRow + `, '', x.tl::text, x.tl, '', greatest($1::bigint, 1),
	CASE WHEN x.tl = 1 THEN now() ELSE now() + $1::bigint * interval '1 microsecond' END, false, now()
FROM x
ON CONFLICT (name) DO UPDATE SET request_id = excluded.request_id,
	token = greatest(l.token + 1, excluded.token), ttl_us = excluded.ttl_us,
	expires_at = now() + $1::bigint * interval '1 microsecond', acquired_at = now()
WHERE l.request_id <> excluded.request_id
RETURNING l.token, l.expires_at, now()`

// DefaultHoldback is how long grants wait after the store notices that the
// database moved to a new timeline (a promotion) unless WithHoldback sets
// another.
const DefaultHoldback = 30 * time.Second

// MaxHoldback is the longest hold-back accepted.
const MaxHoldback = 2 * leasehold.MaxTTL

// HoldbackOwner is the Owner of the *leasehold.HeldError that TryAcquire
// returns while grants are held back after a promotion (Token 0,
// Remaining the time left, or a short retry hint).
const HoldbackOwner = "(postgres timeline changed: holding back)"

// WithHoldback sets how long grants wait after the store notices a new
// timeline (a promoted replica, or a point-in-time recovery): the
// longest TTL any client of the table uses, so that a grant the old
// primary made and the promotion lost has expired by its holder's
// deadline before anyone is granted that lease again. The Store that first
// notices the change records its end in the table for all; give every
// client of a table the same hold-back. Default DefaultHoldback; URL
// parameter holdback=<duration>. It must lie within [0, MaxHoldback],
// else Open and New return an *leasehold.InvalidError. 0 turns the
// hold-back off (the token floor stays): only for a database whose
// failovers lose nothing (synchronous replication, see
// docs/stores/postgres.md).
func WithHoldback(d time.Duration) Option {
	return func(c *config) { c.holdback = d }
}

// Holdback returns the store's hold-back after a promotion.
func (s *Store) Holdback() time.Duration { return s.holdback }

// shut answers a grant the gate kept shut (owner is gateHoldback or
// gateTimeline; until the hold-back's end, now the server's time): a
// HeldError from HoldbackOwner, after recording a new timeline first;
// retry is true when the gate should be open by now (try again at once).
func (s *Store) shut(ctx context.Context, name, owner string, until, now time.Time) (err error, retry bool) {
	if owner == gateTimeline {
		var epoch int64
		hb := s.holdback
		if mutation.On("pg-no-holdback") { // the bug: grant at once on a new timeline (the floor stays)
			hb = 0
		}
		err := s.pool.QueryRow(ctx, s.q.observe, micros(hb)).Scan(&epoch, &until, &now)
		if s.again(ctx, err) {
			err = s.pool.QueryRow(ctx, s.q.observe, micros(hb)).Scan(&epoch, &until, &now)
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows): // recorded by another Store
			return &leasehold.HeldError{Name: name, Owner: HoldbackOwner, Remaining: 100 * time.Millisecond}, false
		case err != nil:
			return s.fail(ctx, err), false
		}
	}
	if !until.After(now) {
		return nil, true
	}
	return &leasehold.HeldError{Name: name, Owner: HoldbackOwner, Remaining: until.Sub(now)}, false
}

// gateShut reports whether owner is the answer of a shut gate.
func gateShut(owner string) bool { return strings.HasPrefix(owner, "\x01") }
