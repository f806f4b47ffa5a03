// Package redis is a leasehold.Store on Redis (5.0 or later; tested on 7).
//
// Each operation is one Lua function, one round trip, atomic on the server:
// on Redis 7.0 or later a function of a library the store loads once
// (FUNCTION LOAD, then FCALL), elsewhere a script run with EVALSHA (see
// lua.go). Expiry is judged by Redis's clock (PEXPIRE, PTTL, TIME).
// Per lease name there are up to five keys in one hash slot, so the store
// also works on Redis Cluster:
//
//	<prefix>{<tag>}     the lease hash (owner, token, req, data, ttl, acq); expires with the lease
//	<prefix>{<tag>}:f   the fence hash (n = latest token, o = its owner, q = arrival counter,
//	                    qd = q when the queue was last seen empty; c0..c9, w0..w9, r0..r9 =
//	                    the ids of recent acquire, renew and release calls, by their token's
//	                    last digit, which tell a resend of a call from a new one); never expires
//	<prefix>{<tag>}:q   the FIFO queue of waiters (AcquireWait), with
//	<prefix>{<tag>}:w   their liveness deadlines and requests (see queue.go)
//	<prefix>{<tag>}:i   a Watch's interest marker (see watch.go)
//
// Redis can lose data (no persistence, RDB snapshots, failover to an
// asynchronous replica). The store notices a restart by the server's run_id
// (kept in the marker hash <prefix>epoch), holds back new grants for a
// while after it so that holders of lost leases have stopped believing
// they hold them, and keeps tokens increasing with a floor taken from the
// server clock. See docs/stores/redis.md for what is and is not guaranteed.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/editdist"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/watchset"
)

var (
	_ leasehold.Store   = (*Store)(nil)
	_ leasehold.Watcher = (*Store)(nil)
	_ leasehold.Queuer  = (*Store)(nil)
)

// Defaults of the options.
const (
	// DefaultKeyPrefix starts every key and the release channel.
	DefaultKeyPrefix = "leasehold:"
	// DefaultHoldback is how long new grants wait after a restart of Redis
	// was noticed. It must be at least the longest TTL any client of the
	// store uses (leasehold.DefaultTTL is 15s).
	DefaultHoldback = 30 * time.Second
	// MaxHoldback is the longest hold-back accepted.
	MaxHoldback = 2 * leasehold.MaxTTL
	// DefaultLiveness is how long a queued waiter's entry (AcquireWait)
	// outlives the waiter's latest refresh, by Redis's clock. A waiter
	// refreshes its entry every third of it.
	DefaultLiveness = 5 * time.Second
	// MinLiveness and MaxLiveness bound WithLiveness.
	MinLiveness = 100 * time.Millisecond
	MaxLiveness = 10 * time.Minute
)

// HoldbackOwner is the Owner of the *leasehold.HeldError that TryAcquire
// returns while it holds back grants after a restart of Redis. Its
// Remaining is the time left of the hold-back and its Token is 0.
const HoldbackOwner = "(redis restarted: holding back)"

// FailoverHoldbackOwner is the Owner of that *leasehold.HeldError when the
// server is a promoted replica (a Sentinel failover, REPLICAOF NO ONE):
// the primary changed rather than restarted. IsHoldback reports either.
const FailoverHoldbackOwner = "(redis primary changed: holding back)"

// ReplicationHoldbackOwner is that Owner when the server did not restart
// but has a new replication id (a replica attached to it, for one).
const ReplicationHoldbackOwner = "(redis replication changed: holding back)"

// LostHoldbackOwner is that Owner on a server declared never replicated
// (WithNeverReplicated) that reports durable persistence but whose data
// set lacks the store's marker: a first use, or a restart that lost its
// data (an AOF removed, or turned on only at the restart).
const LostHoldbackOwner = "(redis came up without the store's marker: holding back)"

