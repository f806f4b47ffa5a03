package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the RESP port's resource bounds (RESPOptions; see the
// Hardening section of docs/server.md).
const (
	DefaultRESPMaxConns         = 10000
	DefaultRESPMaxConnsPerAddr  = 1000
	DefaultRESPAuthTimeout      = 10 * time.Second
	DefaultRESPHandshakeTimeout = 10 * time.Second
	// DefaultRESPCommandTimeout is RESPOptions.CommandTimeout's default.
	DefaultRESPCommandTimeout  = 10 * time.Second
	DefaultRESPMaxOutputBytes  = 32 << 20
	DefaultRESPMaxCommandBytes = 2 << 20
	// DefaultRESPMaxTotalInputBytes is 128 connections each buffering a
	// command of the full 2 MiB at once (lease commands are a few hundred
	// bytes), where the connection cap alone allows 10,000 × 2 MiB.
	DefaultRESPMaxTotalInputBytes = 256 << 20
	// DefaultRESPMaxTotalOutputBytes is RESPOptions.MaxTotalOutputBytes's
	// default.
	DefaultRESPMaxTotalOutputBytes = 256 << 20
	// DefaultRESPMaxSubscriptions is RESPOptions.MaxSubscriptions's
	// default.
	DefaultRESPMaxSubscriptions = 20000
	DefaultRESPMaxList          = 10000
)

// Until a connection has authenticated (auth on), a command has at most
// preAuthMaxArgs arguments (HELLO 2 AUTH user token SETNAME name is 7) of
// at most preAuthMaxBulk bytes each: nothing a client needs before AUTH
// is bigger.
const (
	preAuthMaxArgs = 7
	preAuthMaxBulk = 1 << 10
)

// respInlineMax is the longest inline command line (the reader's buffer
// holds the whole line).
const respInlineMax = 16 << 10

// The reasons a RESP connection is refused or closed by a bound, as the
// "reason" label of leasehold_resp_connections_closed_total.
const (
	closeMaxConns       = "max_conns"
	closeMaxPerAddr     = "max_conns_per_addr"
	closeAuthTimeout    = "auth_timeout"
	closeHandshake      = "tls_handshake"
	closeInputLimit     = "input_limit"
	closeTotalInput     = "total_input"
	closeOutputLimit    = "output_limit"
	closeHTTP           = "http_request"
	closeForeign        = "foreign_protocol"
	closeCommandTimeout = "command_timeout"
	closeTotalOutput    = "total_output"
	closeProtocolErr    = "protocol_error"
	closeEvicted        = "evicted"
	respRefusedAnswer   = "-ERR max number of clients reached\r\n"
)

func (o *RESPOptions) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&o.MaxInflight, 1024)
	orDefault(&o.MaxConns, DefaultRESPMaxConns)
	orDefault(&o.MaxConnsPerAddr, DefaultRESPMaxConnsPerAddr)
	orDefault(&o.AuthTimeout, DefaultRESPAuthTimeout)
	orDefault(&o.HandshakeTimeout, DefaultRESPHandshakeTimeout)
	orDefault(&o.CommandTimeout, DefaultRESPCommandTimeout)
	orDefault(&o.MaxOutputBytes, DefaultRESPMaxOutputBytes)
	orDefault(&o.MaxCommandBytes, DefaultRESPMaxCommandBytes)
	orDefault(&o.MaxTotalInputBytes, DefaultRESPMaxTotalInputBytes)
	orDefault(&o.MaxTotalOutputBytes, DefaultRESPMaxTotalOutputBytes)
	orDefault(&o.MaxSubscriptions, DefaultRESPMaxSubscriptions)
	orDefault(&o.MaxList, DefaultRESPMaxList)
}

