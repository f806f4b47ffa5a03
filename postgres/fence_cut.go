package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// A cut acquire. When ctx ends while an acquire statement is in flight,
// pgx closes the connection and returns at once, but the statement may
// still run: it may sit in the server's socket buffer, and a backend
// does not notice a closed client before it answers. Issue 28 saw it
// start on the server 2 ms after the call had returned, grant the lease
// to a caller that had given up, and hold the instance of a workflow for
// the lease's TTL (10 s): a release attempted on giving up (a try with
// the same request id) had run before the grant existed. So a cut
// acquire is settled before anything is released: the connection's
// backend is ended (pg_terminate_backend, found by the pid PostgreSQL gave
// the connection; its client port is no guard, since a TCP proxy in
// between has another) and waited for, after which its statement has either committed
// or never will; a grant it made to this owner and request id is then
// released.

// fenceWait bounds the wait for the cut statement's backend to end.
const fenceWait = 2 * time.Second

// terminateSQL ends backend $1 if it is a session of this role, waiting up
// to $2 ms for it to exit; true when it is gone (or was already).
const terminateSQL = `SELECT coalesce(bool_and(pg_terminate_backend(pid, $2::bigint)), true)
	FROM pg_stat_activity WHERE pid = $1::int AND usename = current_user`

// terminateOldSQL and goneSQL do the same on PostgreSQL 13 and older,
// whose pg_terminate_backend does not wait.
const (
	terminateOldSQL = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1::int AND usename = current_user`
	goneSQL         = `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1::int AND usename = current_user)`
)

// backend identifies the server process of one connection.
type backend struct{ pid uint32 }

func backendOf(c *pgxpool.Conn) backend { return backend{pid: c.Conn().PgConn().PID()} }

// acquireRow runs an acquire statement on a connection of its own and
// scans its row into dest. If ctx ends while the statement is in flight
// (pgx then closes the connection), it settles the statement (fence) and
// releases a grant it made to req, waiting for that at most
// storekit.CleanupWait.
func (s *Store) acquireRow(ctx context.Context, req leasehold.AcquireRequest, query string, args []any, dest ...any) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	b := backendOf(c)
	err = c.QueryRow(ctx, query, args...).Scan(dest...)
	cut := err != nil && ctx.Err() != nil && c.Conn().IsClosed()
	c.Release()
	if cut {
		storekit.AfterEnd(ctx, 5*time.Second, func(rctx context.Context) {
			if s.fence(rctx, b) && req.RequestID != "" {
				var token int64
				if err := s.pool.QueryRow(rctx, s.q.mine, req.Name, req.Owner, req.RequestID).Scan(&token); err == nil {
					_ = s.Release(rctx, req.Name, req.Owner, uint64(token))
				}
			}
		})
	}
	return err
}

// fence ends backend b and reports whether it is gone: then no statement
// it was sent can still run.
func (s *Store) fence(ctx context.Context, b backend) bool {
	s.fences.Add(1)
	var gone bool
	err := s.pool.QueryRow(ctx, terminateSQL, int64(b.pid), fenceWait.Milliseconds()).Scan(&gone)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42883" { // undefined_function: before PostgreSQL 14
		return err == nil && gone
	}
	if _, err := s.pool.Exec(ctx, terminateOldSQL, int64(b.pid)); err != nil {
		return false
	}
	for deadline := time.Now().Add(fenceWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := s.pool.QueryRow(ctx, goneSQL, int64(b.pid)).Scan(&gone); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if gone {
			return true
		}
	}
	return false
}
