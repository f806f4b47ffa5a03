package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/mutation"
)

// EngineConfig configures the native engine.
type EngineConfig struct {
	// Dir holds the log and snapshots. Empty keeps everything in memory
	// (not durable: a restart forgets every lease).
	Dir string
	// NoSync skips fdatasync: grants survive a process crash but not a
	// machine crash. Unsafe for fencing across power loss.
	NoSync bool
	// LogSyncs is how many group commits of the log may be syncing at
	// once (default wal.DefaultSyncs, one at a time; see wal.Options.Syncs).
	// Whatever it is, a change is acknowledged only once it and every
	// change before it are durable. Negative is an error.
	LogSyncs int
	// SnapshotBytes is how much log triggers a snapshot (default 64 MiB).
	SnapshotBytes int64
	// Clock is the engine's clock (default clock.Real()). Expiry is judged
	// by its monotonic reading.
	Clock  clock.Clock
	Hooks  Hooks
	Logger *slog.Logger
	// RecentEvents is how many events Recent keeps (default 256).
	RecentEvents int
	// TombstoneTTL is how long a freed (released, force-released or
	// expired) grant is at least remembered, so that its holder's repeated
	// release still returns nil (default 10 minutes). A restart gives every
	// grant remembered when the engine stopped this long again. See
	// engine_tombs.go.
	TombstoneTTL time.Duration
	// MaxTombstones is how many freed grants are remembered at most; past
	// it the oldest are forgotten first, even before TombstoneTTL (default
	// 1,048,576). One took about 250 bytes of memory and 100 of snapshot
	// when an entry took 160 bytes (measured with 19-byte names and
	// 12-byte owners); an entry takes 96 now.
	MaxTombstones int
	// MaxTombstoneBytes bounds the memory of the freed grants remembered:
	// each counts its name's and owner's bytes plus tombOverhead (a
	// tombstone keeps no request id or data); past it the oldest are
	// forgotten first, as past MaxTombstones (default
	// DefaultMaxTombstoneBytes). Negative, or too small for one tombstone
	// of the longest name and owner, is an error.
	MaxTombstoneBytes int64
	// MaxRecordBytes bounds the versioned records of all clients together:
	// each counts its key's and value's bytes plus recOverhead. A write
	// that would take the total past it is refused with a *QuotaError
	// (Resource QuotaRecords) and changes nothing; writes that shrink or
	// delete records always pass (default DefaultMaxRecordBytes). Negative
	// is an error.
	MaxRecordBytes int64
}

// The defaults of EngineConfig's memory bounds: 64 MiB of tombstones are
// about 79,000 freed grants with 256-byte names and 250-byte owners (the
// count bound alone allowed a million: 1.1 GB of the engine's heap, 2.9
// GB measured in a running server), 128 MiB of records about 2,000
// values of 64 KiB. A running server's RSS is several times the records'
// bytes under a write flood (the heap's headroom, the snapshot's encoding
// of every record, request buffers): 8,000 records of 64 KiB, within a
// bound of 512 MiB, took one to 2.7 GB.
const (
	DefaultMaxTombstoneBytes = 64 << 20
	DefaultMaxRecordBytes    = 128 << 20
)

// Engine is the server's native Backend: lease state in memory, every
// change appended to a group-committed log before it is acknowledged,
// waiters queued per name and granted in arrival order by the release or
// expiry that frees the lease, and sessions.
//
// Tokens come from one counter for all names, so a token is never reused
// even after the name's record is forgotten.
//
// Renewals that do not raise a lease's TTL are not logged: after a restart
// every recovered lease (and session) gets its full TTL again from the
// moment of recovery, which is never earlier than any holder's own
// deadline (etcd treats its leases the same way).
type Engine struct {
	cfg  EngineConfig
	clk  clock.Clock
	base time.Time
	log  durableLog
	log_ *slog.Logger
	hub  *hub

	mu        sync.Mutex
	emitMu    sync.Mutex // orders deferred completions in memory-only mode
	deferred  []func(error)
	leases    map[string]*engEntry
	parked    map[string]*engWaiter    // waiters between two polls (engine_park.go)
	sems      map[string]*[]*engWaiter // semaphore name → its permit waiters, in arrival order (engine_permits.go)
	sessions  map[string]*engSession
	dl        deadlines[*engEntry]   // expiry of leases held without a session
	sdl       deadlines[*engSession] // expiry of sessions
	held      int
	waiters   int
	token     uint64      // last token issued
	tombs     []tombstone // in the order they were made (engine_tombs.go)
	nTombs    int         // live tombstones in tombs
	tombBytes int64       // their tombSize, summed
	closed    bool
	kick      chan struct{}
	stop      chan struct{}
	loopDone  chan struct{}
	snapping  bool
	logged    int64  // bytes logged since the last snapshot began
	wake      int64  // when the expiry loop will next wake by itself
	enc       []byte // scratch for encoding a record (scratch)
	snapshots sync.WaitGroup

	owners ownerCache // shares owners' bytes among their leases (engine_entry.go)

	recs engRecords // versioned records (engine_records.go)
}

