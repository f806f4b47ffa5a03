package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

var (
	_ leasehold.RecordStore  = (*Store)(nil)
	_ leasehold.RecordLocker = (*Store)(nil)
)

// Versioned records, in the records table beside the lease table (see
// records_schema.go). Get, put, delete and add are one statement each: one
// round trip, one implicit transaction, decided by the database. A write
// that is refused reads the row in the same statement, with a locking read
// that follows the row to its latest version, so that a conflict reports
// the version the record had when it was refused (a row inserted after
// the statement's snapshot is invisible to that read; the statement is
// then run again). Txn and LockedTxn are one transaction each, which locks
// every key it touches, in key order.
//
// Statements are constant strings per table, which pgx prepares once per
// connection and caches.

// refused is the locking read of a refused write's row: it runs only when
// the write w returned nothing.
const refused = `, h AS (
	SELECT version, value IS NOT NULL AS live, value FROM %[1]s
	WHERE key = $1::text AND NOT EXISTS (SELECT FROM w)
	FOR SHARE
)
SELECT true, version, true, value FROM w
UNION ALL
SELECT false, version, live, value FROM h`

const recGetSQL = `SELECT value, version FROM %s WHERE key = $1::text AND value IS NOT NULL`

// recCreateSQL writes a record that must be absent (expect 0): a new row at
// version 1, or a deleted record's row at its next version.
const recCreateSQL = `WITH w AS (
	INSERT INTO %[1]s AS r (key, value, version) VALUES ($1::text, $2::bytea, 1)
	ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = r.version + 1
	WHERE r.value IS NULL
	RETURNING r.version, r.value
)` + refused

// recUpdateSQL writes a record that must be at version $3.
const recUpdateSQL = `WITH w AS (
	UPDATE %[1]s SET value = $2::bytea, version = version + 1
	WHERE key = $1::text AND value IS NOT NULL AND version = $3::bigint
	RETURNING version, value
)` + refused

// recDeleteSQL deletes a record at version $2: the row stays, with a NULL
// value, at the next version.
const recDeleteSQL = `WITH w AS (
	UPDATE %[1]s SET value = NULL, version = version + 1
	WHERE key = $1::text AND value IS NOT NULL AND version = $2::bigint
	RETURNING version, value
)` + refused

// counterOf is the counter value of a row as numeric: 0 for an absent
// record, NULL when the value is not a decimal integer (the bytes of
// strconv.ParseInt's base-10 syntax; escape encoding leaves those as they
// are, and turns other bytes into sequences the pattern refuses).
const counterOf = `CASE WHEN r.value IS NULL THEN 0::numeric
	WHEN encode(r.value, 'escape') ~ '^[+-]?[0-9]+$' THEN encode(r.value, 'escape')::numeric END`

const int64Range = ` BETWEEN -9223372036854775808 AND 9223372036854775807`

// recAddSQL adds $2 to the counter at $1 (0 when absent), unless the record
// is not a counter or the sum would overflow int64.
const recAddSQL = `WITH w AS (
	INSERT INTO %[1]s AS r (key, value, version) VALUES ($1::text, convert_to($2::bigint::text, 'UTF8'), 1)
	ON CONFLICT (key) DO UPDATE SET
		value = convert_to(((` + counterOf + `) + $2::bigint)::bigint::text, 'UTF8'),
		version = r.version + 1
	WHERE (` + counterOf + `)` + int64Range + ` AND (` + counterOf + `) + $2::bigint` + int64Range + `
	RETURNING r.version, r.value
)` + refused

// recPlaceholdersSQL gives every key of a transaction a row, so that all
// of them can be locked: a key without one gets a placeholder (NULL value,
// version 0). Keys come sorted, so concurrent transactions insert them in
// the same order.
const recPlaceholdersSQL = `INSERT INTO %s (key, value, version)
	SELECT k, NULL, 0 FROM unnest($1::text[]) AS k ON CONFLICT (key) DO NOTHING`

