package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// Quotas bound what one client holds through this server at once: an
// authenticated identity, or with auth off an IP address (every client of
// one address shares its quotas then). Zero fields take the defaults;
// negative ones mean no limit. A request over a quota is refused and
// changes nothing (*QuotaError: HTTP 429 quota-exceeded, RESP -QUOTA).
//
// What is counted is what this server granted and has not seen end: a
// lease until its release, force release, a new grant of its name, or
// its expiry as the grant (or last renewal) announced it; a lease
// attached to a session, while the session lives; a session until it is
// closed or its keepalive runs out; a waiter while it waits. A lease
// released through another server in front of the same store still
// counts until its expiry here.
type Quotas struct {
	Leases    int   // leases held at once (DefaultQuotaLeases)
	DataBytes int64 // bytes of those leases' data (DefaultQuotaDataBytes)
	Sessions  int   // open sessions (DefaultQuotaSessions)
	Waiters   int   // acquires waiting in a queue at once (DefaultQuotaWaiters)
}

// The quotas of a client when Quotas leaves them zero: generous for one
// service (a batch may lock many thousand items; a lease without data
// costs the server about a kilobyte), small enough that one client cannot
// take the server's memory (2,000 leases of 64 KiB took 527 MB of a
// server's RSS: the data quota bounds that).
const (
	DefaultQuotaLeases    = 100000
	DefaultQuotaDataBytes = 64 << 20
	DefaultQuotaSessions  = 1000
	DefaultQuotaWaiters   = 1000
)

// The resources of a QuotaError.
const (
	QuotaLeases   = "leases"
	QuotaData     = "data"
	QuotaSessions = "sessions"
	QuotaWaiters  = "waiters"
	// QuotaSubscriptions: RESP's LH.SUBSCRIBE, a client's share of
	// --resp-max-subscriptions (a quarter).
	QuotaSubscriptions = "subscriptions"
)

// QuotaError refuses a request that would take its client over a quota;
// nothing was changed.
type QuotaError struct {
	Resource string // QuotaLeases, QuotaData, QuotaSessions or QuotaWaiters
	Limit    int64
	Have     int64 // what the client holds (for data: bytes, with this request's)
}

// quotaFlags name the serve flag of each resource, for the error.
var quotaFlags = map[string]string{
	QuotaLeases: "--quota-leases", QuotaData: "--quota-data-bytes",
	QuotaSessions: "--quota-sessions", QuotaWaiters: "--quota-waiters",
	QuotaRecords: "--max-record-bytes",
}

func (e *QuotaError) Error() string {
	switch e.Resource {
	case QuotaData:
		return fmt.Sprintf("quota exceeded: this client's leases on this server would hold %d bytes of data, over its limit of %d (%s); nothing was changed", e.Have, e.Limit, quotaFlags[e.Resource])
	case QuotaRecords:
		return fmt.Sprintf("records full: the records of all clients on this server would take %d bytes with this write, over the server's limit of %d (%s); delete records to make room; nothing was changed", e.Have, e.Limit, quotaFlags[e.Resource])
	}
	return fmt.Sprintf("quota exceeded: this client has %d %s on this server, its limit (%s); nothing was changed", e.Have, e.Resource, quotaFlags[e.Resource])
}

// quotaClient is what a front end puts in a request's context: the key of
// the client the request counts against, read when the backend is called
// (a RESP connection's identity changes with AUTH).
type quotaClient interface{ quotaKey() string }

type quotaClientKey struct{}

func withQuotaClient(ctx context.Context, c quotaClient) context.Context {
	return context.WithValue(ctx, quotaClientKey{}, c)
}

// quotaKeyOf is the client's key; "" (calls from inside the process, such
// as workflows) counts against nothing.
func quotaKeyOf(ctx context.Context) string {
	if c, ok := ctx.Value(quotaClientKey{}).(quotaClient); ok {
		return c.quotaKey()
	}
	return ""
}

