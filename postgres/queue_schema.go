package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema version 2 adds, beside the lease table and in its schema, the
// queue table and three server-side functions, all named after the lease
// table ("leasehold_leases" → "leasehold_queue", "leasehold_wait",
// "leasehold_release", "leasehold_txn"; see derivedName):
//
//   - the queue table holds the waiters of AcquireWait, per name in
//     arrival order (seq), each with a liveness deadline by the server's
//     clock (alive_until), and the Watch interests (watch = true; one row
//     per name and watching Store, also with a deadline);
//   - wait is one step of AcquireWait: grant, or enqueue, or refresh;
//   - release frees a lease and hands it to the live head of its queue;
//   - txn is Txn (records.go) in one call.
//
// Every function that touches a name's queue first locks the name's lease
// row, so that for one name they run one at a time; rows of the queue are
// only ever locked after the lease row (or, by statements that lock no
// lease row, alone), so there is no lock cycle.
//
// The lease row's queued column says whether the name may have queue rows
// (waiters or watch interests). It is set, under the lease row's lock, by
// whatever adds a queue row (the wait function, Watch's interest), and
// cleared, under the same lock, only by a function that finds no queue row
// of the name left. So a name without queued has no queue row, and the
// uncontended operations read no queue: TryAcquire looks at the queue
// only when the row says queued, and Release is a plain UPDATE when it does
// not, calling the release function (hand-over, notification) in the same
// statement only when it does. queued may stay set after the last row went away by other means
// (a waiter leaving, an entry lapsing): the next release then calls the
// function, which clears it.

// addQueuedSQL gives a lease table of an earlier layout the queued column
// (a change of the catalog only: the default fills the existing rows).
const addQueuedSQL = `ALTER TABLE %s ADD COLUMN IF NOT EXISTS queued boolean NOT NULL DEFAULT false`

// markQueuedSQL sets queued on the names that have queue rows (an early
// version 2 table's waiters and watchers), so that releases hand over to
// them.
const markQueuedSQL = `UPDATE %[1]s l SET queued = true
	WHERE NOT l.queued AND EXISTS (SELECT FROM %[2]s q WHERE q.name = l.name)`

// createQueueSQL is the queue table. waiter identifies an AcquireWait call
// (or, for a watch row, a Store). request_id is the waiter's request id,
// or its waiter id when it has none: the grant made to it carries that id.
const createQueueSQL = `CREATE TABLE IF NOT EXISTS %s (
	name        text COLLATE "C" NOT NULL,
	seq         bigint GENERATED ALWAYS AS IDENTITY,
	waiter      text COLLATE "C" NOT NULL,
	watch       boolean NOT NULL,
	owner       text NOT NULL,
	request_id  text NOT NULL,
	ttl_us      bigint NOT NULL,
	data        bytea NOT NULL,
	alive_until timestamptz NOT NULL,
	PRIMARY KEY (name, seq),
	UNIQUE (name, waiter)
)`

