package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
)

// SchemaVersion is the version of the table layout this package creates
// and uses. It is recorded as the lease table's comment. Version 2 added the
// queue table and the server-side functions (queue_schema.go), and the
// lease table's queued column, to version 1; a version 1 table, or a
// version 2 table made before the queued column was added (never
// released), is upgraded in place by migration (Open, New, Migrate, Init).
const SchemaVersion = 2

const versionPrefix = "leasehold lease table; schema version "

// leaseColumnsV1 are the lease table's columns of schema version 1. name
// sorts and compares with the "C" collation: byte for byte, which for UTF-8
// is code point order, the same as Go's string comparison.
const leaseColumnsV1 = `
	name        text COLLATE "C" PRIMARY KEY,
	owner       text NOT NULL,
	request_id  text NOT NULL,
	token       bigint NOT NULL CHECK (token > 0),
	data        bytea NOT NULL,
	ttl_us      bigint NOT NULL CHECK (ttl_us > 0),
	expires_at  timestamptz NOT NULL,
	held        boolean NOT NULL,
	acquired_at timestamptz NOT NULL`

// createSQL is the table: version 1's columns and queued. Rows are updated
// in place far more often than inserted, so pages keep room for HOT
// updates.
const createSQL = `CREATE TABLE IF NOT EXISTS %s (` + leaseColumnsV1 + `,
	queued      boolean NOT NULL DEFAULT false
) WITH (fillfactor = 70)`

// createV1SQL is the lease table of schema version 1, without queued.
const createV1SQL = `CREATE TABLE IF NOT EXISTS %s (` + leaseColumnsV1 + `
) WITH (fillfactor = 70)`

// migrateLockKey is the advisory lock every leasehold migration takes, so
// that concurrent openers create the table one at a time ("leasehol" in
// ASCII).
const migrateLockKey int64 = 0x6c65617365686f6c