// engEntry is one name's lease state. It is kept small (96 bytes): ten
// million held leases are ten million of them. What most leases do not
// have (a request id, data, a session, queued waiters) lives in engExtra,
// allocated only when one of them is set.
type engEntry struct {
	name      string
	owner     string
	x         *engExtra // nil when the grant has none of its fields
	token     uint64
	ttl       time.Duration
	loggedTTL time.Duration // the largest TTL logged for this grant
	acquired  int64         // wall clock, unix ns
	dl        deadline
	pending   atomic.Int32 // records appended for this name and not yet durable
	held      bool
	tomb      bool // freed recently: remembered for a repeated release
}

// engExtra holds an entry's rarer fields.
type engExtra struct {
	reqID string
	data  string // string, not []byte: 8 bytes less
	sess  *engSession
	wq    []*engWaiter // queued acquires
}

type engSession struct {
	id     string
	ttl    time.Duration
	leases map[*engEntry]struct{}
	waits  map[*engWaiter]struct{}
	ended  bool
	dl     deadline
}

type engWaiter struct {
	req   AcquireRequest
	sess  *engSession
	since time.Time
	at    int64 // engine clock when queued
	ch    chan grantResult
	done  bool // granted or removed
	// parked: its poll ran out and its place waits for the next one
	// (engine_park.go); token: the grant it got, once granted.
	parked bool
	taken  chan struct{} // closed when a parked place is taken back
	grace  clock.Timer   // the parked place's grace (engine_park.go)
	token  uint64
	// A semaphore's waiter (engine_permits.go): sem is the semaphore's
	// name ("" for a lease's waiter), n how many permits it may take
	// (indexes below n), got the permit's name once granted.
	sem string
	n   int
	got string
}

type grantResult struct {
	rec leasehold.Record
	err error
}

// give hands w its answer.
func (w *engWaiter) give(r grantResult) { w.ch <- r }

// sendTo returns a func that sends its answer on ch.
func sendTo(ch chan grantResult) func(grantResult) { return func(r grantResult) { ch <- r } }