// waitFnSQL is one step of AcquireWait, for waiter p_waiter: under the
// lease row's lock, and with the time t read after taking it,
//
//   - if the lease is held, live, by this owner and request id (a release
//     granted it to this waiter, or a retry), it refreshes that grant's
//     expiry and returns it;
//   - it deletes the name's entries whose deadline has passed;
//   - if the lease is free (missing, released or expired) and no live
//     waiter is ahead of this one, it grants it (token + 1) and drops the
//     waiter's entry, and wakes the next live waiter, as the release
//     function does (on %[4]s, the table's channel), when its entry
//     outlives the grant;
//   - otherwise it enqueues the waiter (its seq fixes its place) or
//     refreshes its deadline, and returns the holder (or, when the lease is
//     free but others are ahead, the head's owner with token 0), and
//     whether this waiter is the head.
//
// A grant also needs the epoch gate open (epoch.go): while it is shut the
// waiter is enqueued as if others were ahead, and the answer's owner is
// the gate's (gateHoldback, gateTimeline) with the hold-back's end; a
// grant's token is above the epoch's floor.
var waitFnSQL = `CREATE OR REPLACE FUNCTION %[1]s(p_name text, p_waiter text, p_owner text, p_rid text,
	p_data bytea, p_ttl_us bigint, p_window_us bigint)
RETURNS TABLE (r_granted boolean, r_token bigint, r_owner text, r_expires timestamptz,
	r_acquired timestamptz, r_head boolean, r_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
	t       timestamptz;
	v_found boolean;
	v_token bigint;
	v_owner text;
	v_rid   text;
	v_held  boolean;
	v_exp   timestamptz;
	v_acq   timestamptz;
	v_seq   bigint;
	v_ahead text;
	v_q     boolean;
	v_next  text;
	v_until timestamptz;
	v_ttl   interval := p_ttl_us * interval '1 microsecond';
	v_open  boolean;
	v_floor bigint;
	v_seen  boolean;
	v_end   timestamptz;
BEGIN
	SELECT e.open, e.floor, e.seen, e.until INTO v_open, v_floor, v_seen, v_end FROM (` + gateSQL("%[2]s") + `) e;
	LOOP
		SELECT l.token, l.owner, l.request_id, l.held, l.expires_at, l.acquired_at, l.queued
			INTO v_token, v_owner, v_rid, v_held, v_exp, v_acq, v_q
			FROM %[2]s l WHERE l.name = p_name FOR UPDATE;
		v_found := FOUND;
		t := clock_timestamp();
		IF v_found AND v_held AND v_exp > t AND v_owner = p_owner AND v_rid = p_rid THEN
			DELETE FROM %[3]s q WHERE q.name = p_name AND q.waiter = p_waiter;
			UPDATE %[2]s l SET expires_at = t + v_ttl, ttl_us = p_ttl_us, data = p_data,
				queued = l.queued AND EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name)
				WHERE l.name = p_name;
			RETURN QUERY SELECT true, v_token, p_owner, t + v_ttl, v_acq, true, t;
			RETURN;
		END IF;
		IF v_found AND v_held AND v_exp > t THEN
			-- Held by another (the common case): enqueue, or renew the
			-- entry if it is still live (a lapsed one goes to the back),
			-- and say whether a live waiter is ahead.
			INSERT INTO %[3]s AS q (name, waiter, watch, owner, request_id, ttl_us, data, alive_until)
				VALUES (p_name, p_waiter, false, p_owner, p_rid, p_ttl_us, p_data, t + p_window_us * interval '1 microsecond')
				ON CONFLICT (name, waiter) DO UPDATE SET alive_until = excluded.alive_until WHERE q.alive_until > t
				RETURNING q.seq INTO v_seq;
			IF NOT FOUND THEN
				DELETE FROM %[3]s q WHERE q.name = p_name AND q.waiter = p_waiter;
				INSERT INTO %[3]s (name, waiter, watch, owner, request_id, ttl_us, data, alive_until)
					VALUES (p_name, p_waiter, false, p_owner, p_rid, p_ttl_us, p_data, t + p_window_us * interval '1 microsecond')
					RETURNING seq INTO v_seq;
			END IF;
			IF NOT v_q THEN
				UPDATE %[2]s l SET queued = true WHERE l.name = p_name;
			END IF;
			SELECT q.owner INTO v_ahead FROM %[3]s q
				WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t AND q.seq < v_seq
				ORDER BY q.seq LIMIT 1;
			RETURN QUERY SELECT false, v_token, v_owner, v_exp, v_acq, v_ahead IS NULL, t;
			RETURN;
		END IF;
		-- Free: drop the lapsed entries, and grant unless a live waiter is
		-- ahead.
		DELETE FROM %[3]s q WHERE q.name = p_name AND q.alive_until <= t;
		SELECT q.seq INTO v_seq FROM %[3]s q WHERE q.name = p_name AND q.waiter = p_waiter;
		SELECT q.owner INTO v_ahead FROM %[3]s q
			WHERE q.name = p_name AND NOT q.watch AND (v_seq IS NULL OR q.seq < v_seq)
			ORDER BY q.seq LIMIT 1;
		IF v_ahead IS NULL AND v_open THEN
			IF v_found THEN
				UPDATE %[2]s l SET owner = p_owner, request_id = p_rid, token = greatest(l.token + 1, v_floor + 1), data = p_data,
					ttl_us = p_ttl_us, expires_at = t + v_ttl, held = true, acquired_at = t,
					queued = l.queued AND EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name AND q.waiter <> p_waiter)
					WHERE l.name = p_name RETURNING l.token INTO v_token;
			ELSE
				INSERT INTO %[2]s (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at, queued)
					VALUES (p_name, p_owner, p_rid, v_floor + 1, p_data, p_ttl_us, t + v_ttl, true, t,
						EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name AND q.waiter <> p_waiter))
					ON CONFLICT (name) DO NOTHING;
				IF NOT FOUND THEN
					CONTINUE; -- inserted concurrently: lock it and judge again
				END IF;
				v_token := v_floor + 1;
			END IF;
			IF v_seq IS NOT NULL THEN
				DELETE FROM %[3]s q WHERE q.name = p_name AND q.waiter = p_waiter;
			END IF;
			SELECT q.waiter, q.alive_until INTO v_next, v_until FROM %[3]s q
				WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t AND q.waiter <> p_waiter
				ORDER BY q.seq LIMIT 1;
			IF FOUND AND t + v_ttl < v_until THEN
				PERFORM pg_notify(%[4]s, chr(1) || v_next || ' wake');
			END IF;
			RETURN QUERY SELECT true, v_token, p_owner, t + v_ttl, t, true, t;
			RETURN;
		END IF;
		IF v_seq IS NULL THEN
			INSERT INTO %[3]s (name, waiter, watch, owner, request_id, ttl_us, data, alive_until)
				VALUES (p_name, p_waiter, false, p_owner, p_rid, p_ttl_us, p_data, t + p_window_us * interval '1 microsecond');
		ELSE
			UPDATE %[3]s q SET alive_until = t + p_window_us * interval '1 microsecond'
				WHERE q.name = p_name AND q.waiter = p_waiter;
		END IF;
		IF v_found AND NOT v_q THEN
			UPDATE %[2]s l SET queued = true WHERE l.name = p_name;
		END IF;
		IF v_ahead IS NULL THEN -- the gate is shut
			RETURN QUERY SELECT false, 0::bigint, chr(1) || CASE WHEN v_seen THEN 'holdback' ELSE 'timeline' END,
				coalesce(v_end, t), t, false, t;
			RETURN;
		END IF;
		RETURN QUERY SELECT false, 0::bigint, v_ahead, t, t, false, t;
		RETURN;
	END LOOP;
END
$fn$`

