// Package postgres is a leasehold.Store in a PostgreSQL table, shared by
// every process that can reach the database.
//
// Each lease operation is one round trip and one implicit transaction: a SQL
// statement whose WHERE clause carries the lease rules, or a call of a
// server-side function that the schema installs, so the database decides
// atomically. (TryAcquire of a new name, or of a free lease that waiters
// are queued for, runs a second statement when its cheap first one
// decides nothing.) Expiry is judged by the server's clock: every
// statement compares expires_at with now(), the start time of the
// statement's transaction, which is one instant shared by all parts of the
// statement. A name's row is never deleted, so its fencing counter (token)
// only ever goes up, across releases, expiry, restarts and reconnects.
//
// Waiting is a queue in the database (Store implements leasehold.Queuer):
// waiters of every process are granted in arrival order, a release hands
// the lease to the live head in the same call and notifies that waiter
// alone (LISTEN/NOTIFY, one dedicated connection per Store). Watch still
// works; a release notifies a name only while waiters or watchers exist.
//
// A promotion of a replica (a new timeline) is noticed by every grant, in
// its own statement: grants wait for the hold-back (WithHoldback) and new
// tokens start above the new epoch's floor, so that grants an asynchronous
// replica lost are neither overlapped nor handed out again (epoch.go).
//
// See docs/stores/postgres.md for the schema, the statements, the
// guarantees and what an operator has to provide (one primary at a time,
// a hold-back of at least the longest TTL, or synchronous replication; a
// slewed server clock).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/editdist"
	"github.com/leasehold/leasehold/internal/randid"
)

var (
	_ leasehold.Store   = (*Store)(nil)
	_ leasehold.Watcher = (*Store)(nil)
)

// DefaultTable is the table a Store uses unless WithTable or the URL
// parameter table= names another.
const DefaultTable = "leasehold_leases"

// Store is a lease store in one PostgreSQL table. It is safe for concurrent
// use by many goroutines, and any number of Stores in any number of
// processes may share one table.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool   // Close closes the pool (Open made it)
	table   string // resolved, schema-qualified and quoted
	display string // schema.table, for messages
	q       queries
	rq      recordQueries // records.go
	closed  atomic.Bool
	watch   hub
	window  time.Duration // of waiters and watch interests (queue.go)
	// holdback: no grant for this long after a new timeline is noticed
	// (epoch.go).
	holdback time.Duration
	id       string // this Store's waiter id in watch rows

	lastReset atomic.Int64 // unix ns of the last pool reset after a lost connection
	lost      atomic.Int64 // operations that met a lost connection (for tests)
	reruns    atomic.Int64 // acquires re-run for a holder inserted concurrently (for tests)
	steps     atomic.Int64 // calls of the wait function (for tests)
	notes     atomic.Int64 // notifications received by this Store's waiters (for tests)
	deadlocks atomic.Int64 // transactions run again after a deadlock (for tests)
	relocks   atomic.Int64 // LockedTxn calls that took their locks again in key order (for tests)
	fences    atomic.Int64 // backends ended after a cut acquire (for tests)
}

type config struct {
	table    string
	migrate  bool
	existing bool // OpenExisting: migrate is off, messages say why
	window   time.Duration
	holdback time.Duration
}

// Option configures a Store. The URL's parameters override options given
// to Open (as with the other stores: the operator's URL has the last word).
type Option func(*config)

// WithTable sets the lease table: a lowercase SQL identifier of at most 63
// bytes ([a-z_][a-z0-9_]*), optionally qualified by a schema ("locks.leases").
// The schema must exist. Default: DefaultTable in the first schema of the
// connection's search_path. A bad name makes Open and New return an
// *leasehold.InvalidError.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithoutMigrate makes Open and New leave the schema alone: they only check
// that the table exists with the schema version this package writes, and
// fail otherwise (a missing lease table: a *NoTableError). Use it when the role the store runs as may not create
// tables; create the table once with Init (`leasehold store init`).
func WithoutMigrate() Option { return func(c *config) { c.migrate = false } }

// Open connects to the database named by a postgres:// or postgresql:// URL
// and returns a Store with a pool of its own (pgxpool, whose pool_* URL
// parameters apply). Besides pgx's parameters the URL may carry leasehold's
// own, which are removed before pgx sees it:
//
//	table=NAME     the lease table (see WithTable)
//	migrate=false  do not create the table (see WithoutMigrate)
//	holdback=30s   the hold-back after a promotion (see WithHoldback)
//
// Unless migration is off, Open creates the table if it is missing. Its
// sessions run with synchronous_commit=on unless the URL sets it. A bad
// URL or parameter returns an *leasehold.InvalidError before anything is
// sent; an unreachable server returns an error once ctx ends or the
// connection attempt fails.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	return open(ctx, rawURL, opts, nil)
}