// quotaKeyFor is the key of an identity, or of an address without one.
// Every loopback address is one client: a local process may use any of
// 127.0.0.0/8, and with auth off it would otherwise multiply its quotas
// (the review's F8: 8 addresses, 7,276 leases of 64 KiB, 2.1 GB).
func quotaKeyFor(id *Identity, addr string) string {
	if id != nil {
		return "identity " + id.Name
	}
	if ip := net.ParseIP(addr); ip != nil && ip.IsLoopback() {
		return "loopback"
	}
	return "address " + addr
}

// quotaBackend is a Backend that counts what each client holds through it
// and refuses what would take one over its Quotas.
type quotaBackend struct {
	Backend
	lim     Quotas
	metrics *Metrics
	now     func() time.Time

	mu       sync.Mutex
	leases   map[string]*quotaLease   // by name: the last grant made here
	sessions map[string]*quotaSession // by id
	clients  map[string]*quotaUse
	parked   map[string]string // parkKey → client: places kept between polls
	swept    time.Time
	opening  uint64 // sessions being opened, for their placeholders
}

type quotaLease struct {
	client  string
	token   uint64
	bytes   int64
	ttl     time.Duration
	until   time.Time // its expiry as announced (for a session's lease: the session's then)
	session string
}

type quotaSession struct {
	client string
	until  time.Time
	names  map[string]struct{} // leases acquired on it here
}

type quotaUse struct {
	names    map[string]struct{}  // its leases
	sids     map[string]struct{}  // its sessions
	bytes    int64                // data of its leases
	pending  int                  // acquires under way (counted as leases)
	pendingB int64                // and their data
	waiters  int                  // waits under way and places kept (parked)
	parked   map[string]time.Time // parkKey → when its place ends at the latest
}

// quotaSweepEvery is how often every client's ended leases and sessions
// are forgotten (each client's are also when it reaches a quota).
const quotaSweepEvery = 10 * time.Second

func newQuotaBackend(b Backend, q Quotas, m *Metrics) *quotaBackend {
	quotaOrDefault(&q.Leases, DefaultQuotaLeases)
	quotaOrDefault(&q.DataBytes, DefaultQuotaDataBytes)
	quotaOrDefault(&q.Sessions, DefaultQuotaSessions)
	quotaOrDefault(&q.Waiters, DefaultQuotaWaiters)
	return &quotaBackend{
		Backend: b, lim: q, metrics: m, now: time.Now,
		leases: map[string]*quotaLease{}, sessions: map[string]*quotaSession{}, clients: map[string]*quotaUse{},
		parked: map[string]string{},
	}
}

// NoQuota is the value of a Quotas field that means no limit.
const NoQuota = -1

// quotaOrDefault sets a quota left zero to its default. A negative one
// (NoQuota) stays: orDefault would turn it back into the default, which
// made serve's --quota-* 0 ("no limit") keep the default limit (issue 27
// red team #2).
func quotaOrDefault[T ~int | ~int64](p *T, def T) {
	if *p == 0 {
		*p = def
	}
}

// limitOf is a quota's limit: a negative one (no limit) is the largest.
func limitOf[T ~int | ~int64](v T) T {
	if v < 0 {
		return T(1<<62 - 1)
	}
	return v
}

func (b *quotaBackend) use(client string) *quotaUse {
	u := b.clients[client]
	if u == nil {
		u = &quotaUse{names: map[string]struct{}{}, sids: map[string]struct{}{}}
		b.clients[client] = u
	}
	return u
}

// ended reports whether l has ended by now: its session's end, or, for a
// lease without one (or whose session was not opened here), its expiry.
func (b *quotaBackend) ended(l *quotaLease, now time.Time) bool {
	if s := b.sessions[l.session]; l.session != "" && s != nil {
		return now.After(s.until)
	}
	return now.After(l.until)
}

func (b *quotaBackend) dropLease(name string) {
	l := b.leases[name]
	if l == nil {
		return
	}
	delete(b.leases, name)
	if u := b.clients[l.client]; u != nil {
		delete(u.names, name)
		u.bytes -= l.bytes
	}
	if s := b.sessions[l.session]; s != nil {
		delete(s.names, name)
	}
}