// releaseFnSQL frees the latest grant of that owner and token (held or
// already released, so that a repeated release succeeds) and returns 0
// when there is none, 1 when it freed it, 2 when it handed it to a
// waiter. Release's statement calls it only when its plain UPDATE changed
// nothing (the row is queued, or not the caller's grant). When the lease row is
// not queued, or the name has no queue row at all (then it clears
// queued), it stops there: no notification. Otherwise, with the time t
// read under the lease row's lock, it deletes the dead entries, takes the live head (a
// head that vanished meanwhile, by its waiter's cancellation, is passed
// over), grants it the lease (token + 1, expiry t + its TTL) and notifies
// that waiter alone: the payload is "\x01" (no name has control
// characters), the waiter id, the token and the grant's time in Unix
// microseconds. Then, if the next live waiter's entry outlives the new
// grant (the grant could expire, its holder crashed, before that waiter's
// next call), it notifies that waiter too, with "\x01", its id and
// " wake": a note that is not a grant, on which the waiter calls again,
// learns that it is the head, and wakes at the holder's expiry. A normal
// hand-over (a TTL longer than the window) sends no second note. With no
// waiter it notifies the name (for Watch) only when
// a live watch row exists. queued is left set when queue rows remain, and
// cleared when none does.
//
// While the epoch gate is shut (epoch.go) it grants nothing: it wakes the
// live head (a note that is not a grant), which calls again and learns of
// the hold-back. A grant's token is above the epoch's floor.
var releaseFnSQL = `CREATE OR REPLACE FUNCTION %[1]s(p_name text, p_owner text, p_token bigint, p_channel text)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
	t        timestamptz;
	v_waiter text;
	v_owner  text;
	v_rid    text;
	v_ttl    bigint;
	v_data   bytea;
	v_token  bigint;
	v_q      boolean;
	v_next   text;
	v_until  timestamptz;
	v_open   boolean;
	v_floor  bigint;
BEGIN
	UPDATE %[2]s l SET held = false WHERE l.name = p_name AND l.owner = p_owner AND l.token = p_token
		RETURNING l.queued INTO v_q;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	IF NOT v_q THEN
		RETURN 1;
	END IF;
	IF NOT EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name) THEN
		UPDATE %[2]s l SET queued = false WHERE l.name = p_name;
		RETURN 1;
	END IF;
	t := clock_timestamp();
	SELECT e.open, e.floor INTO v_open, v_floor FROM (` + gateSQL("%[2]s") + `) e;
	IF NOT v_open THEN
		SELECT q.waiter INTO v_waiter FROM %[3]s q
			WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t ORDER BY q.seq LIMIT 1;
		IF FOUND THEN
			PERFORM pg_notify(p_channel, chr(1) || v_waiter || ' wake');
		ELSIF EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name AND q.watch AND q.alive_until > t) THEN
			PERFORM pg_notify(p_channel, p_name);
		END IF;
		RETURN 1;
	END IF;
	LOOP
		-- The live head's entry, and the lapsed waiters' ahead of it, in
		-- one statement; a head whose waiter deleted it meanwhile is not
		-- returned, and the next one is tried.
		WITH h AS (
			SELECT q.seq FROM %[3]s q WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t
			ORDER BY q.seq LIMIT 1
		), d AS (
			DELETE FROM %[3]s q USING h WHERE q.name = p_name AND NOT q.watch AND q.seq <= h.seq
			RETURNING q.seq, q.waiter, q.owner, q.request_id, q.ttl_us, q.data
		)
		SELECT d.waiter, d.owner, d.request_id, d.ttl_us, d.data INTO v_waiter, v_owner, v_rid, v_ttl, v_data
			FROM d, h WHERE d.seq = h.seq;
		IF FOUND THEN
			UPDATE %[2]s l SET owner = v_owner, request_id = v_rid, token = greatest(l.token + 1, v_floor + 1), data = v_data, ttl_us = v_ttl,
				expires_at = t + v_ttl * interval '1 microsecond', held = true, acquired_at = t,
				queued = EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name)
				WHERE l.name = p_name RETURNING l.token INTO v_token;
			PERFORM pg_notify(p_channel, chr(1) || v_waiter || ' ' || v_token || ' ' ||
				floor(extract(epoch FROM t) * 1000000)::bigint);
			SELECT q.waiter, q.alive_until INTO v_next, v_until FROM %[3]s q
				WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t ORDER BY q.seq LIMIT 1;
			IF FOUND AND t + v_ttl * interval '1 microsecond' < v_until THEN
				PERFORM pg_notify(p_channel, chr(1) || v_next || ' wake');
			END IF;
			RETURN 2;
		END IF;
		EXIT WHEN NOT EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name AND NOT q.watch AND q.alive_until > t);
	END LOOP;
	DELETE FROM %[3]s q WHERE q.name = p_name AND q.alive_until <= t;
	IF EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name AND q.watch) THEN
		PERFORM pg_notify(p_channel, p_name);
	ELSIF NOT EXISTS (SELECT FROM %[3]s q WHERE q.name = p_name) THEN
		UPDATE %[2]s l SET queued = false WHERE l.name = p_name;
	END IF;
	RETURN 1;
END
$fn$`