// OpenExisting is Open for a caller that must not change the database (a
// status listing, a release: leasehold status, release and force-release):
// migration is off whatever opts and the URL say (as with WithoutMigrate,
// but a URL's migrate=true does not turn it on). Nothing is created or
// changed: no table, queue table, records table or function; a lease table
// of an older schema version is refused, not upgraded and not read. A
// lease table that does not exist is a *NoTableError (matching
// ErrNoTable). The leases of an existing table can be released as with
// Open.
func OpenExisting(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	return open(ctx, rawURL, opts, func(c *config) { c.migrate, c.existing = false, true })
}

// open is Open, with force applied after the URL's parameters.
func open(ctx context.Context, rawURL string, opts []Option, force Option) (*Store, error) {
	connString, urlOpts, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	all := append(append([]Option(nil), opts...), urlOpts...)
	if force != nil {
		all = append(all, force)
	}
	cfg, err := buildConfig(all)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, &leasehold.InvalidError{Field: "postgres URL", Reason: err.Error()}
	}
	// A grant must be durable before the holder hears of it, or a crash
	// could hand its token out again: commit synchronously even where the
	// database or role defaults to synchronous_commit=off (a URL parameter
	// still overrides this).
	if _, set := pcfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s", err.Error())
	}
	s, err := newStore(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// New returns a Store that uses pool, which the caller keeps: Close does not
// close it. Like Open it creates the table unless WithoutMigrate is given,
// so it takes a context for that round trip (a deliberate addition to the
// pool-only signature: no network call without a context). The listener
// behind Watch dials its own connection with pool's connection settings.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, &leasehold.InvalidError{Field: "pool", Reason: "must not be nil"}
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return newStore(ctx, pool, cfg)
}

func buildConfig(opts []Option) (config, error) {
	cfg := config{table: DefaultTable, migrate: true, window: DefaultWaiterWindow, holdback: DefaultHoldback}
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := parseTable(cfg.table); err != nil {
		return cfg, err
	}
	if cfg.window < MinWaiterWindow || cfg.window > MaxWaiterWindow {
		return cfg, &leasehold.InvalidError{Field: "waiter window", Reason: fmt.Sprintf("%s is outside [%s, %s]", cfg.window, MinWaiterWindow, MaxWaiterWindow)}
	}
	if cfg.holdback < 0 || cfg.holdback > MaxHoldback {
		return cfg, &leasehold.InvalidError{Field: "holdback", Reason: fmt.Sprintf("%s is outside [0, %s]", cfg.holdback, MaxHoldback)}
	}
	return cfg, nil
}

func newStore(ctx context.Context, pool *pgxpool.Pool, cfg config) (*Store, error) {
	t, err := prepareTable(ctx, pool, cfg.table, cfg.migrate, cfg.existing)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, table: t.ident(), display: t.String(), window: cfg.window, holdback: cfg.holdback, id: "s" + randid.Hex(12)}
	s.q = buildQueries(s.table, queueObjectsFor(t))
	s.rq = buildRecordQueries(recordsTableFor(t), t)
	s.watch.init(pool.Config(), t.channel())
	s.watch.window, s.watch.refresh = s.window, s.interest
	return s, nil
}

// Table returns the resolved, schema-qualified name of the lease table
// (for example "public.leasehold_leases").
func (s *Store) Table() string { return s.display }

// Close stops the Watch listener and waits for it, then closes the pool if
// Open created it. Later calls return leasehold.ErrClosed. Leases are not
// released: they expire after their TTL. Close is idempotent.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.watch.close()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// parseURL checks the scheme and takes leasehold's own parameters out of the
// query string, leaving the rest of the URL byte for byte as given (pgx
// parses it, including forms net/url rejects, such as several hosts, and
// its own unescaping of values).
func parseURL(raw string) (string, []Option, error) {
	bad := func(format string, args ...any) (string, []Option, error) {
		return "", nil, &leasehold.InvalidError{Field: "postgres URL", Reason: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return bad("want postgres://[user[:password]@]host[:port]/database[?param=value&...]")
	}
	base, query, _ := strings.Cut(raw, "?")
	if strings.Contains(query, "#") {
		return bad("a fragment (#...) is not allowed")
	}
	if _, err := url.ParseQuery(query); err != nil {
		return bad("query: %s", err.Error())
	}
	var opts []Option
	var kept []string
	seen := map[string]bool{}
	for _, pair := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(pair, "=")
		key, _ := url.QueryUnescape(k)
		value, _ := url.QueryUnescape(v)
		switch key {
		case "":
			continue
		case "table", "migrate", "holdback":
			if seen[key] {
				return bad("%s= given more than once", key)
			}
			seen[key] = true
		default:
			if near := nearParam(key); slices.Contains(ownParams, near) {
				return bad("unknown parameter %s=: did you mean %s=? (leasehold's own parameters are table=, migrate= and holdback=; other parameters go to pgx and to the server as settings)", key, near)
			} else if near != "" {
				return bad("unknown parameter %s=: did you mean %s=? (a parameter pgx does not take goes to the server as a setting, which fails there)", key, near)
			}
			kept = append(kept, pair)
			continue
		}
		switch {
		case key == "holdback":
			d, err := time.ParseDuration(value)
			if err != nil {
				return "", nil, &leasehold.InvalidError{Field: "holdback", Reason: fmt.Sprintf("%q is not a duration such as 30s", value)}
			}
			opts = append(opts, WithHoldback(d))
		case key == "table":
			if _, err := parseTable(value); err != nil {
				return "", nil, err
			}
			opts = append(opts, WithTable(value))
		case value == "false":
			opts = append(opts, WithoutMigrate())
		case value != "true":
			return bad("migrate=%q: want true or false", value)
		}
	}
	if len(kept) > 0 {
		base += "?" + strings.Join(kept, "&")
	}
	return base, opts, nil
}

