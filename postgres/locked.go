package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Lock order. Every transaction of the records table takes its row locks
// (and the placeholder rows it inserts, which lock their keys as much) in
// key order, one key after the other, so that none waits for a key while
// it holds a greater one: the txn function does (queue_schema.go), and so
// does LockedTxn, whose first lock is its own key, wherever that sorts.
// The keys of its Txn that sort before a key it holds are taken without
// waiting; if one of them is busy, LockedTxn lets all its locks go
// (ROLLBACK TO SAVEPOINT) and takes them again, all in key order, waiting
// as long as it may. No wait then closes a cycle, and PostgreSQL's
// deadlock detector (deadlock_timeout, 1s by default) has nothing to
// break. A transaction it does break anyway (writers outside leasehold
// that lock in another order) changed nothing and is run again.

// deadlockAttempts bounds the runs of a transaction that PostgreSQL keeps
// choosing as a deadlock's victim; the last such refusal is a conflict.
const deadlockAttempts = 8

// relockRounds bounds how often one LockedTxn takes its locks again in
// key order because its key changed meanwhile (fn is called again each
// time); past it, the call is refused as a conflict on its key.
const relockRounds = 4

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// deadlocked is the conflict a transaction is refused with after
// deadlockAttempts deadlocks: on its first condition's key (or first key).
func deadlocked(txn leasehold.Txn, keys []string) error {
	ce := &leasehold.ConflictError{Key: keys[0]}
	if len(txn.If) > 0 {
		ce.Key, ce.Expected = txn.If[0].Key, txn.If[0].Version
	}
	return fmt.Errorf("postgres: chosen as a deadlock's victim %d times, not applied: %w", deadlockAttempts, ce)
}

// afterDeadlock waits a jittered moment before a deadlocked transaction
// runs again.
func (s *Store) afterDeadlock(ctx context.Context, attempt int) error {
	s.deadlocks.Add(1)
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<attempt, 50*time.Millisecond)))) + time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// LockedTxn implements leasehold.RecordLocker: BEGIN; lock_timeout for
// this transaction; SELECT ... FOR UPDATE of key; fn; the Txn fn returns,
// run as Txn runs it (the txn function); COMMIT. A lock not granted within
// wait (lock_not_available, at the first lock or any later one of the
// Txn) is leasehold.ErrLockTimeout. lock_timeout counts whole
// milliseconds: wait is rounded up, and a wait below 1ms waits 1ms.
//
// When the Txn touches keys that sort before key, they are locked without
// waiting; if one is busy, every lock is let go and taken again in key
// order (see "Lock order" above), and if key changed meanwhile, fn is
// called again with it as it is now. A deadlock (which this order leaves
// to writers outside leasehold) runs the whole call again, fn included.
//
// The transaction may sit idle (between its statements: while fn runs,
// or while this process is paused, SIGSTOP, swapped out, a VM frozen) for
// at most IdleBound(wait): past it PostgreSQL ends the session
// (idle_in_transaction_session_timeout, transaction-local), rolling the
// transaction back and letting its locks go, so that a paused process
// does not stall every other writer of its keys for as long as the pause
// lasts. The call then fails with the connection's error (nothing
// applied).
func (s *Store) LockedTxn(ctx context.Context, key string, wait time.Duration, fn func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error)) (leasehold.TxnResult, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	// lock_timeout counts whole milliseconds; round up, and at least 1ms
	// (0 would mean no limit).
	ms := max((wait+time.Millisecond-1)/time.Millisecond, 1)
	idle := strconv.FormatInt(IdleBound(wait).Milliseconds(), 10)
	for attempt := 1; ; attempt++ {
		res, fnErr, err := s.lockedTxn(ctx, key, strconv.FormatInt(int64(ms), 10), idle, fn)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return res, nil
		case fnErr != nil:
			return leasehold.TxnResult{}, fnErr
		case errors.As(err, &pe) && pe.Code == "55P03":
			return leasehold.TxnResult{}, fmt.Errorf("record %q: %w (waited %s)", key, leasehold.ErrLockTimeout, time.Duration(ms)*time.Millisecond)
		case isDeadlock(err) && ctx.Err() == nil:
			if attempt == deadlockAttempts {
				return leasehold.TxnResult{}, fmt.Errorf("postgres: chosen as a deadlock's victim %d times, not applied: %w",
					deadlockAttempts, &leasehold.ConflictError{Key: key})
			}
			if err := s.afterDeadlock(ctx, attempt); err != nil {
				return leasehold.TxnResult{}, err
			}
			continue
		}
		return leasehold.TxnResult{}, s.txnFail(ctx, err)
	}
}

// IdleBound is how long a LockedTxn with lock wait `wait` may sit idle
// in its transaction before PostgreSQL ends its session: half the wait, at
// least 2s (a transaction's own pauses between statements are
// milliseconds; the floor keeps a busy machine's scheduling hiccups from
// ending it). Half the wait, so that a writer that started waiting for
// the lock when its holder stopped still gets it within its own wait.
func IdleBound(wait time.Duration) time.Duration {
	return max(wait/2, 2*time.Second).Truncate(time.Millisecond)
}

// lockedSavepoint is set before LockedTxn's first lock: rolling back to it
// lets every lock go.
const lockedSavepoint = "leasehold_locked"