// derivedName names an object beside the lease table t: "leases" becomes
// suffix, a "_leases" suffix is replaced by "_"+suffix, other names get
// "_"+suffix appended; a result longer than PostgreSQL's 63 bytes is
// shortened with a hash of t's name.
func derivedName(t tableName, suffix string) tableName {
	n := t.name
	switch {
	case n == "leases":
		n = suffix
	case strings.HasSuffix(n, "_leases"):
		n = strings.TrimSuffix(n, "leases") + suffix
	default:
		n += "_" + suffix
	}
	if len(n) > 63 {
		sum := sha256.Sum256([]byte(t.name))
		n = n[:63-17] + "_" + hex.EncodeToString(sum[:8])
	}
	return tableName{schema: t.schema, name: n}
}

// queueObjects are the identifiers of the objects schema version 2 adds.
type queueObjects struct{ queue, wait, release, txn string }

func queueObjectsFor(t tableName) queueObjects {
	return queueObjects{
		queue:   derivedName(t, "queue").ident(),
		wait:    derivedName(t, "wait").ident(),
		release: derivedName(t, "release").ident(),
		txn:     derivedName(t, "txn").ident(),
	}
}

// createQueue creates the queue table and the functions of the (resolved)
// lease table in the migration transaction tx, which holds the migration
// lock.
func createQueue(ctx context.Context, tx pgx.Tx, lease tableName) error {
	o := queueObjectsFor(lease)
	for _, stmt := range []string{
		fmt.Sprintf(addQueuedSQL, lease.ident()),
		fmt.Sprintf(createQueueSQL, o.queue),
		fmt.Sprintf(markQueuedSQL, lease.ident(), o.queue),
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return boundary(ctx, "migrate: create the queue of "+lease.String(), err)
		}
	}
	return replaceFunctions(ctx, tx, lease)
}