// lookupSQL resolves $1 (a quoted, possibly unqualified name) through the
// search_path. created is true when the table was created by the current
// transaction: age(xmin) is 0 only for the transaction's own xid. queued
// tells whether the table has the queued column (the lease table's since
// schema version 2 was completed).
const lookupSQL = `SELECT coalesce(n.nspname, ''), coalesce(c.relname, ''),
	coalesce(obj_description(c.oid, 'pg_class'), ''), coalesce(age(c.xmin) = 0, false),
	current_setting('server_encoding'),
	EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = r.oid AND a.attname = 'queued' AND NOT a.attisdropped)
	FROM (SELECT to_regclass($1) AS oid) r
	LEFT JOIN pg_class c ON c.oid = r.oid
	LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// tableName is a validated table name; schema is empty when unqualified.
type tableName struct{ schema, name string }

func parseTable(s string) (tableName, error) {
	bad := func(reason string) (tableName, error) {
		return tableName{}, &leasehold.InvalidError{Field: "table", Reason: fmt.Sprintf("%q %s", s, reason)}
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return bad("has more than one dot; want table or schema.table")
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return bad("is not a lowercase SQL identifier of at most 63 bytes ([a-z_][a-z0-9_]*, optionally schema.table)")
		}
	}
	if len(parts) == 2 {
		return tableName{schema: parts[0], name: parts[1]}, nil
	}
	return tableName{name: parts[0]}, nil
}

func (t tableName) ident() string {
	if t.schema == "" {
		return pgx.Identifier{t.name}.Sanitize()
	}
	return pgx.Identifier{t.schema, t.name}.Sanitize()
}

func (t tableName) String() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}

// channel is the LISTEN/NOTIFY channel of a resolved table: readable when
// it fits PostgreSQL's 63-byte limit on names, else a hash.
func (t tableName) channel() string {
	c := "leasehold:" + t.String()
	if len(c) > 63 {
		sum := sha256.Sum256([]byte(t.String()))
		c = "leasehold:" + hex.EncodeToString(sum[:16])
	}
	return c
}

type tableInfo struct {
	resolved tableName
	comment  string
	created  bool
	encoding string
	queued   bool // has the queued column
	existing bool // looked up for OpenExisting (messages only)
}

// upgradeHint ends the message about a lease table of an older schema
// version, which an open without migration refuses.
func (i tableInfo) upgradeHint() string {
	if i.existing {
		return "or by opening it for writing (Open; a leasehold run or hold); OpenExisting (leasehold status, release, force-release) never migrates, and refuses an older schema rather than read it"
	}
	return "or open without migrate=false"
}

// ErrNoTable is matched (errors.Is) by the error of an open without
// migration (WithoutMigrate, migrate=false, OpenExisting) that finds no
// lease table: a *NoTableError.
var ErrNoTable = errors.New("postgres: the lease table does not exist")

// NoTableError reports a lease table that does not exist, from an open
// that does not create one. Nothing was created.
type NoTableError struct {
	Table    string // as named (table= or WithTable), schema-qualified if it was
	existing bool   // from OpenExisting
}

func (e *NoTableError) Error() string {
	if e.existing {
		return fmt.Sprintf("postgres: table %s does not exist (nothing was created); create it with `leasehold store init` (postgres.Init), or a first run or hold (Open) creates it", e.Table)
	}
	return fmt.Sprintf("postgres: table %s does not exist; create it with `leasehold store init` (postgres.Init) or open without migrate=false", e.Table)
}

// Is makes a *NoTableError match ErrNoTable.
func (e *NoTableError) Is(target error) bool { return target == ErrNoTable }

// stale reports a lease table that migration upgrades in place: version 1,
// or version 2 without the queued column.
func (i tableInfo) stale() bool {
	return i.comment == versionPrefix+"1" || (i.comment == versionPrefix+"2" && !i.queued)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func lookup(ctx context.Context, q queryRower, t tableName) (tableInfo, error) {
	var i tableInfo
	err := q.QueryRow(ctx, lookupSQL, t.ident()).Scan(&i.resolved.schema, &i.resolved.name, &i.comment, &i.created, &i.encoding, &i.queued)
	return i, err
}

// tableKind is one of the two tables a store uses: how to create it, the
// comment that marks it as leasehold's (with its schema version), and what
// messages call it.
type tableKind struct {
	create  string // CREATE TABLE IF NOT EXISTS, with %s for the name
	prefix  string // of the comment, before the version
	version int
	label   string // "table" or "records table": what is missing or has a version
	noun    string // what a table with another comment is not
	// mayLackCreate: a role without the CREATE privilege gets errNoCreate,
	// not an error, so that the lease table keeps working without records.
	mayLackCreate bool
}

var (
	leaseTable   = tableKind{createSQL, versionPrefix, SchemaVersion, "table", "lease table", false}
	recordsTable = tableKind{createRecordsSQL, recordsVersionPrefix, RecordsSchemaVersion, "records table", "records table", true}
)

// checkKind reports a missing table t of kind k, one of another schema
// version, or one that is not leasehold's.
func (i tableInfo) checkKind(t tableName, k tableKind) error {
	switch {
	case i.resolved.name == "" && k.prefix == versionPrefix:
		return &NoTableError{Table: t.String(), existing: i.existing}
	case i.resolved.name == "":
		return fmt.Errorf("postgres: %s %s does not exist; create it with `leasehold store init` (postgres.Init) or open without migrate=false", k.label, t)
	case k.prefix == versionPrefix && i.comment == versionPrefix+"2" && !i.queued:
		return fmt.Errorf("postgres: %s %s has an early schema version 2 (no queued column); upgrade it with `leasehold store init` (postgres.Init), %s",
			k.label, i.resolved, i.upgradeHint())
	case i.comment == k.prefix+strconv.Itoa(k.version):
		return nil
	case k.prefix == versionPrefix && i.comment == versionPrefix+"1":
		return fmt.Errorf("postgres: %s %s has schema version 1; this leasehold uses version %d: upgrade it with `leasehold store init` (postgres.Init), %s",
			k.label, i.resolved, k.version, i.upgradeHint())
	case strings.HasPrefix(i.comment, k.prefix):
		return fmt.Errorf("postgres: %s %s has schema version %s; this leasehold uses version %d",
			k.label, i.resolved, strings.TrimPrefix(i.comment, k.prefix), k.version)
	}
	return fmt.Errorf("postgres: table %s exists but is not a leasehold %s (its comment is %q)", i.resolved, k.noun, i.comment)
}

// check checks the lease table t, and that the database is UTF8.
func (i tableInfo) check(t tableName) error {
	if i.encoding != "UTF8" {
		return fmt.Errorf("postgres: the database encoding is %s; leasehold needs a UTF8 database", i.encoding)
	}
	return i.checkKind(t, leaseTable)
}

// createIn creates the table t of kind k, if it does not exist, in the
// migration transaction tx, comments it with its schema version when tx
// created it, and checks it.
func (k tableKind) createIn(ctx context.Context, tx pgx.Tx, t tableName) (tableInfo, error) {
	if _, err := tx.Exec(ctx, fmt.Sprintf(k.create, t.ident())); err != nil {
		var pe *pgconn.PgError
		if k.mayLackCreate && errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return tableInfo{}, errNoCreate
		}
		return tableInfo{}, boundary(ctx, "migrate: create table "+t.String(), err)
	}
	info, err := lookup(ctx, tx, t)
	if err != nil {
		return tableInfo{}, boundary(ctx, "migrate: look up table "+t.String(), err)
	}
	if info.created {
		info.comment = k.prefix + strconv.Itoa(k.version)
		if _, err := tx.Exec(ctx, fmt.Sprintf("COMMENT ON TABLE %s IS '%s'", info.resolved.ident(), info.comment)); err != nil {
			return tableInfo{}, boundary(ctx, "migrate: comment", err)
		}
	}
	return info, info.checkKind(t, k)
}

// migrateTx runs fn in a transaction that holds the migration lock, and
// commits it if fn succeeds.
func migrateTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
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
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return boundary(ctx, "migrate: commit", err)
	}
	return nil
}

// prepareTable resolves the table and checks its schema version, creating
// it first when migrate is set and it is missing; likewise its records
// table (records_schema.go). The fast path is two reads; creation runs in
// a transaction under an advisory lock, so that concurrent openers do not
// race, and needs the CREATE privilege.
func prepareTable(ctx context.Context, pool *pgxpool.Pool, name string, migrate, existing bool) (tableName, error) {
	t, err := parseTable(name)
	if err != nil {
		return tableName{}, err
	}
	info, err := lookup(ctx, pool, t)
	if err != nil {
		return tableName{}, boundary(ctx, "look up table "+t.String(), err)
	}
	info.existing = existing
	if info.resolved.name != "" && migrate && info.stale() && info.encoding == "UTF8" {
		// A version 1 table, or an early version 2 one: upgrade it, under
		// the migration lock (another opener may be doing the same; the
		// second finds it done).
		err = migrateTx(ctx, pool, func(tx pgx.Tx) error {
			if info, err = lookup(ctx, tx, t); err != nil {
				return boundary(ctx, "migrate: look up table "+t.String(), err)
			}
			if info.stale() {
				if err := createQueue(ctx, tx, info.resolved); err != nil {
					return err
				}
				info.comment, info.queued = versionPrefix+strconv.Itoa(SchemaVersion), true
				if _, err := tx.Exec(ctx, fmt.Sprintf("COMMENT ON TABLE %s IS '%s'", info.resolved.ident(), info.comment)); err != nil {
					return boundary(ctx, "migrate: comment", err)
				}
			}
			return info.check(t)
		})
		if err != nil {
			return tableName{}, err
		}
	}
	if info.resolved.name != "" || !migrate || info.encoding != "UTF8" {
		if err := info.check(t); err != nil {
			return tableName{}, err
		}
		if migrate && info.resolved.name != "" {
			if err := refreshFunctions(ctx, pool, info.resolved); err != nil {
				return tableName{}, err
			}
		}
		return info.resolved, ensureRecords(ctx, pool, info.resolved, migrate)
	}
	err = migrateTx(ctx, pool, func(tx pgx.Tx) error {
		if info, err = leaseTable.createIn(ctx, tx, t); err != nil {
			return err
		}
		if info.created {
			if err := createQueue(ctx, tx, info.resolved); err != nil {
				return err
			}
		}
		return createRecords(ctx, tx, info.resolved)
	})
	if err != nil {
		return tableName{}, err
	}
	return info.resolved, nil
}

// boundary translates an error outside a Store (opening, migrating):
// context errors pass through, others keep only their message.
func boundary(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("postgres: %s: %s", what, pgMessage(err))
}

// Migrate creates the lease table (DefaultTable when table is empty) and
// its records table in pool's database if they do not exist, and checks
// the schema versions of existing ones. It is safe to run concurrently from
// many processes: creation is serialised by a transaction-scoped advisory
// lock. It needs the CREATE privilege on the schema only when a table is
// missing.
func Migrate(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if table == "" {
		table = DefaultTable
	}
	t, err := prepareTable(ctx, pool, table, true, false)
	if err != nil {
		return err
	}
	return requireRecords(ctx, pool, t)
}

// Init connects to the database named by rawURL (as Open does, honouring
// table=), creates the lease table and its records table if they are
// missing, checks their schema versions, and disconnects. It is what
// `leasehold store init` runs; a migrate=false parameter is ignored, since
// creating is the point.
func Init(ctx context.Context, rawURL string) error {
	s, err := open(ctx, rawURL, nil, func(c *config) { c.migrate = true })
	if err != nil {
		return err
	}
	lease, _ := parseTable(s.display)
	if err := requireRecords(ctx, s.pool, lease); err != nil {
		s.Close()
		return err
	}
	return s.Close()
}
