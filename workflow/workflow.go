// Package workflow applies state-machine transitions to workflow instances
// kept on any leasehold.RecordStore, exactly once each, with an append-only
// history and idempotency by request id written atomically with every
// transition, and a choice of concurrency strategies: optimistic,
// pessimistic, lease-based, and adaptive (optimistic until an instance gets
// hot, then a fair per-instance queue that batches transitions).
//
// See docs/workflows.md.
package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// Config configures Workflows.
type Config struct {
	// Records keeps the instances, their history and their request ids.
	// Required. It must support Txn (stores without multi-key transactions,
	// such as dynalite's DynamoDB API, fail with leasehold.ErrTxnUnsupported).
	Records leasehold.RecordStore
	// Leases is where the Lease strategy (and Pessimistic, where Records is
	// not a leasehold.RecordLocker) takes its leases on instances, and where
	// Adaptive's queue head takes a FIFO lease so that the queues of several
	// processes take turns (see LocalQueue). Often the same store as
	// Records.
	Leases leasehold.Store
	// Strategy: Optimistic, Pessimistic, Lease or Adaptive (the default).
	Strategy Strategy
	// Owner is the lease owner identity (default: leasehold's default,
	// host/pid/random).
	Owner string

	// MaxAttempts bounds the conditional writes of one optimistic
	// transition (default 10); past it Transition returns a
	// *leasehold.RetriesExhaustedError.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between optimistic attempts (defaults 1ms and 100ms).
	BackoffMin, BackoffMax time.Duration
	// LockWait is how long Pessimistic waits for its row lock
	// (lock_timeout) or lease, Lease for its lease, and each of
	// Optimistic, Pessimistic and Lease for its turn behind this process's
	// other transitions of the instance (default 5s).
	LockWait time.Duration
	// LeaseTTL is the TTL of the leases taken (default 10s).
	LeaseTTL time.Duration

	// Threshold is the conflict rate above which Adaptive moves an
	// instance to fair queuing (default 0.05); it moves back below half
	// of it.
	Threshold float64
	// Window is the length of the sliding window over which the conflict
	// rate is measured (default 1s).
	Window time.Duration
	// MinSamples is how many attempts the window must hold before the rate
	// moves an instance to the queue (default 10).
	MinSamples int
	// MaxBatch caps the transitions applied in one transaction by the
	// queue (default and upper bound: as many as fit in
	// leasehold.MaxTxnOps).
	MaxBatch int
	// LocalQueue tells Adaptive that this process is the only one that
	// writes its instances at high rates: its queue head then takes no
	// lease even when Leases is set. Correctness never depends on it
	// (every write is conditioned on the version read).
	LocalQueue bool
	// QueueSlice is how long a queue head keeps its FIFO lease while
	// transitions keep arriving before it lets the heads of other
	// processes in (default 50ms). The lease's TTL is five slices (at
	// least 200ms, at most LeaseTTL), renewed while it is held: what a
	// process that dies holding it costs the others.
	QueueSlice time.Duration

	// Registerer receives the metrics (nil: none).
	Registerer prometheus.Registerer
	// Clock times entries, windows and backoff (default clock.Real()).
	Clock clock.Clock
}

// Workflows applies the transitions of one Definition.
type Workflows struct {
	def     Definition
	cfg     Config
	records leasehold.RecordStore
	locker  leasehold.RecordLocker // nil where Records is not one
	client  *leasehold.Client      // nil without Leases
	clock   clock.Clock
	m       *metrics

	mu        sync.Mutex
	hot       map[string]*hotInstance
	lastSweep time.Time
}