// functionsPrefix starts the comment on the release function that names
// the version of the function set (a hash of the statements that create
// the three functions): a table whose functions an earlier build created
// (no comment, or another hash) gets them replaced when it is opened with
// migration (refreshFunctions), with the same signatures.
const functionsPrefix = "leasehold queue functions "

// releaseSignature is the argument list of the release function, which
// carries the version comment.
const releaseSignature = "(text, text, bigint, text)"

// functionsOf returns the statements that create (or replace) the
// functions of the (resolved) lease table, and their version comment.
func functionsOf(lease tableName) ([]string, string) {
	o := queueObjectsFor(lease)
	channel := "'" + strings.ReplaceAll(lease.channel(), "'", "''") + "'"
	stmts := []string{
		fmt.Sprintf(waitFnSQL, o.wait, lease.ident(), o.queue, channel),
		fmt.Sprintf(releaseFnSQL, o.release, lease.ident(), o.queue),
		fmt.Sprintf(txnFnSQL, o.txn, recordsTableFor(lease).ident()),
	}
	h := sha256.New()
	for _, s := range stmts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return stmts, functionsPrefix + hex.EncodeToString(h.Sum(nil)[:12])
}

// replaceFunctions creates or replaces the functions of the lease table
// and comments the release function with their version, in the migration
// transaction tx.
func replaceFunctions(ctx context.Context, tx pgx.Tx, lease tableName) error {
	stmts, version := functionsOf(lease)
	stmts = append(stmts, fmt.Sprintf("COMMENT ON FUNCTION %s%s IS '%s'", queueObjectsFor(lease).release, releaseSignature, version))
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege: not the functions' owner
				return errNotOwner
			}
			return boundary(ctx, "migrate: create the functions of "+lease.String(), err)
		}
	}
	return nil
}

// errNotOwner: the opener may not replace the functions.
var errNotOwner = errors.New("postgres: not the owner of the queue functions")

// functionsVersionSQL reads the version comment of the release function
// ($1: its name and argument list), "" when it has none.
const functionsVersionSQL = `SELECT coalesce(obj_description(to_regprocedure($1), 'pg_proc'), '')`

