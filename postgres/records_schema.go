package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
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

// recordsReady checks the records table of the (resolved) lease table.
// done is false when it is missing and migrate is set: the caller then
// creates it. Without migrate a missing records table is left alone: the
// leases work, and record operations say how to create it.
func recordsReady(ctx context.Context, q queryRower, lease tableName, migrate bool) (done bool, err error) {
	rt := recordsTableFor(lease)
	info, err := lookup(ctx, q, rt)
	if err != nil {
		return false, boundary(ctx, "look up table "+rt.String(), err)
	}
	if info.resolved.name == "" {
		return !migrate, nil
	}
	return true, info.checkRecords(rt)
}

// createRecords creates the records table of the (resolved) lease table in
// the migration transaction tx, which holds the migration lock.
func createRecords(ctx context.Context, tx pgx.Tx, lease tableName) error {
	rt := recordsTableFor(lease)
	if _, err := tx.Exec(ctx, fmt.Sprintf(createRecordsSQL, rt.ident())); err != nil {
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
