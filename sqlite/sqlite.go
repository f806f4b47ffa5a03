// Package sqlite is leasehold's embedded default store: one SQLite file,
// through a pure-Go driver (no cgo), in WAL mode, shared safely by every
// process on one host that opens the same file.
//
// Expiry is judged on the host's boot-time clock (CLOCK_BOOTTIME), which all
// processes share, which keeps running during suspend, and which wall-clock
// jumps do not move. Each row also records the boot id
// (/proc/sys/kernel/random/boot_id); after a reboot every lease of the
// previous boot is known to be free. Fencing counters live in the file and
// are committed with synchronous=FULL, so tokens keep increasing across
// restarts, crashes and reboots.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/leasestate"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

var (
	_ leasehold.Store   = (*Store)(nil)
	_ leasehold.Watcher = (*Store)(nil)
)

const schema = `
CREATE TABLE IF NOT EXISTS leasehold_leases (
	name        TEXT PRIMARY KEY,
	owner       TEXT NOT NULL,
	request_id  TEXT NOT NULL,
	token       INTEGER NOT NULL,
	data        BLOB,
	ttl_ns      INTEGER NOT NULL,
	expires_ns  INTEGER NOT NULL,
	boot_id     TEXT NOT NULL,
	held        INTEGER NOT NULL,
	acquired_ns INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leasehold_meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leasehold_records (
	key     TEXT PRIMARY KEY,
	value   BLOB,             -- NULL once deleted: the row keeps the key's version
	version INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO leasehold_meta(key, value) VALUES ('schema_version', '1');
`

// Store is a lease store in one SQLite file. It is safe for concurrent use
// by many goroutines and by several processes on one host.
type Store struct {
	db     *sql.DB
	path   string
	clock  clock.Clock
	bootID string

	writeMu sync.Mutex // one writer per process; other processes wait on SQLite's lock

	ro *roFiles // OpenReadOnly's (readonly.go); nil when opened for writing

	watch watchHub
}

// Option configures a Store.
type Option func(*config)

type config struct {
	clock  clock.Clock
	bootID string
}

// WithClock sets the clock whose Boot reading judges expiry. Default:
// clock.Real(). Every process sharing a file must use the host's clock.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithBootID overrides the boot id read from the kernel (for tests that
// simulate a reboot).
func WithBootID(id string) Option { return func(cfg *config) { cfg.bootID = id } }

// Open opens (creating if needed) the store file at path, and its parent
// directory.
//
// Opening needs write access to the file and to its directory (SQLite
// makes the -wal and -shm files beside it); without it Open fails with an
// error that says so (see OpenReadOnly for a reader that has only read
// access).
func Open(path string, opts ...Option) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sqlite: create directory: %w", err)
		}
	}
	q := url.Values{}
	q.Add("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(0)
	if err := createSchema(db); err != nil {
		db.Close()
		if isReadOnly(err) {
			return nil, noWriteError(path, "opening it to take or release leases", err)
		}
		return nil, fmt.Errorf("sqlite: create schema in %s: %w", path, err)
	}
	s.db = db
	s.watch.init(s)
	return s, nil
}

// newStore checks path and applies opts, for Open and OpenReadOnly.
func newStore(path string, opts []Option) (*Store, error) {
	if path == "" {
		return nil, &leasehold.InvalidError{Field: "path", Reason: "must not be empty"}
	}
	if strings.ContainsAny(path, "?#\x00") {
		return nil, &leasehold.InvalidError{Field: "path", Reason: fmt.Sprintf("%q must not contain '?', '#' or NUL", path)}
	}
	cfg := config{clock: clock.Real()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.bootID == "" {
		cfg.bootID = readBootID()
	}
	return &Store{path: path, clock: cfg.clock, bootID: cfg.bootID}, nil
}

// createSchema applies the pragmas (on the first connection) and the
// schema. Several processes opening a new file at once can find it locked
// while one of them switches it to WAL, which SQLite does not wait for
// (busy_timeout does not apply): retry with jittered backoff for up to 30s.
func createSchema(db *sql.DB) error {
	deadline := time.Now().Add(30 * time.Second)
	retry := backoff.New(2*time.Millisecond, 200*time.Millisecond)
	for {
		_, err := db.Exec(schema)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(retry.Next())
	}
}

func isBusy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// Path returns the file the store uses.
func (s *Store) Path() string { return s.path }

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func (s *Store) now() int64 { return int64(s.clock.Boot()) }

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const selectRow = `SELECT name, owner, request_id, token, data, ttl_ns, expires_ns, boot_id, held, acquired_ns
	FROM leasehold_leases WHERE name = ?`

// load reads a row; a row from another boot is treated as expired.
func (s *Store) load(ctx context.Context, q queryer, name string) (*leasestate.Row, error) {
	var r leasestate.Row
	var token, ttl, acquired int64
	var bootID string
	var held int
	err := q.QueryRowContext(ctx, selectRow, name).Scan(&r.Name, &r.Owner, &r.RequestID, &token, &r.Data,
		&ttl, &r.Expires, &bootID, &held, &acquired)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, translate(err)
	}
	r.Token, r.TTL, r.Held, r.Acquired = uint64(token), time.Duration(ttl), held != 0, time.Unix(0, acquired)
	if bootID != s.bootID {
		r.Expires = math.MinInt64
	}
	return &r, nil
}

// Get implements leasehold.Store.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	var r *leasestate.Row
	err := s.readDB(func(db *sql.DB) (err error) {
		r, err = s.load(ctx, db, name)
		return err
	})
	if err != nil {
		return leasehold.Record{}, err
	}
	now := s.now()
	if !r.Live(now) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	return r.Record(now), nil
}

// List implements leasehold.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []leasehold.Record
	err := s.readDB(func(db *sql.DB) (err error) {
		out, err = s.list(ctx, db, prefix)
		return err
	})
	return out, err
}

func (s *Store) list(ctx context.Context, db *sql.DB, prefix string) ([]leasehold.Record, error) {
	now := s.now()
	// Prefix match on bytes: names in [prefix, prefix+U+10FFFF...) is awkward
	// in SQL, so filter in Go after a range scan that starts at prefix.
	rows, err := db.QueryContext(ctx, `SELECT name, owner, token, data, ttl_ns, expires_ns, acquired_ns
		FROM leasehold_leases WHERE held = 1 AND boot_id = ? AND expires_ns > ? AND name >= ? ORDER BY name`,
		s.bootID, now, prefix)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []leasehold.Record
	for rows.Next() {
		var r leasehold.Record
		var token, ttl, expires, acquired int64
		if err := rows.Scan(&r.Name, &r.Owner, &token, &r.Data, &ttl, &expires, &acquired); err != nil {
			return nil, translate(err)
		}
		if !strings.HasPrefix(r.Name, prefix) {
			break
		}
		r.Token, r.TTL, r.Remaining, r.Acquired = uint64(token), time.Duration(ttl), time.Duration(expires-now), time.Unix(0, acquired)
		if len(r.Data) == 0 {
			r.Data = nil
		}
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// Close stops the store's watchers and closes the database.
func (s *Store) Close() error {
	s.watch.close()
	if s.ro != nil {
		s.ro.imm.Close()
	}
	return s.db.Close()
}

// translate maps driver errors to leasehold's; context errors pass through.
func translate(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "database is closed") {
		return leasehold.ErrClosed
	}
	return fmt.Errorf("sqlite: %s", err.Error())
}
