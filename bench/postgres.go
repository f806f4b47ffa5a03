package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func postgresLockers(ctx context.Context, url string) ([]locker, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	atEnd(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_raw_locks (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		return nil, err
	}
	upsertTry := func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
		owner := time.Now().String()
		tag, err := pool.Exec(ctx, `INSERT INTO bench_raw_locks (name, owner, expires_at) VALUES ($1, $2, now() + interval '10 seconds')
			ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
			WHERE bench_raw_locks.expires_at < now()`, key, owner)
		if err != nil || tag.RowsAffected() != 1 {
			return nil, false, err
		}
		return func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `DELETE FROM bench_raw_locks WHERE name = $1 AND owner = $2`, key, owner)
			return err
		}, true, nil
	}
	upsert := locker{name: "raw PostgreSQL INSERT … ON CONFLICT … WHERE expired + DELETE (1 ms polling)", try: upsertTry, wait: pollWait(upsertTry, time.Millisecond)}

	advisoryTry := func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, false, err
		}
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, key).Scan(&ok); err != nil || !ok {
			conn.Release()
			return nil, false, err
		}
		return func(ctx context.Context) error {
			defer conn.Release()
			_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext($1))`, key)
			return err
		}, true, nil
	}
	advisoryWait := func(ctx context.Context, key string) (func(context.Context) error, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, key); err != nil {
			conn.Release()
			return nil, err
		}
		return func(ctx context.Context) error {
			defer conn.Release()
			_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext($1))`, key)
			return err
		}, nil
	}
	advisory := locker{name: "raw PostgreSQL advisory lock (blocking wait; session-bound, no expiry, no token)", try: advisoryTry, wait: advisoryWait}
	ours, err := leaseholdLockers(ctx, "PostgreSQL", url)
	if err != nil {
		return nil, fmt.Errorf("leasehold on PostgreSQL: %w", err)
	}
	return append([]locker{upsert, advisory}, ours...), nil
}