// IsHoldback reports whether owner is that of a hold-back refusal
// (HoldbackOwner, FailoverHoldbackOwner, ReplicationHoldbackOwner or
// LostHoldbackOwner), not of a holder.
func IsHoldback(owner string) bool {
	switch owner {
	case HoldbackOwner, FailoverHoldbackOwner, ReplicationHoldbackOwner, LostHoldbackOwner:
		return true
	}
	return false
}

// Store is a lease store on Redis. It is safe for concurrent use. Make it
// with Open or New.
type Store struct {
	rdb      goredis.UniversalClient
	own      bool // Close closes rdb (Open made it)
	cluster  bool // rdb is a *goredis.ClusterClient
	prefix   string
	epochKey string
	channel  string
	holdback time.Duration
	liveness time.Duration
	waitN    int           // WithWait: replicas that must acknowledge a write
	waitFor  time.Duration // WithWait: how long to wait for them
	// WithNeverReplicated: the user declares the server a single node
	// that is never replicated, so a durable restart may skip the hold-back.
	neverReplicated bool
	closed          atomic.Bool

	ep     epochCache
	fn     fnState
	w      watchState
	qstats queueStats
}

// Option configures a Store. A bad value makes Open or New return an
// *leasehold.InvalidError.
type Option func(*config)

type config struct {
	prefix   string
	holdback time.Duration
	liveness time.Duration
	waitN    int
	waitFor  time.Duration
	never    bool  // WithNeverReplicated
	err      error // the first bad option value
}

func (c *config) invalid(field, format string, args ...any) {
	if c.err == nil {
		c.err = &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

// WithKeyPrefix sets the prefix of every key the store uses and of its
// release channel (default DefaultKeyPrefix). Stores with different prefixes
// on one Redis are independent. It must be 1 to 128 bytes without '{', '}'
// or control characters.
func WithKeyPrefix(p string) Option {
	return func(c *config) {
		if p == "" || len(p) > 128 {
			c.invalid("key prefix", "%d bytes; want 1 to 128", len(p))
		}
		for _, r := range p {
			if r == '{' || r == '}' || r < 0x20 || r == 0x7f {
				c.invalid("key prefix", "%q contains %q", p, r)
				break
			}
		}
		c.prefix = p
	}
}

// WithHoldback sets how long TryAcquire refuses new grants after it notices
// that Redis restarted or failed over (default DefaultHoldback; URL
// parameter holdback=). Set it to at least the longest TTL any client of
// the store uses, and the same in every client. 0 disables the hold-back,
// which is safe only when Redis does not lose acknowledged writes. The
// store skips the hold-back by itself only with WithNeverReplicated, on a
// server that reports appendonly yes with appendfsync always (see there).
func WithHoldback(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxHoldback {
			c.invalid("holdback", "%s is outside [0, %s]", d, MaxHoldback)
		}
		c.holdback = d
	}
}

// WithNeverReplicated declares that the Redis server the store reaches
// directly is a single node that never has replicas and never was one: no
// REPLICAOF/SLAVEOF ever names it or is run on it, no Sentinel or managed
// service replicates or promotes it, and its clients are never re-pointed
// to another node (URL parameter never_replicated=true). With it, a
// restart of a server that reports appendonly yes and appendfsync always
// (and no replicas, and whose marker was never seen replicated) skips the
// hold-back when the server came back with the store's marker: its own
// disk kept every grant it acknowledged. A marker missing (a first use, or
// a data set lost: the AOF removed, or turned on only at the restart) is
// held back from the server's start as on any server. It is also the
// promise that the server runs appendonly yes with appendfsync always for
// its whole life: a data set that comes back with the marker but without
// the latest grants (AOF off for a while) is not detected. It is refused
// with WithWait, and by Open on a server that reports replicas connected.
//
// Without it every restart holds back (WithHoldback), durable or not: a
// replica that copied the store's data and was promoted and restarted from
// its own disk reports exactly what the primary's own restart reports (a
// durable master never promoted, under a new run_id, with a fresh
// replication id), yet lacks the grants the primary made after the copy.
// Declaring it wrongly is that double grant. It is refused with Sentinel.
func WithNeverReplicated() Option {
	return func(c *config) { c.never = true }
}

// WithLiveness sets how long a waiter queued by AcquireWait (which
// Client.Acquire uses) stays in the name's queue after its latest refresh
// (default DefaultLiveness; URL parameter liveness=). A waiting process
// refreshes its entry every third of it; the entry of a waiter that
// crashed is skipped and removed once it is that old, so a crashed waiter
// holds up the waiters behind it for at most this long. It must lie in
// [MinLiveness, MaxLiveness].
func WithLiveness(d time.Duration) Option {
	return func(c *config) {
		if d < MinLiveness || d > MaxLiveness {
			c.invalid("liveness", "%s is outside [%s, %s]", d, MinLiveness, MaxLiveness)
		}
		c.liveness = d
	}
}

// Open connects to the Redis named by rawURL and checks it at once (INFO
// and the restart marker: two round trips), failing if it cannot reach it.
// URL forms are those of go-redis ParseURL:
//
//	redis://[[user]:password@]host[:port][/db][?options]
//	rediss://...     the same over TLS
//	unix://[[user]:password@]/path/to/redis.sock[?db=N]
//	redis+sentinel://[[user]:password@]host:port[,host:port...]/MASTER_NAME[?options]
//
// (the last through Redis Sentinel: see SentinelScheme), plus leasehold's
// own query parameters, which override opts: holdback=<duration>
// (WithHoldback), liveness=<duration> (WithLiveness), prefix=<key prefix>
// (WithKeyPrefix), wait_replicas=<n> with wait_timeout=<duration>
// (WithWait), and never_replicated=true (WithNeverReplicated; false
// leaves it off; given once). A malformed URL or parameter is an
// *leasehold.InvalidError, and so is a server that reports role:slave
// (a replica: give its primary, or use redis+sentinel://).
// Close closes the connection pool.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	if scheme, _, ok := strings.Cut(rawURL, "://"); ok && strings.EqualFold(scheme, SentinelScheme) {
		return openSentinel(ctx, rawURL, opts)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: redactErr(err, rawURL)}
	}
	q := u.Query()
	opts, err = takeParams(q, opts)
	if err != nil {
		return nil, err
	}
	u.RawQuery = q.Encode()
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	o, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: redactErr(err, rawURL)}
	}
	if err := checkDB(o.DB, o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	return openClient(ctx, goredis.NewClient(o), cfg)
}