// dropSession forgets the session and the leases on it (they end with
// it: the review's F4 found them counted until their announced expiry,
// up to the session's TTL, after the session was closed).
func (b *quotaBackend) dropSession(id string) {
	s := b.sessions[id]
	if s == nil {
		return
	}
	delete(b.sessions, id)
	if u := b.clients[s.client]; u != nil {
		delete(u.sids, id)
	}
	for name := range s.names {
		if l := b.leases[name]; l != nil && l.session == id {
			b.dropLease(name)
		}
	}
}

// sweepClient forgets the client's ended leases and sessions.
func (b *quotaBackend) sweepClient(u *quotaUse, now time.Time) {
	for key, until := range u.parked {
		if now.After(until) {
			b.unpark(key)
		}
	}
	for id := range u.sids {
		if now.After(b.sessions[id].until) {
			b.dropSession(id)
		}
	}
	for name := range u.names {
		if b.ended(b.leases[name], now) {
			b.dropLease(name)
		}
	}
}

// sweep forgets every client's ended leases and sessions, at most once
// every quotaSweepEvery, and the clients left with nothing.
func (b *quotaBackend) sweep(now time.Time) {
	if now.Sub(b.swept) < quotaSweepEvery {
		return
	}
	b.swept = now
	for key, u := range b.clients {
		b.sweepClient(u, now)
		if len(u.names) == 0 && len(u.sids) == 0 && u.pending == 0 && u.waiters == 0 && len(u.parked) == 0 {
			delete(b.clients, key)
		}
	}
}

// refuse counts and returns a QuotaError.
func (b *quotaBackend) refuse(resource string, limit, have int64) error {
	if b.metrics != nil {
		b.metrics.quotaRefused(resource)
	}
	return &QuotaError{Resource: resource, Limit: limit, Have: have}
}

// A waiter whose poll ran out keeps its place in the backend's queue for
// ParkGrace (engine_park.go, proxy_park.go): it counts as one of its
// client's waiters until its next poll takes the place back (and counts
// instead), or the grace has passed. (The red team of issue 27: parked
// places were not counted, and one client kept 5,000 waiters queued on a
// quota of 1,000, with 64 KiB of data each.)

// parkedAfter counts the place a poll that ran out may have kept. b.mu held.
func (b *quotaBackend) parkedAfter(client string, req AcquireRequest, key string, err error) {
	if req.RequestID == "" || req.Wait < minParkWait || !errors.Is(err, leasehold.ErrHeld) {
		return
	}
	b.unpark(key)
	u := b.use(client)
	if u.parked == nil {
		u.parked = map[string]time.Time{}
	}
	u.parked[key] = b.now().Add(ParkGrace)
	u.waiters++
	b.parked[key] = client
}

// unpark stops counting a kept place (taken back, given up, or past its
// grace). b.mu held.
func (b *quotaBackend) unpark(key string) {
	client, ok := b.parked[key]
	if !ok {
		return
	}
	delete(b.parked, key)
	if u := b.clients[client]; u != nil {
		if _, ok := u.parked[key]; ok {
			delete(u.parked, key)
			u.waiters--
		}
	}
}

// reserve counts an acquire of name with size bytes (and a waiter if
// wait) against the client before it reaches the backend, or refuses it.
// An acquire of a name the client holds here (a retry, whose answer is
// the same grant) takes the place of that lease; one with the request id
// of a place kept for the client, the place of that waiter.
func (b *quotaBackend) reserve(client string, req AcquireRequest, key string, size int64, wait bool) error {
	name := req.Name
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sweep(now)
	if req.RequestID != "" {
		if b.parked[key] == client {
			b.unpark(key)
		}
	}
	u := b.use(client)
	over := func() (resource string, limit, have int64) {
		leases, maxLeases := int64(len(u.names)+u.pending), int64(limitOf(b.lim.Leases))
		bytes, maxBytes := u.bytes+u.pendingB+size, limitOf(b.lim.DataBytes)
		if l := b.leases[name]; l != nil && l.client == client {
			leases, bytes = leases-1, bytes-l.bytes
		}
		switch {
		case leases >= maxLeases:
			return QuotaLeases, maxLeases, leases
		case bytes > maxBytes:
			return QuotaData, maxBytes, bytes
		case wait && u.waiters >= limitOf(b.lim.Waiters):
			return QuotaWaiters, int64(limitOf(b.lim.Waiters)), int64(u.waiters)
		}
		return "", 0, 0
	}
	if resource, _, _ := over(); resource != "" {
		b.sweepClient(u, now) // what has ended since the last sweep
		if resource, limit, have := over(); resource != "" {
			return b.refuse(resource, limit, have)
		}
	}
	u.pending++
	u.pendingB += size
	if wait {
		u.waiters++
	}
	return nil
}