// New checks the definition and the configuration.
func New(def Definition, cfg Config) (*Workflows, error) {
	if err := def.Validate(); err != nil {
		return nil, err
	}
	if cfg.Records == nil {
		return nil, &leasehold.InvalidError{Field: "records", Reason: "Config.Records is required"}
	}
	if cfg.Strategy == "" {
		cfg.Strategy = Adaptive
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 10
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = max(100*time.Millisecond, cfg.BackoffMin)
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = 5 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = 0.05
	}
	if cfg.Window == 0 {
		cfg.Window = time.Second
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 10
	}
	maxBatch := (leasehold.MaxTxnOps - 2) / 4
	if cfg.MaxBatch == 0 || cfg.MaxBatch > maxBatch {
		cfg.MaxBatch = maxBatch
	}
	if cfg.QueueSlice == 0 {
		cfg.QueueSlice = 50 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	bad := func(field, format string, args ...any) error {
		return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case cfg.MaxAttempts < 1:
		return nil, bad("max attempts", "%d must be at least 1", cfg.MaxAttempts)
	case cfg.BackoffMin < 0 || cfg.BackoffMax < cfg.BackoffMin:
		return nil, bad("backoff", "need 0 < min (%s) <= max (%s)", cfg.BackoffMin, cfg.BackoffMax)
	case cfg.LockWait < 0:
		return nil, bad("lock wait", "%s is negative", cfg.LockWait)
	case cfg.Threshold < 0 || cfg.Threshold >= 1:
		return nil, bad("threshold", "%v must lie in (0, 1)", cfg.Threshold)
	case cfg.Window < time.Millisecond:
		return nil, bad("window", "%s is shorter than 1ms", cfg.Window)
	case cfg.MinSamples < 1:
		return nil, bad("min samples", "%d must be at least 1", cfg.MinSamples)
	case cfg.MaxBatch < 1:
		return nil, bad("max batch", "%d must be at least 1", cfg.MaxBatch)
	case cfg.QueueSlice < 0:
		return nil, bad("queue slice", "%s is negative", cfg.QueueSlice)
	}
	if err := storekit.ValidateTTL(cfg.LeaseTTL); err != nil {
		return nil, err
	}
	w := &Workflows{def: def, cfg: cfg, records: cfg.Records, clock: cfg.Clock, hot: map[string]*hotInstance{}}
	w.locker, _ = cfg.Records.(leasehold.RecordLocker)
	switch cfg.Strategy {
	case Optimistic, Adaptive:
	case Pessimistic:
		if w.locker == nil && cfg.Leases == nil {
			return nil, bad("leases", "the pessimistic strategy needs Config.Leases: %T has no record locks", cfg.Records)
		}
	case Lease:
		if cfg.Leases == nil {
			return nil, bad("leases", "the lease strategy needs Config.Leases")
		}
	default:
		return nil, bad("strategy", "%q is not one of optimistic, pessimistic, lease, adaptive", cfg.Strategy)
	}
	if cfg.Leases != nil {
		opts := []leasehold.Option{leasehold.WithClock(cfg.Clock), leasehold.WithBackoff(time.Millisecond, 50*time.Millisecond)}
		if cfg.Owner != "" {
			opts = append(opts, leasehold.WithOwner(cfg.Owner))
		}
		c, err := leasehold.New(cfg.Leases, opts...)
		if err != nil {
			return nil, err
		}
		w.client = c
	}
	m, err := newMetrics(cfg.Registerer, def.Name)
	if err != nil {
		return nil, err
	}
	w.m = m
	return w, nil
}

// Definition returns the workflow's definition.
func (w *Workflows) Definition() Definition { return w.def }

// Strategy returns the configured strategy.
func (w *Workflows) Strategy() Strategy { return w.cfg.Strategy }

// Serves returns the strategy that serves transitions: the configured one,
// except Pessimistic on a record store without row locks, which is served
// (and reported) as Lease.
func (w *Workflows) Serves() Strategy {
	if w.cfg.Strategy == Pessimistic && w.locker == nil {
		return Lease
	}
	return w.cfg.Strategy
}

func (w *Workflows) now() time.Time { return w.clock.Now().Round(0).UTC() }

// Create creates an instance in the definition's initial state, or returns
// an error matching ErrExists and changes nothing.
func (w *Workflows) Create(ctx context.Context, instance string) (Instance, error) {
	if err := checkName("instance", instance); err != nil {
		return Instance{}, err
	}
	rec := instRec{State: w.def.Initial, Created: w.now()}
	b, err := json.Marshal(rec)
	if err != nil {
		return Instance{}, err
	}
	if _, err := w.records.PutRecord(ctx, w.instKey(instance), b, 0); err != nil {
		if errors.Is(err, leasehold.ErrConflict) {
			return Instance{}, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, instance, ErrExists)
		}
		return Instance{}, err
	}
	return w.instance(instance, rec), nil
}