// checkDB refuses a negative db number, which go-redis would take as 0,
// and negative pool sizes (pool_size, min_idle_conns, max_idle_conns,
// max_active_conns, in that order), on which go-redis panics.
func checkDB(db int, pool ...int) error {
	if db < 0 {
		return &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("db %d: the db must be 0 or more", db)}
	}
	for k, n := range pool {
		if n < 0 {
			name := [...]string{"pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns"}[k]
			return &leasehold.InvalidError{Field: name, Reason: fmt.Sprintf("%d: it must be 0 or more (0: the default)", n)}
		}
	}
	return nil
}

// openClient makes a Store that owns client and checks the server at once.
func openClient(ctx context.Context, client *goredis.Client, cfg config) (*Store, error) {
	s := newStore(client, true, cfg)
	if _, err := s.epoch(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.ep.mu.Lock()
	replicas := s.ep.replicas
	s.ep.mu.Unlock()
	if cfg.never && replicas > 0 {
		s.Close()
		return nil, &leasehold.InvalidError{Field: "never_replicated", Reason: fmt.Sprintf(
			"declared, but the server has %d replica(s) connected (INFO replication: connected_slaves): it is replicated; leave never_replicated off", replicas)}
	}
	if replicas >= 0 && cfg.waitN > replicas {
		// Every grant would wait wait_timeout and fail.
		s.Close()
		return nil, &leasehold.InvalidError{Field: "wait_replicas", Reason: fmt.Sprintf(
			"%d, but the primary has %d replicas connected: no write could be acknowledged by that many (lower wait_replicas, or open when the replicas are up)",
			cfg.waitN, replicas)}
	}
	return s, nil
}

// urlParams are the query parameters a Redis URL may have: leasehold's,
// then go-redis's (of ParseURL and ParseFailoverURL) and the sentinels'
// credentials. A parameter within a typo of one of them is refused with
// the name it was likely meant to be, before leasehold's own are read (a
// wait_replica= met wait_timeout= without wait_replicas=).
var urlParams = []string{
	"holdback", "liveness", "prefix", "wait_replicas", "wait_timeout", "never_replicated",
	"db", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
	"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
	"conn_max_lifetime_jitter", "skip_verify", "context_timeout_enabled",
	"dialer_retries", "dialer_retry_timeout", "route_by_latency_tolerance",
	"sentinel_username", "sentinel_password",
	"master_name", "addr", "username", "password", "replica_only", "route_by_latency",
	"route_randomly", "use_disconnected_replicas",
}

// takeParams removes leasehold's own query parameters from q and returns
// opts with the options they name appended (after the caller's, so that
// they win).
func takeParams(q url.Values, opts []Option) ([]Option, error) {
	opts = opts[:len(opts):len(opts)] // append below must not write into the caller's array
	for k := range q {
		if near := editdist.Near(k, urlParams); near != "" {
			return nil, &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("unknown parameter %s (did you mean %s?)", k, near)}
		}
	}
	last := func(name string) (string, bool) {
		v, ok := q[name]
		q.Del(name)
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	duration := func(name, example string) (time.Duration, bool, error) {
		v, ok := last(name)
		if !ok {
			return 0, false, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, false, &leasehold.InvalidError{Field: name, Reason: fmt.Sprintf("%q is not a duration such as %s", v, example)}
		}
		return d, true, nil
	}
	if err := checkIOTimeouts(q); err != nil {
		return nil, err
	}
	if d, ok, err := duration("holdback", "30s"); err != nil {
		return nil, err
	} else if ok {
		opts = append(opts, WithHoldback(d))
	}
	if d, ok, err := duration("liveness", "5s"); err != nil {
		return nil, err
	} else if ok {
		opts = append(opts, WithLiveness(d))
	}
	if v, ok := last("prefix"); ok {
		opts = append(opts, WithKeyPrefix(v))
	}
	if v := q["never_replicated"]; len(v) > 1 {
		// The last would win silently, and one of them is the
		// declaration that skips hold-backs.
		return nil, &leasehold.InvalidError{Field: "never_replicated", Reason: fmt.Sprintf("given %d times (%s); give it once", len(v), strings.Join(v, ", "))}
	}
	if v, ok := last("never_replicated"); ok {
		switch v {
		case "true":
			opts = append(opts, WithNeverReplicated())
		case "false":
		default:
			return nil, &leasehold.InvalidError{Field: "never_replicated", Reason: fmt.Sprintf("%q; want true or false", v)}
		}
	}
	n, hasN := last("wait_replicas")
	d, hasD, err := duration("wait_timeout", "100ms")
	if err != nil {
		return nil, err
	}
	if hasN || hasD {
		if !hasN || !hasD {
			return nil, &leasehold.InvalidError{Field: "wait_replicas", Reason: "wait_replicas and wait_timeout go together"}
		}
		r, err := strconv.Atoi(n)
		if err != nil {
			return nil, &leasehold.InvalidError{Field: "wait_replicas", Reason: fmt.Sprintf("%q is not a number of replicas", n)}
		}
		opts = append(opts, WithWait(r, d))
	}
	return opts, nil
}

// minIOTimeout is the least read_timeout or write_timeout a URL may give:
// below it no reply arrives in time ("read_timeout=1ns": every command,
// and every sentinel query, timed out).
const minIOTimeout = time.Millisecond

// checkIOTimeouts refuses a read_timeout or write_timeout above 0 and
// below minIOTimeout. go-redis takes one of 0 or less in a URL as no
// timeout at all (the context's deadline still bounds each command), and
// a number without a unit as seconds; a value it cannot parse is left to
// its own error.
func checkIOTimeouts(q url.Values) error {
	for _, name := range []string{"read_timeout", "write_timeout"} {
		for _, v := range q[name] {
			d, err := time.ParseDuration(v)
			if n, nerr := strconv.Atoi(v); nerr == nil {
				d, err = time.Duration(n)*time.Second, nil
			}
			if err == nil && d > 0 && d < minIOTimeout {
				return &leasehold.InvalidError{Field: name, Reason: fmt.Sprintf(
					"%s: too short for any reply to arrive; give %s or more, or leave it out for go-redis's default, 5s (0 or less: no timeout, each command bounded by its context only)", v, minIOTimeout)}
			}
		}
	}
	return nil
}

// New returns a Store on an existing go-redis client: a *goredis.Client
// (also from NewFailoverClient, for Sentinel) or a *goredis.ClusterClient;
// a *goredis.Ring is refused. New adds a dial hook to client (to each node
// client of a cluster), by which the store notices reconnections; the hook
// stays after Close and keeps the Store reachable, so make one Store per
// client and prefix and share it rather than making many. It does not
// contact Redis; the first TryAcquire does. Close does not close client.
// Set ContextTimeoutEnabled on the client so that a Lease's keepalive can
// abandon a renewal at its deadline.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &leasehold.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	if _, ok := client.(*goredis.Ring); ok {
		return nil, &leasehold.InvalidError{Field: "client", Reason: "a Ring has no single server whose restarts the store could track; use a Client or ClusterClient"}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if c, ok := client.(*goredis.Client); ok && cfg.never && c.Options().Addr == "FailoverClient" {
		return nil, errNeverReplicatedSentinel
	}
	if _, ok := client.(*goredis.ClusterClient); ok && cfg.waitN > 0 {
		return nil, &leasehold.InvalidError{Field: "wait_replicas", Reason: "WAIT is not offered on Redis Cluster (no single connection carries a name's writes and the WAIT)"}
	}
	return newStore(client, false, cfg), nil
}