// recLockSQL locks the rows of a transaction's keys in key order (ORDER BY
// is applied before the locks are taken).
const recLockSQL = `SELECT key, value, version, value IS NOT NULL FROM %s
	WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE`

// recLockOneSQL locks one key's row for LockedTxn.
const recLockOneSQL = `SELECT value, version, value IS NOT NULL FROM %s WHERE key = $1::text FOR UPDATE`

// recTryLockOneSQL locks one key's row if no one else holds it (LockedTxn,
// for a key that sorts before one it holds).
const recTryLockOneSQL = `SELECT value, version, value IS NOT NULL FROM %s WHERE key = $1::text FOR UPDATE NOWAIT`

// recPlaceholderSQL gives one key a row (a placeholder when absent).
const recPlaceholderSQL = `INSERT INTO %s (key, value, version) VALUES ($1::text, NULL, 0) ON CONFLICT (key) DO NOTHING`

// recWriteSQL applies a transaction's writes to rows it has locked.
const recWriteSQL = `UPDATE %s AS r SET value = u.v, version = u.n
	FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS u(k, v, n) WHERE r.key = u.k`

type recordQueries struct {
	table                            string // for messages
	get, create, update, delete, add string
	placeholders, lock, lockOne      string
	tryLockOne, placeholder          string
	write                            string
	txn                              string // SELECT from the txn function (queue_schema.go)
}

func buildRecordQueries(t, lease tableName) recordQueries {
	id := t.ident()
	return recordQueries{
		table:        t.String(),
		get:          fmt.Sprintf(recGetSQL, id),
		create:       fmt.Sprintf(recCreateSQL, id),
		update:       fmt.Sprintf(recUpdateSQL, id),
		delete:       fmt.Sprintf(recDeleteSQL, id),
		add:          fmt.Sprintf(recAddSQL, id),
		placeholders: fmt.Sprintf(recPlaceholdersSQL, id),
		lock:         fmt.Sprintf(recLockSQL, id),
		lockOne:      fmt.Sprintf(recLockOneSQL, id),
		tryLockOne:   fmt.Sprintf(recTryLockOneSQL, id),
		placeholder:  fmt.Sprintf(recPlaceholderSQL, id),
		write:        fmt.Sprintf(recWriteSQL, id),
		txn: fmt.Sprintf("SELECT r_applied, r_key, r_value, r_version, r_live FROM %s($1::text[], $2::text[], $3::bigint[], $4::text[], $5::smallint[], $6::bytea[], $7::bigint[])",
			queueObjectsFor(lease).txn),
	}
}

// recAttempts bounds the re-runs of a refused write whose row the
// statement's snapshot could not see.
const recAttempts = 4

// recFail translates an error of a record operation: fail's rules, and a
// missing records table explained.
func (s *Store) recFail(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" && ctx.Err() == nil {
		return fmt.Errorf("postgres: records table %s does not exist; create it with `leasehold store init` (postgres.Init) or open without migrate=false", s.rq.table)
	}
	return s.fail(ctx, err)
}

// outcome is what a single-row write statement returned.
type outcome struct {
	ok      bool   // written
	seen    bool   // the row was read (when refused)
	version uint64 // the new version, or the version found
	live    bool   // the record found exists
	value   []byte // the value written or found
}

// write runs a single-row write statement. It runs it again when it was
// refused but the row cannot tell why: when the snapshot could not see
// the row and mustSee is set (a create or add refused for a row inserted
// concurrently), or when the row found is at version expect (possible only
// when expect was not yet written as the statement started).
func (s *Store) write(ctx context.Context, mustSee bool, expect uint64, query string, args ...any) (outcome, error) {
	if err := s.begin(ctx); err != nil {
		return outcome{}, err
	}
	for attempt := 1; ; attempt++ {
		var o outcome
		var version int64
		err := s.pool.QueryRow(ctx, query, args...).Scan(&o.ok, &version, &o.live, &o.value)
		switch {
		case err == nil:
			o.seen, o.version = true, uint64(version)
		case errors.Is(err, pgx.ErrNoRows):
		default:
			// Not retried: the write may have been applied.
			s.again(ctx, err)
			return outcome{}, s.recFail(ctx, err)
		}
		racy := !o.ok && (!o.seen && mustSee || o.seen && o.live && expect != 0 && o.version == expect)
		if !racy {
			return o, nil
		}
		if attempt == recAttempts {
			return outcome{}, fmt.Errorf("postgres: write refused %d times for a record written concurrently; not applied, try again", attempt)
		}
	}
}