// Get returns the instance, or an error matching ErrNoInstance.
func (w *Workflows) Get(ctx context.Context, instance string) (Instance, error) {
	if err := checkName("instance", instance); err != nil {
		return Instance{}, err
	}
	rec, _, err := w.readInstance(ctx, instance)
	if err != nil {
		return Instance{}, err
	}
	return w.instance(instance, rec), nil
}

func (w *Workflows) instance(id string, r instRec) Instance {
	in := Instance{Workflow: w.def.Name, ID: id, State: r.State, Version: r.Version, Created: r.Created, Updated: r.Created}
	if r.Last != nil {
		last := *r.Last
		in.Last, in.Updated, in.LastActor = &last, last.At, last.Actor
	}
	return in
}

// command is one Transition call.
type command struct {
	ctx                            context.Context
	id, from, to, actor, requestID string
	label                          string       // recorded beside actor (Request.Label)
	enqueued                       time.Time    // when its request id first arrived (queue mode)
	done                           chan outcome // buffered 1 (queue mode)
	final                          bool         // set by the head before delivering: not a refusal
	// passTurn, when set, is called as a refusal starts: the instance is
	// not in from, so the caller's turn (turns.go) is passed on before the
	// refusal checks the request id, which needs no turn.
	passTurn func()
}

type outcome struct {
	res Result
	err error
}

// Transition moves instance from → to on behalf of actor, once per
// requestID:
//
//   - Applied: it moved the instance; the history entry and the request
//     record were written in the same transaction.
//   - Repeated: requestID was applied before by the same actor for the
//     same transition (from → to); nothing changed and the Result is the
//     original one, whatever state the instance is in now. A request id
//     applied by another actor or for another transition is refused with a
//     *RequestReusedError that carries the entry it applied.
//   - AlreadyDone: the instance is in to because ANOTHER request moved it;
//     Result.Entry says who, which request and when. Nothing changed.
//
// A transition that does not start from the current state is refused with
// a *WrongStateError, one the definition lacks with a *NotAllowedError, an
// unknown instance with ErrNoInstance, bad arguments with a
// *leasehold.InvalidError; none changes anything. An optimistic transition
// still conflicting after Config.MaxAttempts writes returns a
// *leasehold.RetriesExhaustedError; a lock, lease or turn not granted
// within Config.LockWait an error matching leasehold.ErrLockTimeout.
//
// If ctx ends while the transition is in flight, its outcome is unknown to
// the caller: calling again with the same requestID (and actor) tells —
// Repeated with the entry if it was applied (a *RequestReusedError with the
// entry if asked from another state since), and otherwise it is applied or
// refused now; Lookup tells without applying. A lease-based call that gives
// up while its lease is being granted releases the grant, so that asking
// again is not kept waiting for the lease's TTL. Only applied transitions
// are recorded: a request that was refused may be applied when asked again.
//
// Deprecated: use Apply, whose Request names the five strings that
// Transition takes in a row, and which answers a wrong-state refusal in
// the same Result shape as AlreadyDone.
func (w *Workflows) Transition(ctx context.Context, instance, from, to, actor, requestID string) (Result, error) {
	return w.transition(ctx, Request{Instance: instance, From: from, To: to, Actor: actor, RequestID: requestID})
}