// errNeverReplicatedSentinel refuses WithNeverReplicated with Sentinel,
// which exists to replicate and promote.
var errNeverReplicatedSentinel = &leasehold.InvalidError{Field: "never_replicated",
	Reason: "a server reached through Sentinel has replicas that Sentinel promotes; it cannot be declared never replicated"}

func configure(opts []Option) (config, error) {
	cfg := config{prefix: DefaultKeyPrefix, holdback: DefaultHoldback, liveness: DefaultLiveness}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.never && cfg.waitN > 0 {
		cfg.invalid("never_replicated", "declared with wait_replicas=%d: a server that waits for replicas is replicated", cfg.waitN)
	}
	return cfg, cfg.err
}

func newStore(client goredis.UniversalClient, own bool, cfg config) *Store {
	s := &Store{
		rdb: client, own: own, prefix: cfg.prefix, holdback: cfg.holdback, liveness: cfg.liveness,
		waitN: cfg.waitN, waitFor: cfg.waitFor, neverReplicated: cfg.never,
		epochKey: cfg.prefix + "epoch", channel: cfg.prefix + "released",
	}
	s.ep.checking = make(chan struct{}, 1)
	s.fn.loading = make(chan struct{}, 1)
	if cc, ok := client.(*goredis.ClusterClient); ok {
		// A cluster client dials through its node clients: count their
		// dials (nodes that exist now are hooked by the first check).
		s.cluster = true
		cc.OnNewNode(s.hookNode)
	} else {
		client.AddHook(dialCounter{&s.ep.dials})
	}
	return s
}

