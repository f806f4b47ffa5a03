package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The records table sits beside the lease table, in the same schema, with
// a name derived from the lease table's: "leases" or a "_leases" suffix
// becomes "records" ("leasehold_leases" → "leasehold_records"), other
// names get "_records" appended. It is created and checked with the lease
// table, by the same migration under the same advisory lock.

// RecordsSchemaVersion is the version of the records table layout.
const RecordsSchemaVersion = 1

const recordsVersionPrefix = "leasehold record table; schema version "

// createRecordsSQL is the records table. A row whose value is NULL is an
// absent record: a deleted one, which keeps its version so that the key's
// next version is above every earlier one (versions count per key: 1, 2,
// 3, ...), or a placeholder at version 0 that a transaction inserted to lock
// a key it found absent. key compares byte for byte ("C").
const createRecordsSQL = `CREATE TABLE IF NOT EXISTS %s (
	key     text COLLATE "C" PRIMARY KEY,
	value   bytea,
	version bigint NOT NULL CHECK (version >= 0)
) WITH (fillfactor = 70)`

// recordsTableFor derives the records table of a lease table.
func recordsTableFor(t tableName) tableName {
	n := t.name
	switch {
	case n == "leases":
		n = "records"
	case strings.HasSuffix(n, "_leases"):
		n = strings.TrimSuffix(n, "leases") + "records"
	default:
		n += "_records"
	}
	if len(n) > 63 { // PostgreSQL would truncate it: shorten it ourselves, uniquely
		sum := sha256.Sum256([]byte(t.name))
		n = n[:63-17] + "_" + hex.EncodeToString(sum[:8])
	}
	return tableName{schema: t.schema, name: n}
}

func (i tableInfo) checkRecords(t tableName) error {
	switch {
	case i.resolved.name == "":
		return fmt.Errorf("postgres: records table %s does not exist; create it with `leasehold store init` (postgres.Init) or open without migrate=false", t)
	case i.comment == recordsVersionPrefix+strconv.Itoa(RecordsSchemaVersion):
		return nil
	case strings.HasPrefix(i.comment, recordsVersionPrefix):
		return fmt.Errorf("postgres: records table %s has schema version %s; this leasehold uses version %d",
			i.resolved, strings.TrimPrefix(i.comment, recordsVersionPrefix), RecordsSchemaVersion)
	}
	return fmt.Errorf("postgres: table %s exists but is not a leasehold records table (its comment is %q)", i.resolved, i.comment)
}

// ensureRecords checks the records table of an existing (resolved) lease
// table, and creates it when it is missing and migrate is set, in a
// transaction under the migration lock. A missing records table is left
// alone without migrate, and when the role may not create tables (a lease
// table made by an earlier version, whose role has no CREATE privilege):
// the leases keep working, and record operations say how to create it.
func ensureRecords(ctx context.Context, pool *pgxpool.Pool, lease tableName, migrate bool) error {
	rt := recordsTableFor(lease)
	info, err := lookup(ctx, pool, rt)
	if err != nil {
		return boundary(ctx, "look up table "+rt.String(), err)
	}
	if info.resolved.name != "" {
		return info.checkRecords(rt)
	}
	if !migrate {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return boundary(ctx, "migrate", err)
	}
	defer func() { // a no-op after Commit
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
		return boundary(ctx, "migrate: lock", err)
	}
	if err := createRecords(ctx, tx, lease); err != nil {
		if err == errNoCreate {
			return nil
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return boundary(ctx, "migrate: commit", err)
	}
	return nil
}

// errNoCreate reports that the role may not create the records table.
var errNoCreate = errors.New("postgres: the role may not create the records table (no CREATE privilege on its schema)")

// requireRecords reports a missing records table of the (resolved) lease
// table, for Init and Migrate, which must not succeed without one.
func requireRecords(ctx context.Context, q queryRower, lease tableName) error {
	if lease.name == "" {
		return nil // the lease table's own error was reported
	}
	rt := recordsTableFor(lease)
	info, err := lookup(ctx, q, rt)
	if err != nil {
		return boundary(ctx, "look up table "+rt.String(), err)
	}
	if info.resolved.name == "" {
		return fmt.Errorf("postgres: could not create records table %s: the role has no CREATE privilege on its schema; run `leasehold store init` as a role that has", rt)
	}
	return info.checkRecords(rt)
}

// createRecords creates the records table of the (resolved) lease table in
// the migration transaction tx, which holds the migration lock.
func createRecords(ctx context.Context, tx pgx.Tx, lease tableName) error {
	rt := recordsTableFor(lease)
	if _, err := tx.Exec(ctx, fmt.Sprintf(createRecordsSQL, rt.ident())); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return errNoCreate
		}
		return boundary(ctx, "migrate: create table "+rt.String(), err)
	}
	info, err := lookup(ctx, tx, rt)
	if err != nil {
		return boundary(ctx, "migrate: look up table "+rt.String(), err)
	}
	if info.created {
		info.comment = recordsVersionPrefix + strconv.Itoa(RecordsSchemaVersion)
		if _, err := tx.Exec(ctx, fmt.Sprintf("COMMENT ON TABLE %s IS '%s'", info.resolved.ident(), info.comment)); err != nil {
			return boundary(ctx, "migrate: comment", err)
		}
	}
	return info.checkRecords(rt)
}