func (w *Workflows) transition(ctx context.Context, r Request) (Result, error) {
	instance, from, to, actor, requestID := r.Instance, r.From, r.To, r.Actor, r.RequestID
	c := &command{ctx: ctx, id: instance, from: from, to: to, actor: actor, requestID: requestID, label: r.Label}
	if err := w.check(c); err != nil {
		return Result{}, err
	}
	var res Result
	var err error
	switch w.cfg.Strategy {
	case Optimistic:
		res, err = w.optimisticTurn(ctx, c)
	case Pessimistic:
		if w.locker != nil {
			res, err = w.pessimistic(ctx, c)
		} else {
			res, err = w.leased(ctx, c, Lease) // no row locks here: it is a lease, and says so
		}
	case Lease:
		res, err = w.leased(ctx, c, Lease)
	case Adaptive:
		res, err = w.adaptive(ctx, c)
	}
	w.m.observe(res, err, w.cfg.Strategy)
	return res, err
}

func (w *Workflows) check(c *command) error {
	if err := checkName("instance", c.id); err != nil {
		return err
	}
	if err := storekit.ValidateOwner(c.actor); err != nil {
		var inv *leasehold.InvalidError
		if errors.As(err, &inv) {
			return &leasehold.InvalidError{Field: "actor", Reason: inv.Reason}
		}
		return err
	}
	if c.label != "" {
		if err := storekit.ValidateOwner(c.label); err != nil {
			var inv *leasehold.InvalidError
			if errors.As(err, &inv) {
				return &leasehold.InvalidError{Field: "label", Reason: inv.Reason}
			}
			return err
		}
	}
	if c.requestID == "" {
		return &leasehold.InvalidError{Field: "request id", Reason: "must not be empty: it makes the transition idempotent"}
	}
	if err := storekit.ValidateRequestID(c.requestID); err != nil {
		return err
	}
	if !w.def.Allowed(c.from, c.to) {
		reason := "the definition has no such transition"
		switch {
		case !w.def.hasState(c.from):
			reason = fmt.Sprintf("%q is not a state of the definition", c.from)
		case !w.def.hasState(c.to):
			reason = fmt.Sprintf("%q is not a state of the definition", c.to)
		}
		return &NotAllowedError{Workflow: w.def.Name, From: c.from, To: c.to, Reason: reason}
	}
	return nil
}

// entry is the history entry applying c to an instance at version v.
func (w *Workflows) entry(c *command, v uint64, s Strategy, token uint64) Entry {
	return Entry{Instance: c.id, Version: v + 1, From: c.from, To: c.to, Actor: c.actor, Label: c.label,
		RequestID: c.requestID, At: w.now(), Strategy: s, Token: token}
}

// apply returns the plan that applies c to rec (record version ver).
func (w *Workflows) planOne(c *command, rec instRec, ver uint64, s Strategy, token uint64) *plan {
	e := w.entry(c, rec.Version, s, token)
	next := rec
	next.State, next.Version, next.Last = c.to, e.Version, &e
	return &plan{id: c.id, version: ver, next: next, applied: []Entry{e}}
}

func applied(c *command, e Entry, attempts int) Result {
	return Result{Outcome: Applied, Instance: c.id, From: c.from, To: c.to, State: e.To, Version: e.Version,
		Entry: e, Strategy: e.Strategy, Attempts: attempts}
}

// repeated answers a request id that was applied before: Repeated if this
// call asks what it applied (same actor and transition), a
// *RequestReusedError carrying the entry otherwise.
func (w *Workflows) repeated(c *command, e Entry, s Strategy, attempts int) (Result, error) {
	if e.From != c.from || e.To != c.to || e.Actor != c.actor {
		return Result{}, &RequestReusedError{Workflow: w.def.Name, Instance: c.id, RequestID: c.requestID,
			Actor: c.actor, From: c.from, To: c.to, Entry: e}
	}
	return Result{Outcome: Repeated, Instance: c.id, From: c.from, To: c.to, State: e.To, Version: e.Version,
		Entry: e, Strategy: s, Attempts: attempts}, nil
}

