// Package etcd is a leasehold.Store on etcd (v3 API; tested with etcd 3.4),
// with expiry judged by etcd itself: every grant is attached to a
// native etcd lease of its own, which etcd's leader expires on its own
// clock and then deletes the grant's key (pushing the deletion to
// watchers). Fencing tokens are etcd revisions.
//
// Waiters queue in etcd in arrival order (Store implements
// leasehold.Queuer; see queue.go).
//
// Open it with a URL:
//
//	etcd://host:2379[,host:port...]/?prefix=leasehold/&dial_timeout=5s&queue_liveness=5s
//	etcds://user:password@host:2379/   (TLS with the system roots; etcd auth)
//
// or wrap an existing client with New. See docs/stores/etcd.md for the
// design, the keys it writes, the round trips of each operation and what
// it does and does not guarantee. In short:
//
//   - etcd leases have whole-second TTLs with a server minimum (2 s on a
//     default etcd), so a grant lives at least max(2 s, TTL rounded up to a
//     second) on etcd. That is safe (a takeover only ever happens later than
//     the holder's local deadline) but a lease with a TTL below 2 s, or not
//     a whole number of seconds, stays held on etcd longer than its TTL.
//   - A lease is never reported held (by TryAcquire, Get or List) once etcd
//     has expired it, although etcd deletes an expired lease's key up to
//     about 0.5 s later: while a lease has under a second left the store asks
//     etcd again until it is renewed or gone, so such a call may take that
//     long.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

var (
	_ leasehold.Store   = (*Store)(nil)
	_ leasehold.Watcher = (*Store)(nil)
)

// DefaultPrefix is the key prefix used when none is given.
const DefaultPrefix = "leasehold/"

// DefaultDialTimeout is how long Open waits for etcd when the URL has no
// dial_timeout and ctx no deadline.
const DefaultDialTimeout = 5 * time.Second

// dialTimeout is how long Open waits for etcd: the URL's dial_timeout
// (given > 0), else the time left to ctx's deadline (the stores package's
// connect_timeout=, --connect-timeout), else DefaultDialTimeout. The
// client's dial does not see ctx (it is the client's lifetime context,
// kept without its cancellation), so the deadline is passed on here.
func dialTimeout(ctx context.Context, given time.Duration, now time.Time) time.Duration {
	if given > 0 {
		return given
	}
	if dl, ok := ctx.Deadline(); ok {
		return max(dl.Sub(now), time.Millisecond)
	}
	return DefaultDialTimeout
}

// Store is a lease store on etcd. It is safe for concurrent use. Create it
// with Open or New.
type Store struct {
	cli    *clientv3.Client
	owned  bool // Close closes cli
	prefix string

	spares    *pool
	refresher *refresher
	liveness  time.Duration // of queue entries (WithQueueLiveness)

	qmu     sync.Mutex
	sess    *session        // the queue entries' etcd lease; nil when none
	waiting map[string]int  // AcquireWaits in progress, by name
	queued  map[string]bool // names last seen with waiters (release.go)
	heads   map[string]nextHead

	// waitHook, if set (tests), is told how often each AcquireWait was
	// woken and sent an acquire Txn.
	waitHook func(req leasehold.AcquireRequest, wakes, acquires int)
	// enqueueHook, if set (tests), sends an enqueue's Txn (commit) in its
	// place: it may hold it back to send it later, as an overloaded etcd
	// applies a proposal after the client was told it timed out.
	enqueueHook txnHook
	// acquireHook, if set (tests), sends the acquire Txns of TryAcquire
	// and of a queue's head in their place, as enqueueHook does the
	// enqueue's.
	acquireHook txnHook
	// spareHook, if set (tests), makes the refresh of a spare taken for a
	// grant (refresh) in its place.
	spareHook func(ctx context.Context, refresh func(context.Context) error) error
	// ttlHook, if set (tests), is told each TimeToLive answer judge gets.
	ttlHook func(*clientv3.LeaseTimeToLiveResponse)

	mu     sync.Mutex
	closed bool
	bg     sync.WaitGroup // background revokes and refills
	bgSem  chan struct{}
	stop   context.Context
	cancel context.CancelFunc
}

