package workflowbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/internal/backoff"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// The three strategies of source document 004, ported from its Python
// (asyncpg, redis-py) to Go line by line, with the same budgets: its
// "optimistic" lock (which takes SELECT ... FOR UPDATE and returns success
// when the instance is already in the target state), its pessimistic lock
// (SET LOCAL lock_timeout; SELECT ... FOR UPDATE NOWAIT), and its Redis
// lock (SET NX EX with 3 tries 100ms apart, compare-and-delete in Lua)
// around the same read-check-update of the workflows table.

// docResult is the dict the document's methods return.
type docResult struct {
	success    bool
	idempotent bool   // success without an update: "already in the target state"
	newVersion int64  // set when its UPDATE returned a row
	lockFailed bool   // NOWAIT refused / Redis lock not acquired / retries spent
	current    string // the state it read, when it read one
	err        string
}

const docTable = "wfbench_workflows"

func docSchema(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+docTable+` (
		workflow_id text PRIMARY KEY,
		state text NOT NULL,
		version integer NOT NULL DEFAULT 0,
		workflow_data jsonb,
		operated_by text,
		operated_at timestamptz)`)
	return err
}

func docCreate(ctx context.Context, pool *pgxpool.Pool, id, state string) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+docTable+` (workflow_id, state, version) VALUES ($1, $2, 0)`, id, state)
	return err
}

func docRead(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
	var s string
	err := pool.QueryRow(ctx, `SELECT state FROM `+docTable+` WHERE workflow_id = $1`, id).Scan(&s)
	return s, err
}

func docCheck(ctx context.Context, pool *pgxpool.Pool, id string) (string, uint64, error) {
	var s string
	var v int64
	err := pool.QueryRow(ctx, `SELECT state, version FROM `+docTable+` WHERE workflow_id = $1`, id).Scan(&s, &v)
	return s, uint64(v), err
}

// docOptimistic is OptimisticLockWorkflow.transition: MAX_RETRIES = 3; in a
// transaction, SELECT ... FOR UPDATE, the state check (success,
// idempotent, when already in to_state), UPDATE ... WHERE version = $5
// RETURNING version, and on no row a sleep of 0.05 * 2**retry seconds
// (inside the transaction, as written).
func docOptimistic(ctx context.Context, pool *pgxpool.Pool, id, from, to, operator string) docResult {
	const maxRetries = 3
	for retry := range maxRetries {
		var res docResult
		done := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var state string
			var version int64
			var data []byte
			err := tx.QueryRow(ctx, `SELECT state, version, workflow_data FROM `+docTable+`
				WHERE workflow_id = $1 FOR UPDATE`, id).Scan(&state, &version, &data)
			if errors.Is(err, pgx.ErrNoRows) {
				res, done = docResult{err: "工作流不存在"}, true
				return nil
			}
			if err != nil {
				return err
			}
			if state != from {
				if state == to {
					res, done = docResult{success: true, idempotent: true, current: state}, true
					return nil
				}
				res, done = docResult{current: state, err: fmt.Sprintf("状态不匹配: 期望%s, 实际%s", from, state)}, true
				return nil
			}
			var nv int64
			err = tx.QueryRow(ctx, `UPDATE `+docTable+` SET state = $1, version = version + 1,
				operated_by = $2, operated_at = $3 WHERE workflow_id = $4 AND version = $5 RETURNING version`,
				to, operator, time.Now().UTC(), id, version).Scan(&nv)
			if err == nil {
				res, done = docResult{success: true, newVersion: nv, current: to}, true
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return backoff.Sleep(ctx, time.Duration(float64(50*time.Millisecond)*float64(int(1)<<retry)))
		})
		if err != nil {
			return docResult{err: err.Error()}
		}
		if done {
			return res
		}
	}
	return docResult{lockFailed: true, err: fmt.Sprintf("乐观锁冲突%d次重试均失败", maxRetries)}
}

// docPessimistic is PessimisticLockWorkflow.transition_atomic as the
// document describes it ("the lock is released when the transaction
// commits or rolls back"): in one transaction, SET LOCAL lock_timeout =
// 5000ms, SELECT ... FOR UPDATE NOWAIT (lock_not_available → "获取锁超时"),
// the state check ("状态已变更" when not in from_state), an unconditional
// UPDATE ... SET version = version + 1, commit.
func docPessimistic(ctx context.Context, pool *pgxpool.Pool, id, from, to string) docResult {
	var res docResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5000ms'`); err != nil {
			return err
		}
		var wid, state string
		var version int64
		err := tx.QueryRow(ctx, `SELECT workflow_id, state, version FROM `+docTable+`
			WHERE workflow_id = $1 FOR UPDATE NOWAIT`, id).Scan(&wid, &state, &version)
		if err != nil {
			return err
		}
		if state != from {
			res = docResult{current: state, err: "状态已变更"}
			return nil
		}
		var nv int64
		if err := tx.QueryRow(ctx, `UPDATE `+docTable+` SET state = $1, version = version + 1
			WHERE workflow_id = $2 RETURNING version`, to, id).Scan(&nv); err != nil {
			return err
		}
		res = docResult{success: true, newVersion: nv, current: to}
		return nil
	})
	return docPessimisticErr(res, err, id)
}