// refuse answers a command whose from-state is not rec's state, when its
// request id is known not to have been applied: AlreadyDone if another
// request moved the instance into c.to, a *WrongStateError otherwise.
func (w *Workflows) refuse(c *command, rec instRec, s Strategy, attempts int) (Result, error) {
	if rec.State == c.to && rec.Last != nil && rec.Last.To == c.to {
		return Result{Outcome: AlreadyDone, Instance: c.id, From: c.from, To: c.to, State: rec.State,
			Version: rec.Version, Entry: *rec.Last, Strategy: s, Attempts: attempts}, nil
	}
	var last *Entry
	if rec.Last != nil {
		l := *rec.Last
		last = &l
	}
	return Result{}, &WrongStateError{Workflow: w.def.Name, Instance: c.id, Current: rec.State, Version: rec.Version,
		From: c.from, To: c.to, Last: last, strategy: s, attempts: attempts}
}

// refusal answers a command that does not start from rec's state: first
// whether its request id was applied before (Repeated), then refuse.
func (w *Workflows) refusal(ctx context.Context, c *command, rec instRec, s Strategy, attempts int) (Result, error) {
	if c.passTurn != nil {
		c.passTurn()
	}
	if rec.Last != nil && rec.Last.RequestID == c.requestID {
		return w.repeated(c, *rec.Last, s, attempts)
	}
	e, found, err := w.readRequest(ctx, c.id, c.requestID)
	if err != nil {
		return Result{}, err
	}
	if found {
		return w.repeated(c, e, s, attempts)
	}
	return w.refuse(c, rec, s, attempts)
}

// optimistic reads, checks and writes in one transaction conditioned on
// the version read, retrying conflicts. onConflict, if set, is told of each
// attempt's result and may stop the retries (Adaptive moving the instance
// to its queue): optimistic then returns errMoved.
func (w *Workflows) optimistic(ctx context.Context, c *command, s Strategy, token uint64, onAttempt func(conflict bool) (stop bool)) (Result, error) {
	retry := backoff.NewFull(w.cfg.BackoffMin, w.cfg.BackoffMax)
	var last *leasehold.ConflictError
	for attempt := 1; attempt <= w.cfg.MaxAttempts; attempt++ {
		rec, ver, err := w.readInstance(ctx, c.id)
		if err != nil {
			return Result{}, err
		}
		if rec.State != c.from {
			return w.refusal(ctx, c, rec, s, attempt-1)
		}
		p := w.planOne(c, rec, ver, s, token)
		t, err := w.txn(p)
		if err != nil {
			return Result{}, err
		}
		_, err = w.records.Txn(ctx, t)
		kind, _ := w.classify(c.id, err)
		if onAttempt != nil && onAttempt(kind == conflictInstance) && kind == conflictInstance {
			return Result{}, errMoved
		}
		if res, done, err := w.outcome(ctx, c, p, kind, err, s, attempt); done {
			return res, err
		}
		w.m.conflict()
		errors.As(err, &last)
		if attempt == w.cfg.MaxAttempts {
			break
		}
		t2 := w.clock.NewTimer(retry.Next())
		select {
		case <-ctx.Done():
			t2.Stop()
			return Result{}, ctx.Err()
		case <-t2.C():
		}
	}
	return Result{}, &leasehold.RetriesExhaustedError{Key: w.instKey(c.id), Attempts: w.cfg.MaxAttempts, Last: last}
}

// outcome answers the transaction of plan p, which ended with err (of
// kind): the transition applied, failed, or had already been applied under
// its request id (repeated). done is false for a conflict to retry.
func (w *Workflows) outcome(ctx context.Context, c *command, p *plan, kind conflictKind, err error, s Strategy, attempt int) (res Result, done bool, _ error) {
	switch kind {
	case conflictNone:
		if err != nil {
			return Result{}, true, err
		}
		return applied(c, p.applied[0], attempt), true, nil
	case conflictRequest:
		e, found, err := w.readRequest(ctx, c.id, c.requestID)
		if err != nil {
			return Result{}, true, err
		}
		if found {
			res, err := w.repeated(c, e, s, attempt)
			return res, true, err
		}
	}
	return Result{}, false, nil
}

var errMoved = errors.New("workflow: instance moved to the fair queue")