// orDefault sets a bound left unset (zero or negative) to its default.
func orDefault[T ~int | ~int64](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

// totalOutputShare is how much a connection may have waiting once the
// replies of all connections together are over their limit: 1/32 of its
// own limit, but no more than the total divided among the connection cap
// (at least 16 KiB), so that connections each just under the share cannot
// together hold the total many times over (issue 26's review: 2,000
// connections each keeping 1 MiB - 1 KiB unsent held 2.5 GB, also before
// AUTH with PING).
func totalOutputShare(maxOutput, maxTotal int64, maxConns int) int64 {
	return max(min(maxOutput/32, maxTotal/int64(max(maxConns, 1))), 16<<10)
}

// inputBudget is MaxTotalInputBytes: the bytes of the command buffers of
// all the connections together (beyond each one's first 16 KiB). No one
// client holds more than a share of it (inputShare): a client is an
// authenticated identity, or before AUTH (and with auth off) an address.
type inputBudget struct {
	max  int64
	used atomic.Int64

	mu  sync.Mutex
	per map[string]int64 // bytes held by each client
}

// inputShare is the part of the budget one client may hold: a quarter,
// and at least two full commands.
func (b *inputBudget) share(maxCommand int) int64 {
	return max(b.max/4, 2*int64(maxCommand))
}

// reserve takes n bytes for client key, or nothing and reports false.
func (b *inputBudget) reserve(key string, n, maxCommand int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used.Load()+int64(n) > b.max || b.per[key]+int64(n) > b.share(maxCommand) {
		return false
	}
	if b.per == nil {
		b.per = map[string]int64{}
	}
	b.per[key] += int64(n)
	b.used.Add(int64(n))
	return true
}

// release gives back n bytes that client key held.
func (b *inputBudget) release(key string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.per[key] -= int64(n); b.per[key] <= 0 {
		delete(b.per, key)
	}
	b.used.Add(-int64(n))
}

// move moves n bytes held by client from to client to (a connection that
// authenticated).
func (b *inputBudget) move(from, to string, n int) {
	if n == 0 || from == to {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.per[from] -= int64(n); b.per[from] <= 0 {
		delete(b.per, from)
	}
	if b.per == nil {
		b.per = map[string]int64{}
	}
	b.per[to] += int64(n)
}

// connBudget is one connection's view of the input budget (a
// resp.Budget): it reserves for the connection's client.
type connBudget struct {
	b          *inputBudget
	key        string
	ident      *Identity // the identity key names, once authenticated
	maxCommand int
	held       int
}

func (c *connBudget) Reserve(n int) bool {
	if !c.b.reserve(c.key, n, c.maxCommand) {
		return false
	}
	c.held += n
	return true
}

func (c *connBudget) Release(n int) {
	c.held -= n
	c.b.release(c.key, n)
}

// rekey makes the connection's client key (after AUTH: its identity).
func (c *connBudget) rekey(key string) {
	c.b.move(c.key, key, c.held)
	c.key = key
}

// addrKey is the client address a per-address cap counts by: the IP
// without the port.
func addrKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// rateLog logs at most one line per interval for a kind of event that an
// attacker can repeat at will, with the count of the lines it skipped.
type rateLog struct {
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (r *rateLog) Warn(msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < r.interval {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	r.mu.Unlock()
	if skipped > 0 {
		args = append(args, "similar_lines_skipped", skipped)
	}
	r.log.Warn(msg, args...)
}

// Failed AUTHs are limited per client IP: authFailBurst failures at once,
// then one more every authFailEvery. Over the limit every AUTH from that
// address (a good one too: a guesser must not learn which guess was
// right) is answered -RATELIMITED without a check.
const (
	authFailBurst = 10
	authFailEvery = time.Second
)

// authTarpit delays the answer to a wrong AUTH from an address over its
// failure limit (a variable for tests).
var authTarpit = 250 * time.Millisecond

// authLimiter counts failed AUTHs per client IP (token buckets).
type authLimiter struct {
	mu      sync.Mutex
	buckets map[string]*authBucket
}

type authBucket struct {
	tokens float64
	last   time.Time
}

// refill brings b up to now and reports whether it is full.
func (b *authBucket) refill(now time.Time) bool {
	b.tokens = min(authFailBurst, b.tokens+float64(now.Sub(b.last))/float64(authFailEvery))
	b.last = now
	return b.tokens >= authFailBurst
}

// allow reports whether addr may try an AUTH now.
func (l *authLimiter) allow(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[addr]
	if !ok {
		return true
	}
	b.refill(time.Now())
	return b.tokens >= 1
}

// failed records a failed AUTH from addr.
func (l *authLimiter) failed(addr string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*authBucket{}
	}
	b, ok := l.buckets[addr]
	if !ok {
		b = &authBucket{tokens: authFailBurst, last: now}
		l.buckets[addr] = b
		if n := len(l.buckets); n >= 1024 && n&(n-1) == 0 { // at powers of two: forget full buckets
			for k, v := range l.buckets {
				if v.refill(now) {
					delete(l.buckets, k)
				}
			}
			l.buckets[addr] = b
		}
	}
	b.refill(now)
	b.tokens = max(0, b.tokens-1)
}