// KeyPrefix returns the prefix of the store's keys.
func (s *Store) KeyPrefix() string { return s.prefix }

// Holdback returns the store's hold-back after a restart.
func (s *Store) Holdback() time.Duration { return s.holdback }

// Liveness returns how long a queued waiter's entry outlives its latest
// refresh (WithLiveness).
func (s *Store) Liveness() time.Duration { return s.liveness }

// Close stops the store's pub/sub subscriber and waits for it, and closes
// the client if Open made it. Later calls return leasehold.ErrClosed. It
// does not release leases.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopWatching()
	if s.own {
		return s.rdb.Close()
	}
	return nil
}

// keys returns the lease and fence keys of a name. The hash tag is the
// name with '{' and '}' replaced by the control bytes 0x01 and 0x02, which
// names cannot contain: the mapping is one-to-one and keeps prefixes, so
// both keys share a slot and List can match name prefixes with SCAN.
func (s *Store) keys(name string) (lease, fence string) {
	k := s.prefix + "{" + tagReplacer.Replace(name) + "}"
	return k, k + ":f"
}

// nameKeys returns every key of a name, as the lease scripts take them
// (see lease_lib.lua): lease, fence, queue, waiters, Watch interest, and on
// a standalone server the restart marker.
func (s *Store) nameKeys(name string) []string {
	lease, fence := s.keys(name)
	keys := make([]string, 5, 6)
	keys[0], keys[1], keys[2], keys[3], keys[4] = lease, fence, lease+":q", lease+":w", lease+":i"
	if !s.cluster {
		keys = append(keys, s.epochKey)
	}
	return keys
}

