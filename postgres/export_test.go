package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
)

// Setting returns a run-time setting as the Store's sessions see it.
func Setting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// Listens reports how many times the store's Watch listener has
// established LISTEN (1 after the first connection, more after reconnects).
func Listens(s *Store) int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.listens
}

// LostConnections reports how many operations met a lost connection (and
// were retried where that is safe).
func LostConnections(s *Store) int64 { return s.lost.Load() }

// AcquireReruns reports how many times TryAcquire ran its statement again
// because the holder it was refused for was inserted after the statement's
// snapshot.
func AcquireReruns(s *Store) int64 { return s.reruns.Load() }

// WaitSteps reports how many times the Store's AcquireWait calls have
// called the wait function.
func WaitSteps(s *Store) int64 { return s.steps.Load() }

// WaiterNotes reports how many notifications the Store's waiters received.
func WaiterNotes(s *Store) int64 { return s.notes.Load() }

// Channel is the Store's LISTEN/NOTIFY channel.
func Channel(s *Store) string { return s.watch.channel }

// QueueTable is the Store's queue table, quoted and schema-qualified.
func QueueTable(s *Store) string { return s.q.queueTable }

// LeaseTableV1DDL is the lease table's CREATE TABLE statement of schema
// version 1, with %s for its name.
const LeaseTableV1DDL = createV1SQL

// QueueTableDDL is the queue table's CREATE TABLE statement, with %s for
// its name.
const QueueTableDDL = createQueueSQL

// Leave runs AcquireWait's cleanup for a waiter that gives up.
func Leave(ctx context.Context, s *Store, name, owner, waiter, rid string) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.leaveNow(lctx, leasehold.AcquireRequest{Name: name, Owner: owner}, waiter, rid)
}

// WaitStep calls the wait function once for waiter.
func WaitStep(ctx context.Context, s *Store, name, owner, waiter, rid string, ttl time.Duration) (granted bool, token int64, err error) {
	var st step
	err = s.pool.QueryRow(ctx, s.q.wait, name, waiter, owner, rid, []byte{}, micros(ttl), micros(s.window)).
		Scan(&st.granted, &st.token, &st.owner, &st.expires, &st.acquired, &st.head, &st.now)
	return st.granted, st.token, err
}

// Queued reports whether owner has a live entry in name's queue.
func Queued(ctx context.Context, s *Store, name, owner string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+s.q.queueTable+
		" WHERE name = $1 AND owner = $2 AND NOT watch AND alive_until > clock_timestamp())", name, owner).Scan(&ok)
	return ok, err
}

// TxnInTx runs txn the way Txn did before schema version 2 (BEGIN, a batch
// of placeholders and locks, the write, COMMIT: four round trips), for
// BenchmarkTxnInterleaved.
func TxnInTx(ctx context.Context, s *Store, txn leasehold.Txn) (leasehold.TxnResult, error) {
	var res leasehold.TxnResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = applyTxn(ctx, tx, s.rq, txn)
		return err
	})
	return res, err
}

// Deadlocks reports how many transactions the Store ran again after
// PostgreSQL chose them as a deadlock's victim.
func Deadlocks(s *Store) int64 { return s.deadlocks.Load() }

// Relocks reports how many times LockedTxn let its locks go and took them
// again in key order.
func Relocks(s *Store) int64 { return s.relocks.Load() }

// Fences reports how many backends the Store ended after an acquire cut
// by its context.
func Fences(s *Store) int64 { return s.fences.Load() }

// NearParam is nearParam: the parameter a URL's key is taken for a typo
// of, or "".
func NearParam(key string) string { return nearParam(key) }
