package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver the sqlite store uses
)

// sqliteLockers returns the raw SQLite pair (the reference: a conditional
// upsert that takes a free or expired lock and an owner-checked delete,
// each its own transaction, on a file with the store's pragmas: WAL,
// synchronous=FULL) and leasehold's SQLite store, each on its own file in
// dir ("": a new temporary directory, removed by cleanup).
func sqliteLockers(ctx context.Context, dir string) ([]locker, func(), error) {
	cleanup := func() {}
	if dir == "" {
		d, err := os.MkdirTemp("", "leasehold-bench-sqlite-")
		if err != nil {
			return nil, nil, err
		}
		dir, cleanup = d, func() { os.RemoveAll(d) }
	}
	raw := filepath.Join(dir, fmt.Sprintf("raw-%d.db", time.Now().UnixNano()))
	db, err := sql.Open("sqlite", "file:"+raw+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE locks (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		db.Close()
		cleanup()
		return nil, nil, err
	}
	rawTry := func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
		owner := freshKey("owner")
		now := time.Now().UnixNano()
		res, err := db.ExecContext(ctx, `INSERT INTO locks(name, owner, expires) VALUES (?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
			WHERE locks.expires < ?`, key, owner, now+int64(10*time.Second), now)
		if err != nil {
			return nil, false, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil, false, nil
		}
		return func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, `DELETE FROM locks WHERE name = ? AND owner = ?`, key, owner)
			return err
		}, true, nil
	}
	ref := locker{name: "raw SQLite conditional upsert + delete (WAL, synchronous=FULL; 1 ms polling)", try: rawTry, wait: pollWait(rawTry, time.Millisecond)}
	abs, err := filepath.Abs(dir)
	if err != nil {
		db.Close()
		cleanup()
		return nil, nil, err
	}
	ours, err := leaseholdLockers(ctx, "SQLite", "sqlite://"+filepath.Join(abs, fmt.Sprintf("leasehold-%d.db", time.Now().UnixNano())))
	if err != nil {
		db.Close()
		cleanup()
		return nil, nil, fmt.Errorf("leasehold on SQLite: %w", err)
	}
	return append([]locker{ref}, ours...), func() { db.Close(); cleanup() }, nil
}
