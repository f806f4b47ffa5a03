package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
)

// SentinelScheme is the URL scheme of a Redis reached through Sentinel:
//
//	redis+sentinel://[[user]:password@]host:port[,host:port...]/MASTER_NAME[?options]
//
// The hosts are sentinels (default port 26379); the store asks them for
// the primary of MASTER_NAME and follows it when they fail over (go-redis
// NewFailoverClient). The user and password are the data nodes'; the
// sentinels' own are the parameters sentinel_username and
// sentinel_password. Other parameters: db (default 0), leasehold's
// (holdback, liveness, prefix, wait_replicas with wait_timeout) and
// go-redis's connection settings (dial_timeout, read_timeout,
// write_timeout, pool_size, max_retries, ...). Open, and every dial of
// the primary, needs a majority of the URL's sentinels to answer and name
// one primary; otherwise it fails with a transient error.
const SentinelScheme = "redis+sentinel"

// DefaultSentinelPort is the port of a sentinel named without one.
const DefaultSentinelPort = "26379"

// MaxWaitReplicas bounds WithWait's replica count.
const MaxWaitReplicas = 64

// WithWait makes every acquire, renewal and release wait, on the same
// connection and in the same round trip, until at least replicas replicas
// have acknowledged it (Redis WAIT), for at most timeout (URL parameters
// wait_replicas= and wait_timeout=). A grant or renewal that fewer
// replicas acknowledged in time is answered with an error, not as done:
// its outcome is unknown to the caller (a Client retries the acquire with
// the same request id, and counts an unconfirmed renewal as not
// renewed). It narrows what a failover to a replica can lose; it is no
// consensus: see docs/stores/redis.md. replicas 0 turns it off; otherwise
// 1 to MaxWaitReplicas, and timeout 1ms to 1m. Not on Redis Cluster.
func WithWait(replicas int, timeout time.Duration) Option {
	return func(c *config) {
		if replicas < 0 || replicas > MaxWaitReplicas {
			c.invalid("wait_replicas", "%d is outside [0, %d]", replicas, MaxWaitReplicas)
		}
		if replicas > 0 && (timeout < time.Millisecond || timeout > time.Minute) {
			c.invalid("wait_timeout", "%s is outside [1ms, 1m]", timeout)
		}
		c.waitN, c.waitFor = replicas, timeout
	}
}

// Wait returns the store's WithWait setting (0 replicas: off).
func (s *Store) Wait() (replicas int, timeout time.Duration) { return s.waitN, s.waitFor }