// lockedTxn is one run of LockedTxn, in one transaction; ms is the
// lock_timeout, idle the idle_in_transaction_session_timeout (both
// milliseconds). fnErr is fn's error, when fn failed.
func (s *Store) lockedTxn(ctx context.Context, key, ms, idle string, fn func(cur leasehold.Versioned, exists bool) (leasehold.Txn, error)) (res leasehold.TxnResult, fnErr, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue("SELECT set_config('lock_timeout', $1::text, true)", ms)
		b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1::text, true)", idle)
		b.Queue("SAVEPOINT " + lockedSavepoint)
		b.Queue(s.rq.lockOne, key)
		br := tx.SendBatch(ctx, b)
		_, e1 := br.Exec()
		_, e0 := br.Exec()
		_, e2 := br.Exec()
		r, e3 := scanLocked(br.QueryRow())
		if err := errors.Join(e1, e0, e2, e3, br.Close()); err != nil {
			return err
		}
		held, top := map[string]bool{key: true}, key
		for round := 1; ; round++ {
			txn, err := fn(r.versioned(key), r.live)
			if err != nil {
				fnErr = err
				return err
			}
			if err := txn.Validate(); err != nil {
				return err
			}
			keys := txnKeys(txn)
			var ahead []string // keys to take while holding a greater one
			for _, k := range keys {
				if !held[k] && k < top {
					ahead = append(ahead, k)
				}
			}
			if len(ahead) > 0 {
				ok, err := s.tryLock(ctx, tx, ahead, ms)
				if err != nil {
					return err
				}
				for _, k := range ahead {
					held[k] = ok
				}
				if !ok {
					if round == relockRounds {
						return &leasehold.ConflictError{Key: key, Expected: r.version}
					}
					s.relocks.Add(1)
					all := slices.Compact(slices.Sorted(slices.Values(append(keys, key))))
					rows, err := s.lockInOrder(ctx, tx, all)
					if err != nil {
						return err
					}
					clear(held)
					for _, k := range all {
						held[k] = true
					}
					top = all[len(all)-1]
					if n := rows[key]; n.live != r.live || n.live && n.version != r.version {
						r = n // key changed while it was let go: decide again
						continue
					}
				}
			}
			res, err = s.txnCall(ctx, tx, keys, txn)
			return err
		}
	})
	return res, fnErr, err
}

// scanLocked reads a row of recLockOneSQL; a missing row is an absent
// record.
func scanLocked(row pgx.Row) (recRow, error) {
	var r recRow
	var version int64
	err := row.Scan(&r.value, &version, &r.live)
	if errors.Is(err, pgx.ErrNoRows) {
		return recRow{}, nil
	}
	if err != nil {
		return recRow{}, err
	}
	r.version = uint64(version)
	return r, nil
}

// versioned is the record r of key as fn sees it.
func (r recRow) versioned(key string) leasehold.Versioned {
	if !r.live {
		return leasehold.Versioned{Key: key}
	}
	return leasehold.Versioned{Key: key, Value: r.value, Version: r.version}
}

// tryLock locks the rows of keys (placeholders where absent) without
// waiting for anyone (a lock_timeout of 1ms for the placeholders, NOWAIT
// for the rows), then sets lock_timeout back to ms. It reports false when
// a key is busy: the transaction is then to be rolled back to
// lockedSavepoint.
func (s *Store) tryLock(ctx context.Context, tx pgx.Tx, keys []string, ms string) (bool, error) {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('lock_timeout', '1', true)")
	for _, k := range keys {
		b.Queue(s.rq.placeholder, k)
		b.Queue(s.rq.tryLockOne, k)
	}
	b.Queue("SELECT set_config('lock_timeout', $1::text, true)", ms)
	br := tx.SendBatch(ctx, b)
	locked := 0
	var errs []error
	for i := range 2 + 2*len(keys) {
		tag, err := br.Exec()
		errs = append(errs, err)
		if err == nil && i > 0 && i%2 == 0 && i <= 2*len(keys) && tag.RowsAffected() == 1 {
			locked++
		}
	}
	err := errors.Join(append(errs, br.Close())...)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "55P03":
		return false, nil
	case err != nil:
		return false, err
	}
	return locked == len(keys), nil
}

// lockInOrder lets every lock of the transaction go (back to
// lockedSavepoint) and locks the rows of keys (sorted; placeholders where
// absent) one after the other, waiting for each as lock_timeout allows.
func (s *Store) lockInOrder(ctx context.Context, tx pgx.Tx, keys []string) (map[string]recRow, error) {
	// On its own (the simple protocol): a transaction that a failed try
	// aborted accepts nothing else, not even the preparation of the
	// statements that follow.
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+lockedSavepoint); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	for _, k := range keys {
		b.Queue(s.rq.placeholder, k)
		b.Queue(s.rq.lockOne, k)
	}
	br := tx.SendBatch(ctx, b)
	rows := make(map[string]recRow, len(keys))
	var err error
	for _, k := range keys {
		if _, err = br.Exec(); err != nil {
			break
		}
		var r recRow
		var version int64
		if err = br.QueryRow().Scan(&r.value, &version, &r.live); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				err = fmt.Errorf("postgres: could not lock record %q", k)
			}
			break
		}
		r.version = uint64(version)
		rows[k] = r
	}
	if err := errors.Join(err, br.Close()); err != nil {
		return nil, err
	}
	return rows, nil
}