// Option configures a Store. A bad value makes Open or New return an
// *leasehold.InvalidError.
type Option func(*config)

type config struct {
	prefix   string
	liveness time.Duration
	err      error // the first bad option value
}

// WithPrefix sets the prefix of every key the store writes (default
// DefaultPrefix). Stores with different prefixes are independent. It must
// be non-empty valid UTF-8 without control characters.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if err := storekit.ValidatePrefix(prefix); (err != nil || prefix == "") && c.err == nil {
			c.err = &leasehold.InvalidError{Field: "prefix", Reason: fmt.Sprintf("%q must be non-empty UTF-8 without control characters", prefix)}
		}
		c.prefix = prefix
	}
}

// New returns a Store that uses cli. Close does not close cli; close it
// yourself after closing the Store.
func New(cli *clientv3.Client, opts ...Option) (*Store, error) {
	if cli == nil {
		return nil, &leasehold.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	return newStore(cli, false, cfg), nil
}

// configure applies opts to the defaults and checks the result.
func configure(opts []Option) (config, error) {
	cfg := config{prefix: DefaultPrefix, liveness: DefaultQueueLiveness}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg, cfg.err
}

func newStore(cli *clientv3.Client, owned bool, cfg config) *Store {
	s := &Store{cli: cli, owned: owned, prefix: cfg.prefix, liveness: cfg.liveness, spares: newPool(), bgSem: make(chan struct{}, 16),
		waiting: map[string]int{}, queued: map[string]bool{}, heads: map[string]nextHead{}}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.refresher = newRefresher(cli, s.stop)
	return s
}

// Open connects to the etcd cluster named by rawURL and checks that it can
// read under the key prefix. The URL's parameters override options (as in
// the other stores).
//
// URL form: etcd:// or etcds:// (TLS, verified against the system roots),
// optional user:password for etcd authentication, one or more host:port
// separated by commas (port default 2379; an IPv6 literal only as the sole
// host), an empty path or "/", and the parameters prefix (key prefix,
// default "leasehold/"), dial_timeout (a Go duration: how long to wait to
// connect and to read; default the time left to ctx's deadline, else 5s)
// and queue_liveness (WithQueueLiveness, a Go duration). A bad URL or
// parameter is an *leasehold.InvalidError.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	ccfg, urlOpts, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	ccfg.DialTimeout = dialTimeout(ctx, ccfg.DialTimeout, time.Now())
	ccfg.Context = context.WithoutCancel(ctx)
	ccfg.Logger = zap.NewNop()
	opts = append(opts[:len(opts):len(opts)], urlOpts...)
	// Validate the options before dialling.
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("etcd: connect to %s: %s", strings.Join(ccfg.Endpoints, ","), err.Error())
	}
	s := newStore(cli, true, cfg)
	pctx, cancel := context.WithTimeout(ctx, ccfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, s.prefix, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("etcd: reach %s: %s", strings.Join(ccfg.Endpoints, ","), err.Error())
	}
	return s, nil
}