// openSentinel opens a redis+sentinel:// URL.
func openSentinel(ctx context.Context, rawURL string, opts []Option) (*Store, error) {
	fo, opts, err := parseSentinelURL(rawURL, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if cfg.never {
		return nil, errNeverReplicatedSentinel
	}
	if err := checkDB(fo.DB, fo.PoolSize, fo.MinIdleConns, fo.MaxIdleConns, fo.MaxActiveConns); err != nil {
		return nil, err
	}
	fo.ContextTimeoutEnabled = true
	q := newSentinelQuorum(fo)
	answered, _, err := q.check(ctx, false)
	if err != nil {
		return nil, err
	}
	// The failover client asks its sentinels for the primary and waits
	// for each: give it only those that answered, so that a sentinel that
	// accepts connections but never answers (stopped, overloaded) does
	// not hold up the dial until the context's deadline. Every dial of a
	// data node asks the URL's sentinels again (q.dial).
	fo.SentinelAddrs = answered
	fo.Dialer = q.dial
	return openClient(ctx, goredis.NewFailoverClient(fo), cfg)
}

// isTimeout reports a query that ended at a deadline (the context's or
// the read timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// isUnknownCommand reports a server's refusal of a command it does not
// have (SENTINEL sent to a data node).
func isUnknownCommand(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}

// parseSentinelURL turns a redis+sentinel:// URL into go-redis failover
// options and opts with leasehold's parameters appended. Errors are
// *leasehold.InvalidError and never repeat a password.
func parseSentinelURL(rawURL string, opts []Option) (*goredis.FailoverOptions, []Option, error) {
	bad := func(format string, args ...any) error {
		return &leasehold.InvalidError{Field: "store URL", Reason: redactErr(fmt.Errorf(format, args...), rawURL)}
	}
	_, rest, _ := strings.Cut(rawURL, "://")
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexAny(rest, "#"); i >= 0 {
		return nil, nil, bad("%s URL: a fragment (#) is not allowed", SentinelScheme)
	}
	authority, path, _ := strings.Cut(rest, "/")
	var user *url.Userinfo
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		// Let net/url decode the user information (percent-escapes).
		u, err := url.Parse("redis://" + authority[:i+1] + "h")
		if err != nil || u.User == nil {
			return nil, nil, bad("%s URL: bad user information", SentinelScheme)
		}
		user, authority = u.User, authority[i+1:]
	}
	if authority == "" {
		return nil, nil, bad("%s URL: no sentinel named (want host:port[,host:port...])", SentinelScheme)
	}
	var addrs []string
	for _, a := range strings.Split(authority, ",") {
		host, port := a, DefaultSentinelPort
		if h, p, err := net.SplitHostPort(a); err == nil {
			host, port = h, p
		} else if strings.Count(a, ":") == 1 || strings.HasPrefix(a, "[") {
			return nil, nil, bad("%s URL: bad sentinel address %q", SentinelScheme, a)
		}
		n, err := strconv.Atoi(port)
		if host == "" || err != nil || n < 1 || n > 65535 || strings.ContainsAny(host, " /\\") {
			return nil, nil, bad("%s URL: bad sentinel address %q", SentinelScheme, a)
		}
		addr := net.JoinHostPort(strings.ToLower(host), strconv.Itoa(n))
		if slices.Contains(addrs, addr) {
			return nil, nil, bad("%s URL: sentinel %s listed twice: list each sentinel once (a majority of the listed sentinels must agree)", SentinelScheme, addr)
		}
		addrs = append(addrs, addr)
	}
	master, err := url.PathUnescape(path)
	if err != nil || master == "" || strings.Contains(master, "/") {
		return nil, nil, bad("%s URL: the path must be the master name, one segment (got %q)", SentinelScheme, path)
	}
	if strings.ContainsFunc(master, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, nil, bad("%s URL: master name %q (the path %q, decoded) has a space or control character: leasehold refuses such names", SentinelScheme, master, path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nil, bad("%s URL: bad query: %v", SentinelScheme, err)
	}
	if err := checkSentinelParams(q); err != nil {
		return nil, nil, err
	}
	opts, err = takeParams(q, opts)
	if err != nil {
		return nil, nil, err
	}
	// go-redis parses its own parameters: the first sentinel is the host,
	// the others addr=, and its user information is the sentinels'.
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	gu := url.URL{Scheme: "redis", Host: addrs[0], Path: "/", RawQuery: q.Encode()}
	fo, err := goredis.ParseFailoverURL(gu.String())
	if err != nil {
		msg := err.Error()
		if sentinelPass != "" {
			msg = strings.ReplaceAll(msg, sentinelPass, "xxxxx")
		}
		return nil, nil, bad("%s URL: %s", SentinelScheme, msg)
	}
	// go-redis takes a timeout of 0 or less as none; a dial that cannot
	// wait at all fails at once ("no sentinel answered within 402ms").
	if fo.DialTimeout < 0 {
		return nil, nil, bad("%s URL: dial_timeout=%s: must be more than 0 (leave it out for go-redis's default, 5s)", SentinelScheme, q.Get("dial_timeout"))
	}
	// go-redis: -1 turns retries off, 0 is its default (3); below -1 no
	// command is ever sent.
	if fo.MaxRetries < -1 {
		return nil, nil, bad("%s URL: max_retries %d: must be -1 (no retries), 0 (go-redis's default, 3) or more", SentinelScheme, fo.MaxRetries)
	}
	fo.SentinelUsername, fo.SentinelPassword = sentinelUser, sentinelPass
	if user != nil {
		fo.Username = user.Username()
		fo.Password, _ = user.Password()
	}
	return fo, opts, nil
}

// runAcked runs a writing operation like run and, with WithWait set, sends
// WAIT behind it in one pipeline (one connection, one round trip): the
// reply counts the replicas that acknowledged every write of that
// connection so far. Fewer than asked is an *UnreplicatedError.
func (s *Store) runAcked(ctx context.Context, op *luaOp, keys []string, args ...any) *goredis.Cmd {
	if s.waitN == 0 {
		return s.run(ctx, op, keys, args...)
	}
	for attempt := 0; ; attempt++ {
		loads := s.fn.loads.Load()
		scripts := s.fn.off.Load()
		pipe := s.rdb.Pipeline()
		var cmd *goredis.Cmd
		switch {
		case !scripts:
			cmd = pipe.FCall(ctx, op.fn, keys, args...)
		case attempt == 0:
			cmd = op.script.EvalSha(ctx, pipe, keys, args...)
		default:
			cmd = op.script.Eval(ctx, pipe, keys, args...)
		}
		w := pipe.Do(ctx, "WAIT", s.waitN, s.waitFor.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if cmd.Err() != nil && attempt == 0 {
			if scripts {
				if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
					continue
				}
			} else if retry, err := s.recoverFunctions(ctx, cmd.Err(), loads); err != nil {
				cmd = goredis.NewCmd(ctx)
				cmd.SetErr(err)
				return cmd
			} else if retry {
				continue
			}
		}
		if cmd.Err() != nil {
			return cmd
		}
		n, err := w.Int64()
		if err == nil && n < int64(s.waitN) {
			err = &UnreplicatedError{Replicas: int(n), Want: s.waitN, Timeout: s.waitFor}
		}
		if err != nil {
			out := goredis.NewCmd(ctx)
			out.SetVal(cmd.Val())
			out.SetErr(err)
			return out
		}
		return cmd
	}
}

// dropUnreplicated answers an acquire whose WAIT fell short: a grant it
// made is released (without WAIT), so a grant reported as failed is not
// left held by nobody until its TTL. Only if that release fails does the
// grant stand, and the error says so.
func (s *Store) dropUnreplicated(ctx context.Context, op string, req leasehold.AcquireRequest, reply any, ue *UnreplicatedError) error {
	res, _ := reply.([]any)
	code := int64(-1)
	if len(res) > 0 {
		code, _ = toInt(res[0])
	}
	if (code != 0 && code != 3) || len(res) != 4 {
		return fmt.Errorf("redis %s: %w", op, ue) // no grant was made
	}
	token, _, _ := grantReply(res)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	e, err := s.epoch(rctx)
	if err == nil {
		err = s.run(rctx, lua.release, s.nameKeys(req.Name), s.epochArgs(e, req.Name, req.Owner, strconv.FormatUint(token, 10))...).Err()
	}
	if err != nil {
		return fmt.Errorf("redis %s: %w; the grant (token %d) could not be released and stands until its TTL: %v", op, ue, token, err)
	}
	ue.Released = token
	return fmt.Errorf("redis %s: %w", op, ue)
}

// UnreplicatedError is the answer to a write that fewer replicas than
// WithWait asks for acknowledged within its timeout. The write took effect
// on the primary; whether it survives a failover is unknown.
//
// An acquire answered so released the grant it made: Released is its
// token (0: none was made, or a renewal or release). Nobody holds it.
type UnreplicatedError struct {
	Replicas, Want int
	Timeout        time.Duration
	Released       uint64
}

func (e *UnreplicatedError) Error() string {
	if e.Released != 0 {
		return fmt.Sprintf("acknowledged by %d of the %d replicas asked for within %s (WAIT): not granted (the grant, token %d, was released)", e.Replicas, e.Want, e.Timeout, e.Released)
	}
	return fmt.Sprintf("acknowledged by %d of the %d replicas asked for within %s (WAIT): outcome unknown", e.Replicas, e.Want, e.Timeout)
}