// Acquire counts the grant against the caller's client.
func (b *quotaBackend) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	client := quotaKeyOf(ctx)
	if client == "" {
		return b.Backend.Acquire(ctx, req)
	}
	key := parkKey(req.Name, req.Owner, req.RequestID)
	return b.counted(ctx, client, req, key, func() (leasehold.Record, error) { return b.Backend.Acquire(ctx, req) })
}

// counted runs acquire, an acquire of req (a lease's, or a semaphore's
// whose grant names its permit) counted against client: reserved before,
// and the grant (or the place a poll that ran out kept, under key)
// counted after.
func (b *quotaBackend) counted(ctx context.Context, client string, req AcquireRequest, key string, acquire func() (leasehold.Record, error)) (leasehold.Record, error) {
	if err := b.reserve(client, req, key, int64(len(req.Data)), req.Wait > 0); err != nil {
		return leasehold.Record{}, err
	}
	rec, err := acquire()
	return b.count(ctx, client, req, key, rec, err)
}

// count ends what reserve began for an acquire of req that answered rec,
// err: the reservation is dropped, and the grant (or the place a poll
// that ran out kept, under key) counted.
func (b *quotaBackend) count(ctx context.Context, client string, req AcquireRequest, key string, rec leasehold.Record, err error) (leasehold.Record, error) {
	size := int64(len(req.Data))
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.use(client)
	u.pending--
	u.pendingB -= size
	if req.Wait > 0 {
		u.waiters--
	}
	if err != nil {
		if ctx.Err() == nil {
			b.parkedAfter(client, req, key, err)
		}
		return rec, err
	}
	// A new grant of the name ends any earlier one made here (a retry's
	// answer is the same grant: it replaces itself).
	name := rec.Name
	b.dropLease(name)
	now := b.now()
	left := rec.Remaining
	if left <= 0 {
		left = rec.TTL
	}
	l := &quotaLease{client: client, token: rec.Token, bytes: size, ttl: rec.TTL, until: now.Add(left), session: req.Session}
	b.leases[name] = l
	u.names[name] = struct{}{}
	u.bytes += size
	if s := b.sessions[req.Session]; req.Session != "" && s != nil {
		if s.names == nil {
			s.names = map[string]struct{}{}
		}
		s.names[name] = struct{}{}
	}
	return rec, nil
}

// AcquirePermit counts a semaphore's acquire as Acquire does a lease's:
// its wait as one of the client's waiters (a place kept between polls
// too), its grant as a lease of the permit's name.
func (b *quotaBackend) AcquirePermit(ctx context.Context, sem string, n int, req AcquireRequest) (leasehold.Record, error) {
	client := quotaKeyOf(ctx)
	if client == "" {
		return acquirePermit(ctx, b.Backend, sem, n, req)
	}
	if err := validatePermits(sem, n); err != nil {
		return leasehold.Record{}, err
	}
	r := req
	r.Name = "" // which permit is not known yet
	key := permitParkKey(sem, req.Owner, req.RequestID)
	return b.counted(ctx, client, r, key, func() (leasehold.Record, error) { return acquirePermit(ctx, b.Backend, sem, n, req) })
}

// grantEnded is whether err from a renew or release of a grant means the
// grant is gone (not a refused proof, which leaves it with its holder).
func grantEnded(err error) bool {
	return errors.Is(err, leasehold.ErrNotHeld) && !errors.Is(err, ErrBadProof)
}

// Renew moves the lease's expiry here.
func (b *quotaBackend) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	err := b.Backend.Renew(ctx, name, owner, token, ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.leases[name]
	switch {
	case l == nil || l.token != token:
	case err == nil:
		if ttl <= 0 {
			ttl = l.ttl
		}
		l.ttl, l.until = ttl, b.now().Add(ttl)
	case grantEnded(err):
		b.dropLease(name)
	}
	return err
}