// parseURL returns the client configuration and the options of the URL's
// parameters.
func parseURL(rawURL string) (clientv3.Config, []Option, error) {
	bad := func(format string, args ...any) (clientv3.Config, []Option, error) {
		return clientv3.Config{}, nil, &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("%s", strings.ReplaceAll(err.Error(), rawURL, redact(rawURL)))
	}
	var cfg clientv3.Config
	switch u.Scheme {
	case "etcd":
	case "etcds":
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	default:
		return bad("scheme %q is not etcd or etcds", u.Scheme)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return bad("etcd URLs have no path or fragment (etcd://host:2379/?prefix=...)")
	}
	if u.Host == "" {
		return bad("no host (etcd://host:2379)")
	}
	for _, hp := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			host, port = strings.Trim(hp, "[]"), "2379"
		}
		if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
			return bad("bad host:port %q", hp)
		}
		cfg.Endpoints = append(cfg.Endpoints, net.JoinHostPort(host, port))
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" {
			return bad("empty user name")
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	var opts []Option
	for k, v := range q {
		if len(v) != 1 {
			return bad("parameter %s given %d times", k, len(v))
		}
		switch k {
		case "prefix":
			if v[0] == "" {
				return bad("empty prefix")
			}
			opts = append(opts, WithPrefix(v[0]))
		case "queue_liveness":
			d, err := time.ParseDuration(v[0])
			if err != nil || d < time.Second || d > time.Hour {
				return bad("queue_liveness %q is not a duration in [1s, 1h]", v[0])
			}
			opts = append(opts, WithQueueLiveness(d))
		case "dial_timeout":
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 || d > 10*time.Minute {
				return bad("dial_timeout %q is not a duration in (0, 10m]", v[0])
			}
			cfg.DialTimeout = d
		default:
			return bad("unknown parameter %q (known: prefix, dial_timeout, queue_liveness)", k)
		}
	}
	return cfg, opts, nil
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i, j := strings.Index(raw, "://"), strings.LastIndex(raw, "@"); i >= 0 && j > i {
		return raw[:i+3] + "xxxxx" + raw[j:]
	}
	return raw
}

// Client returns the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Close stops the store's background work, revokes its spare etcd leases
// (not its grants: those expire, or are released, as usual) and, if the
// store was made by Open, closes its client. Later calls return
// leasehold.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.closeSession(ctx)
	for _, sp := range s.spares.drain() {
		_, _ = s.cli.Revoke(ctx, sp.id)
	}
	if s.owned {
		return s.cli.Close()
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// begin checks the context and that the store is open.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return leasehold.ErrClosed
	}
	return nil
}

// fail translates an error from the etcd client: context errors pass
// through, use after Close is leasehold.ErrClosed, and anything else
// becomes a plain error carrying etcd's message (no etcd or gRPC type).
//
// A call whose deadline has passed fails with context.DeadlineExceeded
// even when ctx does not say so yet: gRPC sends the deadline to etcd,
// which can answer with its own timeout ("etcdserver: request timed out",
// or "context deadline exceeded" as an Unknown status) before the timer of
// the caller's context has run.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case storekit.DeadlinePassed(ctx):
		return context.DeadlineExceeded
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if s.isClosed() {
			return leasehold.ErrClosed
		}
		return err
	case s.isClosed():
		return leasehold.ErrClosed
	}
	return fmt.Errorf("etcd %s: %s", op, err.Error())
}

// background runs f unless the store is closing or too much background
// work is queued already (f is then skipped: it only ever revokes an
// etcd lease that is unused or carries a grant nobody heard of, both of
// which expire by themselves, or refills the spare pool). It reports
// whether f runs.
func (s *Store) background(f func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	select {
	case s.bgSem <- struct{}{}:
	default:
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer func() { <-s.bgSem }()
		ctx, cancel := context.WithTimeout(s.stop, 10*time.Second)
		defer cancel()
		f(ctx)
	}()
	return true
}

// txnHook is a test hook that sends a Txn (commit) in its place.
type txnHook func(ctx context.Context, commit func(context.Context) (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error)

// commitVia sends commit through hook if a test set one.
func commitVia(hook txnHook, ctx context.Context, commit func(context.Context) (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	if hook != nil {
		return hook(ctx, commit)
	}
	return commit(ctx)
}

// revokeLater revokes an etcd lease that no grant uses any more.
func (s *Store) revokeLater(id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	s.background(func(ctx context.Context) { _, _ = s.cli.Revoke(ctx, id) })
}