// docPessimisticAsPrinted is the same code as printed: asyncpg's
// pool.acquire() opens no transaction, so every statement commits on its
// own: SET LOCAL only warns, the FOR UPDATE NOWAIT lock ends with its
// SELECT, and the unconditional UPDATE runs unlocked.
func docPessimisticAsPrinted(ctx context.Context, pool *pgxpool.Pool, id, from, to string) docResult {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return docResult{err: err.Error()}
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET LOCAL lock_timeout = '5000ms'`); err != nil {
		return docResult{err: err.Error()}
	}
	var wid, state string
	var version int64
	err = conn.QueryRow(ctx, `SELECT workflow_id, state, version FROM `+docTable+`
		WHERE workflow_id = $1 FOR UPDATE NOWAIT`, id).Scan(&wid, &state, &version)
	if err != nil {
		return docPessimisticErr(docResult{}, err, id)
	}
	if state != from {
		return docResult{current: state, err: "状态已变更"}
	}
	var nv int64
	if err := conn.QueryRow(ctx, `UPDATE `+docTable+` SET state = $1, version = version + 1
		WHERE workflow_id = $2 RETURNING version`, to, id).Scan(&nv); err != nil {
		return docResult{err: err.Error()}
	}
	return docResult{success: true, newVersion: nv, current: to}
}

func docPessimisticErr(res docResult, err error, id string) docResult {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return res
	case errors.As(err, &pe) && pe.Code == "55P03":
		return docResult{lockFailed: true, err: "获取锁超时: " + id}
	case errors.Is(err, pgx.ErrNoRows):
		return docResult{err: "工作流不存在: " + id}
	}
	return docResult{err: err.Error()}
}

// docRedisLock is DistributedWorkflowLock around the document's transition
// logic: acquire (SET wf:lock:ID UUID NX EX 30, retry_times = 3,
// retry_delay_ms = 100), then the same read, state check (success,
// idempotent, when already in to_state) and UPDATE ... WHERE version as its
// optimistic transition, without database locks, then release (GET and
// DEL in Lua when the value is ours). The document gives no transition
// code for this lock; this is its own logic under its own lock.
type docRedisLock struct {
	rdb  *goredis.Client
	pool *pgxpool.Pool
}

var docRelease = goredis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end`)

func (d *docRedisLock) acquire(ctx context.Context, id string) (string, error) {
	key := "wf:lock:" + id
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	value := hex.EncodeToString(b)
	const retryTimes = 3
	for attempt := range retryTimes {
		ok, err := d.rdb.SetNX(ctx, key, value, 30*time.Second).Result()
		if err != nil {
			return "", err
		}
		if ok {
			return value, nil
		}
		if attempt < retryTimes-1 {
			if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
				return "", err
			}
		}
	}
	return "", nil
}

func (d *docRedisLock) transition(ctx context.Context, id, from, to, operator string) docResult {
	value, err := d.acquire(ctx, id)
	if err != nil {
		return docResult{err: err.Error()}
	}
	if value == "" {
		return docResult{lockFailed: true, err: "获取分布式锁失败"}
	}
	defer docRelease.Run(context.WithoutCancel(ctx), d.rdb, []string{"wf:lock:" + id}, value)
	var state string
	var version int64
	if err := d.pool.QueryRow(ctx, `SELECT state, version FROM `+docTable+` WHERE workflow_id = $1`, id).Scan(&state, &version); err != nil {
		return docResult{err: err.Error()}
	}
	if state != from {
		if state == to {
			return docResult{success: true, idempotent: true, current: state}
		}
		return docResult{current: state, err: fmt.Sprintf("状态不匹配: 期望%s, 实际%s", from, state)}
	}
	var nv int64
	err = d.pool.QueryRow(ctx, `UPDATE `+docTable+` SET state = $1, version = version + 1,
		operated_by = $2, operated_at = $3 WHERE workflow_id = $4 AND version = $5 RETURNING version`,
		to, operator, time.Now().UTC(), id, version).Scan(&nv)
	if errors.Is(err, pgx.ErrNoRows) {
		return docResult{err: "version changed under the lock"}
	}
	if err != nil {
		return docResult{err: err.Error()}
	}
	return docResult{success: true, newVersion: nv, current: to}
}