func recConflict(key string, expect uint64, o outcome) error {
	e := &leasehold.ConflictError{Key: key, Expected: expect}
	if o.live {
		e.Actual = o.version
	}
	return e
}

// GetRecord implements leasehold.RecordStore.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Versioned{}, err
	}
	r := leasehold.Versioned{Key: key}
	var version int64
	err := s.pool.QueryRow(ctx, s.rq.get, key).Scan(&r.Value, &version)
	if s.again(ctx, err) {
		err = s.pool.QueryRow(ctx, s.rq.get, key).Scan(&r.Value, &version)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	if err != nil {
		return leasehold.Versioned{}, s.recFail(ctx, err)
	}
	r.Version = uint64(version)
	return r, nil
}

// PutRecord implements leasehold.RecordStore.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if value == nil {
		value = []byte{} // NULL is an absent record
	}
	var o outcome
	var err error
	switch {
	case expect == 0:
		o, err = s.write(ctx, true, 0, s.rq.create, key, value)
	case expect > 1<<63-1: // never written: refused for the version found
		o, err = s.write(ctx, false, expect, s.rq.update, key, value, int64(-1))
	default:
		o, err = s.write(ctx, false, expect, s.rq.update, key, value, int64(expect))
	}
	if err != nil {
		return 0, err
	}
	if !o.ok {
		return 0, recConflict(key, expect, o)
	}
	return o.version, nil
}

// DeleteRecord implements leasehold.RecordStore.
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	v := int64(expect)
	if expect == 0 || expect > 1<<63-1 {
		v = -1 // matches no record
	}
	o, err := s.write(ctx, false, expect, s.rq.delete, key, v)
	switch {
	case err != nil:
		return err
	case o.ok:
		return nil
	case !o.live:
		return leasehold.ErrNotFound
	}
	return recConflict(key, expect, o)
}

// AddCounter implements leasehold.RecordStore.
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	o, err := s.write(ctx, true, 0, s.rq.add, key, delta)
	if err != nil {
		return 0, 0, err
	}
	if !o.ok {
		// Refused: say why, from the row as the statement found it.
		n, err := storekit.ParseCounter(key, o.value)
		if err == nil {
			_, err = storekit.AddInt64(key, n, delta)
		}
		if err == nil {
			err = &leasehold.InvalidError{Field: "value", Reason: fmt.Sprintf("record %q is not a counter, or adding %d overflows it", key, delta)}
		}
		return 0, 0, err
	}
	n, err := strconv.ParseInt(string(o.value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: add to %q wrote %q", key, o.value)
	}
	return n, o.version, nil
}

// recRow is a locked row of a transaction.
type recRow struct {
	value   []byte
	version uint64
	live    bool
}

func (r recRow) holds(expect uint64) bool {
	if expect == 0 {
		return !r.live
	}
	return r.live && r.version == expect
}

// Txn implements leasehold.RecordStore in one round trip: one call of the
// schema's txn function (queue_schema.go), which gives every key a row and
// locks it, key after key in key order, checks the conditions and applies
// the writes in one implicit transaction. When it refuses, it returns the
// rows it locked, and the refusal is reported from them (planTxn). Not
// retried after a lost connection: it may have been applied. A call that
// PostgreSQL chose as a deadlock's victim (SQLSTATE 40P01; possible only
// with writers that lock the keys in another order) changed nothing and is
// run again, up to deadlockAttempts times, and then refused as a conflict
// (deadlocked).
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	keys := txnKeys(txn)
	for attempt := 1; ; attempt++ {
		res, err := s.txnCall(ctx, s.pool, keys, txn)
		if !isDeadlock(err) || ctx.Err() != nil {
			if err != nil {
				return leasehold.TxnResult{}, s.txnFail(ctx, err)
			}
			return res, nil
		}
		if attempt == deadlockAttempts {
			return leasehold.TxnResult{}, deadlocked(txn, keys)
		}
		if err := s.afterDeadlock(ctx, attempt); err != nil {
			return leasehold.TxnResult{}, err
		}
	}
}