// Release forgets the lease.
func (b *quotaBackend) Release(ctx context.Context, name, owner string, token uint64) error {
	err := b.Backend.Release(ctx, name, owner, token)
	b.released(name, token, err)
	return err
}

// released forgets the lease a release of name's grant with token
// answered err to, if it ended that grant.
func (b *quotaBackend) released(name string, token uint64, err error) {
	if err == nil || grantEnded(err) {
		b.mu.Lock()
		if l := b.leases[name]; l != nil && l.token == token {
			b.dropLease(name)
		}
		b.mu.Unlock()
	}
}

// ForceRelease forgets the grant it ended, whoever held it. Only that
// grant: a waiter the engine granted the name to at once may already be
// counted here (the review's F3: dropping the name's entry whatever its
// token uncounted the waiter's new lease, and a client went on to hold
// twice its quota). A name not found is left to its expiry here.
func (b *quotaBackend) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	rec, err := b.Backend.ForceRelease(ctx, name)
	if err == nil {
		b.mu.Lock()
		if l := b.leases[name]; l != nil && l.token == rec.Token {
			b.dropLease(name)
		}
		b.mu.Unlock()
	}
	return rec, err
}

// OpenSession counts the session against the caller's client.
func (b *quotaBackend) OpenSession(ctx context.Context, ttl time.Duration) (Session, error) {
	client := quotaKeyOf(ctx)
	if client == "" {
		return b.Backend.OpenSession(ctx, ttl)
	}
	b.mu.Lock()
	now := b.now()
	b.sweep(now)
	u := b.use(client)
	max := limitOf(b.lim.Sessions)
	if len(u.sids) >= max {
		b.sweepClient(u, now)
	}
	if have := len(u.sids); have >= max {
		b.mu.Unlock()
		return Session{}, b.refuse(QuotaSessions, int64(max), int64(have))
	}
	// A placeholder (no session id starts with NUL) holds the place while
	// the backend opens the session.
	b.opening++
	placeholder := fmt.Sprintf("\x00opening %d", b.opening)
	b.sessions[placeholder] = &quotaSession{client: client, until: time.Unix(1<<40, 0)}
	u.sids[placeholder] = struct{}{}
	b.mu.Unlock()

	s, err := b.Backend.OpenSession(ctx, ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropSession(placeholder)
	if err == nil {
		b.sessions[s.ID] = &quotaSession{client: client, until: b.now().Add(sessionLeft(s))}
		b.use(client).sids[s.ID] = struct{}{}
	}
	return s, err
}

func sessionLeft(s Session) time.Duration {
	if s.Remaining > 0 {
		return s.Remaining
	}
	return s.TTL
}

// KeepAlive moves the session's expiry here.
func (b *quotaBackend) KeepAlive(ctx context.Context, id string) (Session, error) {
	s, err := b.Backend.KeepAlive(ctx, id)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch qs := b.sessions[id]; {
	case qs == nil:
	case err == nil:
		qs.until = b.now().Add(sessionLeft(s))
	case errors.Is(err, ErrNoSession):
		b.dropSession(id)
	}
	return s, err
}

// CloseSession forgets the session (its leases end with it).
func (b *quotaBackend) CloseSession(ctx context.Context, id string) error {
	err := b.Backend.CloseSession(ctx, id)
	if err == nil || errors.Is(err, ErrNoSession) {
		b.mu.Lock()
		b.dropSession(id)
		b.mu.Unlock()
	}
	return err
}

// WithQuotas is b with the quotas q counted for the requests of
// NewHandler's and NewRESPServer's clients (m, if set, counts the
// refusals). NewServer does this itself; give the same wrapped backend to
// both front ends so they count against one set.
func WithQuotas(b Backend, q Quotas, m *Metrics) Backend {
	return newQuotaBackend(b, q, m)
}

// unwrapBackend is the backend under any quotaBackend.
func unwrapBackend(b Backend) Backend {
	if q, ok := b.(*quotaBackend); ok {
		return q.Backend
	}
	return b
}