// OpenEngine opens (or creates) the engine's data in cfg.Dir and recovers
// its leases.
func OpenEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = 64 << 20
	}
	if cfg.TombstoneTTL <= 0 {
		cfg.TombstoneTTL = 10 * time.Minute
	}
	if cfg.MaxTombstones <= 0 {
		cfg.MaxTombstones = 1 << 20
	}
	if err := cfg.defaultBounds(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg: cfg, clk: cfg.Clock, base: cfg.Clock.Now(), log_: cfg.Logger,
		hub:      newHub(cfg.RecentEvents),
		leases:   map[string]*engEntry{},
		parked:   map[string]*engWaiter{},
		sems:     map[string]*[]*engWaiter{},
		sessions: map[string]*engSession{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	if cfg.Dir != "" {
		r := newRecovery(e)
		start := time.Now()
		resume := pauseGC()
		l, err := openLog(cfg, r.load, r.apply)
		if err != nil {
			resume()
			return nil, fmt.Errorf("open the server's log in %s: %w", cfg.Dir, err)
		}
		e.log = l
		r.finish()
		resume()
		e.log_.Info("recovered leases", "held", e.held, "sessions", len(e.sessions), "last_token", e.token, "records", e.recordCount(), "took", time.Since(start))
	}
	go e.expiryLoop()
	return e, nil
}

// MinTombstoneBytes is the smallest MaxTombstoneBytes: one tombstone of
// the longest name and owner.
const MinTombstoneBytes = maxTombSize

// defaultBounds gives MaxTombstoneBytes and MaxRecordBytes their defaults
// when zero, and refuses values that cannot be right.
func (cfg *EngineConfig) defaultBounds() error {
	switch {
	case cfg.MaxTombstoneBytes < 0:
		return fmt.Errorf("MaxTombstoneBytes is %d: it must not be negative (0 takes the default, %d)", cfg.MaxTombstoneBytes, DefaultMaxTombstoneBytes)
	case cfg.MaxTombstoneBytes == 0:
		cfg.MaxTombstoneBytes = DefaultMaxTombstoneBytes
	case cfg.MaxTombstoneBytes < maxTombSize:
		return fmt.Errorf("MaxTombstoneBytes is %d: it must hold at least one tombstone of the longest name and owner (%d bytes)", cfg.MaxTombstoneBytes, maxTombSize)
	}
	switch {
	case cfg.MaxRecordBytes < 0:
		return fmt.Errorf("MaxRecordBytes is %d: it must not be negative (0 takes the default, %d)", cfg.MaxRecordBytes, DefaultMaxRecordBytes)
	case cfg.MaxRecordBytes == 0:
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	return nil
}

// durableLog is the group-committed log (package wal).
type durableLog interface {
	Append(rec []byte, done func(error))
	Sync() error
	Rotate() (uint64, error)
	WriteSnapshot(seq uint64, write func(w io.Writer) error) error
	Size() int64
	Close() error
	// Err is the error that broke the log, nil while it works.
	Err() error
}

// openLog opens the log; set by engine_wal.go.
var openLog = func(cfg EngineConfig, load func(io.Reader) error, apply func([]byte) error) (durableLog, error) {
	return nil, errors.New("this build has no durable log")
}

// now is the engine's monotonic clock in nanoseconds.
func (e *Engine) now() int64 {
	if mutation.On("expiry-wall-clock") {
		return int64(clock.Wall(e.clk).Sub(e.base))
	}
	return int64(e.clk.Now().Sub(e.base))
}

// lock and unlock bracket every state change. Completions deferred while
// the lock was held (memory-only mode) run after it is released, in order.
func (e *Engine) lock() { e.mu.Lock() }

func (e *Engine) unlock() {
	if len(e.deferred) == 0 {
		e.mu.Unlock()
		return
	}
	fns := e.deferred
	e.deferred = nil
	e.emitMu.Lock()
	e.mu.Unlock()
	for _, f := range fns {
		f(nil)
	}
	e.emitMu.Unlock()
}

// firstError returns the first failed check, in the order given: a call's
// argument checks, then ctx.Err(), as the engine and the proxy check them.
func firstError(checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// lockOpen is how a call enters the engine: it returns firstError(checks),
// else takes e.mu, or returns ErrClosed without it.
func (e *Engine) lockOpen(checks ...error) error {
	if err := firstError(checks...); err != nil {
		return err
	}
	e.lock()
	if e.closed {
		e.unlock()
		return leasehold.ErrClosed
	}
	return nil
}

// commit appends rec (nil: nothing to log) for ent and calls done once it
// and everything before it is durable. Called with e.mu held.
func (e *Engine) commit(ent *engEntry, rec []byte, done func(error)) {
	first := true
	if ent != nil {
		first = ent.pending.Add(1) == 1
	}
	fn := func(err error) {
		if ent != nil {
			ent.pending.Add(-1)
		}
		done(err)
	}
	if rec != nil {
		e.logged += int64(len(rec))
		if e.logged > e.cfg.SnapshotBytes {
			e.poke()
		}
	}
	if e.log == nil || rec == nil && first {
		// Nothing to wait for: run after unlock.
		e.deferred = append(e.deferred, fn)
		return
	}
	if rec == nil {
		rec = encodeNop()
	}
	e.log.Append(rec, fn)
}

func (e *Engine) emit(ev Event) {
	if e.cfg.Hooks.Event != nil {
		e.cfg.Hooks.Event(ev)
	}
	e.hub.publish(ev)
}

// live reports whether ent is held and unexpired at now.
func (ent *engEntry) live(now int64) bool {
	if ent == nil || !ent.held {
		return false
	}
	if s := ent.sess(); s != nil {
		return !s.ended && now < s.dl.at
	}
	return now < ent.dl.at
}

func (ent *engEntry) remaining(now int64) time.Duration {
	at := ent.dl.at
	if s := ent.sess(); s != nil {
		at = s.dl.at
	}
	return time.Duration(at - now)
}

func (ent *engEntry) record(now int64) leasehold.Record {
	return leasehold.Record{
		Name: ent.name, Owner: ent.owner, Token: ent.token, Data: bytesOf(ent.data()), TTL: ent.ttl,
		Remaining: ent.remaining(now), Acquired: time.Unix(0, ent.acquired),
	}
}

func (ent *engEntry) heldError(now int64) *leasehold.HeldError {
	return &leasehold.HeldError{Name: ent.name, Owner: ent.owner, Token: ent.token,
		Remaining: ent.remaining(now), Acquired: time.Unix(0, ent.acquired)}
}

// Close stops the engine: waiters get ErrClosed, pending records are made
// durable, and the log is closed. Leases stay as they are in the log.
func (e *Engine) Close() error {
	e.lock()
	if e.closed {
		e.unlock()
		return nil
	}
	e.closed = true
	for _, ent := range e.leases {
		for _, w := range ent.queue() {
			w.done = true
			w.ch <- grantResult{err: leasehold.ErrClosed}
		}
		ent.setQueue(nil)
	}
	for _, q := range e.sems {
		for _, w := range *q {
			w.done = true
			w.ch <- grantResult{err: leasehold.ErrClosed}
		}
	}
	clear(e.sems)
	e.waiters = 0
	e.unlock()
	close(e.stop)
	<-e.loopDone
	e.snapshots.Wait()
	e.hub.closeAll()
	if e.log != nil {
		return e.log.Close()
	}
	return nil
}

// Channels for one answer, reused: a call that takes one receives its one
// value (or never hands it to anyone) before it puts it back.
var (
	errChans   = sync.Pool{New: func() any { return make(chan error, 1) }}
	grantChans = sync.Pool{New: func() any { return make(chan grantResult, 1) }}
)

// awaitErr receives ch's one value and puts ch back for reuse.
func awaitErr(ch chan error) error {
	err := <-ch
	errChans.Put(ch)
	return err
}

func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