// ownParams are the URL parameters leasehold takes out of a postgres URL.
var ownParams = []string{"table", "migrate", "holdback"}

// pgxParams are the URL parameters pgx takes (pgconn's, pgxpool's pool_*,
// pgx's caches and query mode), connect_timeout= among them; pgx sends
// any other to the server as a setting.
var pgxParams = []string{
	"host", "port", "database", "user", "password", "passfile", "connect_timeout",
	"sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation", "sslpassword", "sslsni",
	"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_idle_time", "pool_health_check_period", "pool_max_conn_lifetime_jitter", "pool_ping_timeout",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
}

// libpqOnly are libpq's parameters that pgx does not take: they go to the
// server as before, never taken for typos (sslcrl is two edits from
// sslcert).
var libpqOnly = []string{
	"hostaddr", "dbname", "client_encoding", "options", "application_name", "fallback_application_name",
	"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
	"replication", "gssencmode", "requiressl", "sslcompression", "sslcrl", "sslcrldir", "requirepeer",
	"ssl_min_protocol_version", "ssl_max_protocol_version", "gsslib", "gssdelegation", "load_balance_hosts",
}

// nearParam returns the parameter of ownParams, else of pgxParams, that
// key is a typo of (edit distance 1 or 2, or another case), or "". A key
// that pgx does not take goes to the server as a setting, where a typo
// fails far from the URL, after connecting (holdbak=5s, sslmod=require:
// "unrecognized configuration parameter", exit 70). No setting of
// PostgreSQL 15 is that close to these names (TestURLSettingsNotTypos), a
// custom setting has a dot in its name, and libpq's own parameters are
// left alone (libpqOnly).
func nearParam(key string) string {
	if strings.Contains(key, ".") || slices.Contains(libpqOnly, strings.ToLower(key)) {
		return ""
	}
	for _, p := range ownParams {
		if d := editdist.Distance(strings.ToLower(key), p); d >= 1 && d <= 2 || d == 0 && key != p {
			return p
		}
	}
	return editdist.Near(key, pgxParams)
}

// fail translates an error at the store boundary: context errors pass
// through, use after Close is leasehold.ErrClosed, and everything else
// becomes a plain error carrying the message (no pgx type leaks).
func (s *Store) fail(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case s.closed.Load():
		return leasehold.ErrClosed
	}
	return pgError(err)
}

// readOnlyTransaction is SQLSTATE read_only_sql_transaction: what a
// replica (a hot standby) answers to a write, or to a lock.
const readOnlyTransaction = "25006"

// readOnlyHint follows a read-only refusal: the server is most likely a
// replica, and the URL should reach the primary wherever it is.
const readOnlyHint = "the server is likely a read-only replica: name the primary, or list every node with target_session_attrs=read-write (postgres://host1,host2/db?target_session_attrs=read-write), which connects to the one that takes writes"

func pgError(err error) error { return errors.New("postgres: " + pgMessage(err)) }

// pgMessage is the message of a driver error, with the SQLSTATE of a server
// error.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == readOnlyTransaction {
		return fmt.Sprintf("%s (SQLSTATE %s); %s", pe.Message, pe.Code, readOnlyHint)
	}
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
	}
	return err.Error()
}

// lostConnection reports whether err says the connection failed rather
// than the statement: any driver error that is not from the server, or a
// server error of class 08 (connection exception) or 57P (the server is
// shutting down, crashed or starting up).
func lostConnection(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	return !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// again decides whether to run a statement once more after err. After a
// server restart or failover every pooled connection is dead, and each
// would fail one operation; so on a lost connection the Store resets its
// own pool (at most once a second; a pool passed to New is left alone) and
// the caller retries once, on a fresh connection. Callers only retry
// statements whose repetition is harmless (see docs/stores/postgres.md).
func (s *Store) again(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || s.closed.Load() || !lostConnection(err) {
		return false
	}
	s.lost.Add(1)
	if s.ownPool {
		now, last := time.Now().UnixNano(), s.lastReset.Load()
		if now-last > int64(time.Second) && s.lastReset.CompareAndSwap(last, now) {
			s.pool.Reset()
		}
	}
	return true
}

// begin is the common prologue of every operation: after Close it returns
// leasehold.ErrClosed, and with a context that has ended, its error.
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	return ctx.Err()
}