// querier runs a query on the pool or in a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// txnCall runs txn (whose sorted keys are keys) as one call of the txn
// function on q. Errors are returned as they come (the caller translates
// them); a refusal is a *leasehold.ConflictError or an
// *leasehold.InvalidError.
func (s *Store) txnCall(ctx context.Context, q querier, keys []string, txn leasehold.Txn) (leasehold.TxnResult, error) {
	ikeys, iver := make([]string, 0, len(txn.If)), make([]int64, 0, len(txn.If))
	for _, c := range txn.If {
		v := int64(c.Version)
		if c.Version > 1<<63-1 {
			v = -1 // never written: holds for no row
		}
		ikeys, iver = append(ikeys, c.Key), append(iver, v)
	}
	n := len(txn.Then)
	wkeys, wkind, wval, wadd := make([]string, 0, n), make([]int16, 0, n), make([][]byte, 0, n), make([]int64, 0, n)
	for _, w := range txn.Then {
		kind, value := int16(0), w.Value
		switch {
		case w.Delete:
			kind, value = 1, nil
		case w.Add != 0 && w.Value == nil:
			kind = 2
		case value == nil:
			value = []byte{}
		}
		wkeys, wkind, wval, wadd = append(wkeys, w.Key), append(wkind, kind), append(wval, value), append(wadd, w.Add)
	}
	rows, err := q.Query(ctx, s.rq.txn, keys, ikeys, iver, wkeys, wkind, wval, wadd)
	if err != nil {
		return leasehold.TxnResult{}, err
	}
	applied := true
	cur := make(map[string]recRow, len(keys))
	for rows.Next() {
		var ok bool
		var k string
		var r recRow
		var version int64
		if err := rows.Scan(&ok, &k, &r.value, &version, &r.live); err != nil {
			rows.Close()
			return leasehold.TxnResult{}, err
		}
		applied = applied && ok
		r.version = uint64(version)
		cur[k] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if !applied {
		if len(cur) != len(keys) {
			return leasehold.TxnResult{}, fmt.Errorf("postgres: transaction locked %d of its %d keys", len(cur), len(keys))
		}
		if _, err := planTxn(cur, txn); err != nil {
			return leasehold.TxnResult{}, err
		}
		return leasehold.TxnResult{}, errors.New("postgres: transaction refused by the database, although its conditions hold")
	}
	res := leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}
	for _, w := range txn.Then {
		switch r, ok := cur[w.Key]; {
		case w.Delete:
			res.Versions[w.Key] = 0
		case !ok:
			return leasehold.TxnResult{}, fmt.Errorf("postgres: transaction did not write %q", w.Key)
		default:
			res.Versions[w.Key] = r.version
		}
	}
	return res, nil
}

// txnKeys are the keys txn touches, sorted byte by byte (as the "C"
// collation sorts), without duplicates.
func txnKeys(txn leasehold.Txn) []string {
	keys := make([]string, 0, len(txn.If)+len(txn.Then))
	for _, c := range txn.If {
		keys = append(keys, c.Key)
	}
	for _, w := range txn.Then {
		keys = append(keys, w.Key)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// inTx runs fn in a transaction: COMMIT if it returns nil, else ROLLBACK
// and its error. Only a BEGIN that met a lost connection is retried.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if s.again(ctx, err) {
		tx, err = s.pool.Begin(ctx)
	}
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
		return err
	}
	return tx.Commit(ctx)
}