// epochArgs returns the arguments every lease script starts with (see
// lease_lib.lua), followed by more.
func (s *Store) epochArgs(e epoch, name string, more ...any) []any {
	args := make([]any, 0, 5+len(more))
	args = append(args, e.holdUntil, e.floor, strconv.FormatInt(e.floor, 10), s.channel, name)
	return append(args, more...)
}

var (
	tagReplacer   = strings.NewReplacer("{", "\x01", "}", "\x02")
	untagReplacer = strings.NewReplacer("\x01", "{", "\x02", "}")
	globReplacer  = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
)

// nameOf returns the lease name of a lease key, or false if key is not one.
func (s *Store) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") || len(rest) < 2 {
		return "", false
	}
	return untagReplacer.Replace(rest[:len(rest)-1]), true
}

// translate turns an error from go-redis into one of leasehold's, or an
// opaque error that names the operation. Context errors pass through.
func (s *Store) translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if storekit.DeadlinePassed(ctx) {
		// go-redis's I/O deadline (taken from ctx) struck before ctx's
		// own timer ran: "i/o timeout".
		return fmt.Errorf("redis %s: %w", op, context.DeadlineExceeded)
	}
	if s.closed.Load() || err == goredis.ErrClosed {
		return leasehold.ErrClosed
	}
	var ie *leasehold.InvalidError
	if errors.As(err, &ie) {
		return err // a deployment error found by the check: said in full
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("redis %s: %w", op, c)
		}
	}
	return fmt.Errorf("redis %s: %s", op, err.Error())
}

// redactErr returns err's message with any credentials of rawURL hidden.
func redactErr(err error, rawURL string) string {
	msg := err.Error()
	if i := strings.Index(rawURL, "://"); i >= 0 {
		if j := strings.LastIndex(rawURL, "@"); j > i {
			msg = strings.ReplaceAll(msg, rawURL, rawURL[:i+3]+"xxxxx"+rawURL[j:])
		}
	}
	if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// watchState is the pub/sub subscriber and its watchers (see watch.go).
type watchState struct {
	mu      sync.Mutex
	started bool
	stopped bool
	ps      *goredis.PubSub
	ready   chan struct{} // closed on the first subscription
	done    chan struct{} // closed when the subscriber goroutine exits
	set     watchset.Set  // the watchers

	wmu      sync.Mutex
	waiters  map[string]chan waitMsg // queued AcquireWait calls by name NUL waiter id
	interest map[string]int          // interest marker keys of live Watches (count)
}
