package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
		return info.checkKind(rt, recordsTable)
	}
	if !migrate {
		return nil
	}
	err = migrateTx(ctx, pool, func(tx pgx.Tx) error { return createRecords(ctx, tx, lease) })
	if err == errNoCreate {
		return nil
	}
	return err
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
	return info.checkKind(rt, recordsTable)
}

// createRecords creates the records table of the (resolved) lease table in
// the migration transaction tx, which holds the migration lock.
func createRecords(ctx context.Context, tx pgx.Tx, lease tableName) error {
	_, err := recordsTable.createIn(ctx, tx, recordsTableFor(lease))
	return err
}