// txnFail passes leasehold's errors (conflicts, invalid adds) through and
// translates the engine's.
func (s *Store) txnFail(ctx context.Context, err error) error {
	var ce *leasehold.ConflictError
	var ie *leasehold.InvalidError
	if errors.As(err, &ce) || errors.As(err, &ie) {
		return err
	}
	s.again(ctx, err)
	return s.recFail(ctx, err)
}

// applyTxn runs txn inside tx.
func applyTxn(ctx context.Context, tx pgx.Tx, q recordQueries, txn leasehold.Txn) (leasehold.TxnResult, error) {
	keys := txnKeys(txn)

	// Placeholders and locks in one round trip.
	b := &pgx.Batch{}
	b.Queue(q.placeholders, keys)
	b.Queue(q.lock, keys)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return leasehold.TxnResult{}, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return leasehold.TxnResult{}, err
	}
	cur := make(map[string]recRow, len(keys))
	for rows.Next() {
		var k string
		var r recRow
		var version int64
		if err := rows.Scan(&k, &r.value, &version, &r.live); err != nil {
			rows.Close()
			br.Close()
			return leasehold.TxnResult{}, err
		}
		r.version = uint64(version)
		cur[k] = r
	}
	rows.Close()
	if err := errors.Join(rows.Err(), br.Close()); err != nil {
		return leasehold.TxnResult{}, err
	}
	if len(cur) != len(keys) {
		return leasehold.TxnResult{}, fmt.Errorf("postgres: transaction locked %d of its %d keys", len(cur), len(keys))
	}
	p, err := planTxn(cur, txn)
	if err != nil {
		return leasehold.TxnResult{}, err
	}
	if len(p.keys) > 0 {
		tag, err := tx.Exec(ctx, q.write, p.keys, p.values, p.versions)
		if err != nil {
			return leasehold.TxnResult{}, err
		}
		if tag.RowsAffected() != int64(len(p.keys)) {
			return leasehold.TxnResult{}, fmt.Errorf("postgres: transaction wrote %d of its %d rows", tag.RowsAffected(), len(p.keys))
		}
	}
	return p.res, nil
}

// txnPlan is what a transaction writes: the rows (key, value, new version)
// and the result it reports.
type txnPlan struct {
	res      leasehold.TxnResult
	keys     []string
	values   [][]byte
	versions []int64
}

// planTxn checks txn's conditions and adds against its locked rows cur and
// computes its writes, or returns the first failure: a
// *leasehold.ConflictError or an *leasehold.InvalidError.
func planTxn(cur map[string]recRow, txn leasehold.Txn) (txnPlan, error) {
	for _, c := range txn.If {
		if r := cur[c.Key]; !r.holds(c.Version) {
			e := &leasehold.ConflictError{Key: c.Key, Expected: c.Version}
			if r.live {
				e.Actual = r.version
			}
			return txnPlan{}, e
		}
	}
	p := txnPlan{res: leasehold.TxnResult{Versions: make(map[string]uint64, len(txn.Then))}}
	for _, w := range txn.Then {
		r := cur[w.Key]
		var value []byte
		switch {
		case w.Delete:
			p.res.Versions[w.Key] = 0
			if !r.live {
				continue // deleting an absent record changes nothing
			}
		case w.Add != 0 && w.Value == nil:
			n := int64(0)
			if r.live {
				var err error
				if n, err = storekit.ParseCounter(w.Key, r.value); err != nil {
					return txnPlan{}, err
				}
			}
			n, err := storekit.AddInt64(w.Key, n, w.Add)
			if err != nil {
				return txnPlan{}, err
			}
			value = strconv.AppendInt(nil, n, 10)
		default:
			value = w.Value
			if value == nil {
				value = []byte{}
			}
		}
		next := r.version + 1
		if !w.Delete {
			p.res.Versions[w.Key] = next
		}
		p.keys, p.values, p.versions = append(p.keys, w.Key), append(p.values, value), append(p.versions, int64(next))
	}
	return p, nil
}