// refreshFunctions replaces the functions of a complete version 2 lease
// table when their version comment is not this build's (a table created
// by an earlier build of version 2), under the migration lock. The check
// is one read. A role that does not own the functions leaves them as they
// are (they are compatible, only older): `leasehold store init` run by
// their owner replaces them.
func refreshFunctions(ctx context.Context, pool *pgxpool.Pool, lease tableName) error {
	_, version := functionsOf(lease)
	sig := queueObjectsFor(lease).release + releaseSignature
	var have string
	if err := pool.QueryRow(ctx, functionsVersionSQL, sig).Scan(&have); err != nil {
		return boundary(ctx, "look up the functions of "+lease.String(), err)
	}
	if have == version {
		return nil
	}
	err := migrateTx(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, functionsVersionSQL, sig).Scan(&have); err != nil {
			return boundary(ctx, "migrate: look up the functions of "+lease.String(), err)
		}
		if have == version {
			return nil
		}
		return replaceFunctions(ctx, tx, lease)
	})
	if errors.Is(err, errNotOwner) {
		return nil
	}
	return err
}

// txnFnSQL is Txn in one call: it gives every key (p_keys, sorted, without
// duplicates) a row (a placeholder when absent) and locks it, one key
// after the other in key order — so that it never holds a key while it
// waits for a smaller one, as LockedTxn does not either — and checks the conditions (p_ikeys at p_iver: 0 = absent) and that every
// add (kind 2) applies to a counter without overflow. If all hold it
// applies the writes (kind 0 put p_wval, 1 delete, 2 add p_wadd) and
// returns the written rows' new versions (r_applied true); otherwise it
// writes nothing more and returns the locked rows, from which the caller
// reports the first failed condition as applyTxn would.
const txnFnSQL = `CREATE OR REPLACE FUNCTION %[1]s(p_keys text[], p_ikeys text[], p_iver bigint[],
	p_wkeys text[], p_wkind smallint[], p_wval bytea[], p_wadd bigint[])
RETURNS TABLE (r_applied boolean, r_key text, r_value bytea, r_version bigint, r_live boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_n integer := 0;
	v_k text;
BEGIN
	FOREACH v_k IN ARRAY p_keys LOOP
		INSERT INTO %[2]s (key, value, version) VALUES (v_k, NULL, 0) ON CONFLICT (key) DO NOTHING;
		PERFORM 1 FROM %[2]s r WHERE r.key = v_k FOR UPDATE;
		IF FOUND THEN
			v_n := v_n + 1;
		END IF;
	END LOOP;
	IF v_n <> cardinality(p_keys) THEN
		RAISE EXCEPTION 'transaction locked %% of its %% keys', v_n, cardinality(p_keys);
	END IF;
	IF EXISTS (SELECT FROM unnest(p_ikeys, p_iver) AS c(k, v) JOIN %[2]s r ON r.key = c.k
			WHERE NOT CASE WHEN c.v = 0 THEN r.value IS NULL ELSE r.value IS NOT NULL AND r.version = c.v END)
		OR EXISTS (SELECT FROM unnest(p_wkeys, p_wkind, p_wadd) AS w(k, kind, a) JOIN %[2]s r ON r.key = w.k
			WHERE w.kind = 2 AND NOT coalesce((` + counterOf + `)` + int64Range + `
				AND (` + counterOf + `) + w.a` + int64Range + `, false)) THEN
		RETURN QUERY SELECT false, r.key, r.value, r.version, r.value IS NOT NULL FROM %[2]s r WHERE r.key = ANY(p_keys);
		RETURN;
	END IF;
	RETURN QUERY WITH u AS (
		UPDATE %[2]s r SET
			value = CASE w.kind WHEN 0 THEN w.v WHEN 1 THEN NULL
				ELSE convert_to(((` + counterOf + `) + w.a)::bigint::text, 'UTF8') END,
			version = r.version + 1
		FROM unnest(p_wkeys, p_wkind, p_wval, p_wadd) AS w(k, kind, v, a)
		WHERE r.key = w.k AND (w.kind <> 1 OR r.value IS NOT NULL)
		RETURNING r.key, r.version
	) SELECT true, u.key, NULL::bytea, u.version, true FROM u;
END
$fn$`
