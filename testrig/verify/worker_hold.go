package verify

import (
	"context"
	"errors"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// proc is one logical process of a worker: its random source, its recorder
// and owner identity, and its injected clock (nil: the real one).
type proc struct {
	w      *Worker
	cfg    WorkerConfig
	client int
	rng    *rand.Rand
	rec    *recStore
	owner  string
	k      clock.Clock
}

func (w *Worker) proc(client int) *proc {
	store, owner := w.Recorded(client)
	return &proc{w: w, cfg: w.Cfg, client: client, rng: w.Rand(client), rec: store.(*recStore), owner: owner, k: w.clock(client)}
}

// cycles yields each cycle's number and name (a random one of Cfg.Keys),
// Cfg.Cycles times (0: without end), until ctx ends.
func (p *proc) cycles(ctx context.Context) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for n := 0; p.cfg.Cycles == 0 || n < p.cfg.Cycles; n++ {
			if ctx.Err() != nil || !yield(n, p.cfg.Keys[p.rng.IntN(len(p.cfg.Keys))]) {
				return
			}
		}
	}
}

// holdWorkload is a workload of leasehold.Client holders, run by one loop
// (run): each cycle takes a lease on the cycle's name (grant), works in
// its critical section — with the oracle, a fenced increment of a counter
// (criticalSection); without, the MidCS hook and a hold of Cfg.Hold —
// emits one "cs" event for the grant, and gives the lease back.
//
// The "cs" event is the interval during which the process believed it
// held the lease: From is when the grant returned, To when it stopped
// believing it (the release call, or its leadership found lost), or its
// local deadline if that came first (on an injected clock: the last real
// instant the lease was found held; see belief).
type holdWorkload struct {
	// grant takes the cycle's lease on name within Cfg.AcquireTimeout. An
	// endProc error ends the process; a pausing one makes it wait
	// Cfg.ErrorPause before its next cycle. Either way it is logged as
	// "<owner> <verb> <name>: <error>".
	grant func(ctx context.Context, p *proc, c *leasehold.Client, name string) (*leasehold.Lease, error)
	verb  string
	// rounds, if set, draws how many rounds of work one grant does (a
	// leader's), each begun only while the lease is still held; unset, a
	// grant does one critical section.
	rounds func(rng *rand.Rand) int
	// permits: the critical section is keyed by the lease's own name (a
	// semaphore's permit NAME/permit/I, also given in the event's Msg),
	// not by the cycle's name.
	permits bool
	// withOwner puts the holder's identity in the event's Owner.
	withOwner bool
	// release names the release in log lines; releaseRetries is how often
	// a release that failed with a store error is tried again after
	// Cfg.ErrorPause, when that is set (see releaseLease).
	release        string
	releaseRetries int
	// rest: after each release, wait a random time up to TTL/4.
	rest bool
}

// endProc is a grant's error that ends the process (its client refused
// the name); what says what refused it.
type endProc struct {
	what string
	err  error
}

func (e endProc) Error() string { return e.err.Error() }

// pausing is a grant given up at a store error (Cfg.ErrorPause set).
type pausing struct{ err error }

func (e pausing) Error() string { return e.err.Error() }

// run is the loop of logical process client.
func (m holdWorkload) run(ctx context.Context, w *Worker, client int) {
	p := w.proc(client)
	cfg := p.cfg
	var store leasehold.Store = p.rec
	opts := []leasehold.Option{leasehold.WithOwner(p.owner), leasehold.WithBackoff(5*time.Millisecond, cfg.TTL/4)}
	if p.k != nil {
		opts = append(opts, leasehold.WithClock(p.k))
	}
	if w.Wrap != nil {
		store = w.Wrap(client, store)
	}
	c, err := leasehold.New(store, opts...)
	if err != nil {
		w.Logf("client: %v", err)
		return
	}
	for _, name := range p.cycles(ctx) {
		l, err := m.grant(ctx, p, c, name)
		if err != nil {
			var end endProc
			if errors.As(err, &end) {
				w.Logf("%s %s %s: %v", p.owner, end.what, name, end.err)
				return
			}
			if ctx.Err() == nil {
				w.Logf("%s %s %s: %v", p.owner, m.verb, name, err)
			}
			if errors.As(err, new(pausing)) {
				pauseAfterError(ctx, cfg.ErrorPause)
			}
			continue
		}
		from := Mono()
		b := &belief{k: p.k, l: l}
		b.held()
		key := name
		if m.permits {
			key = l.Name()
		}
		wrote := false
		if m.rounds == nil {
			wrote = p.section(ctx, key, b)
			if cfg.Oracle == "" {
				b.held() // criticalSection checks it before writing
			}
		} else {
			for r := m.rounds(p.rng); r > 0 && ctx.Err() == nil && b.held(); r-- {
				if p.section(ctx, key, b) {
					wrote = true
				}
			}
			b.held()
		}
		to := Mono()
		if p.k != nil {
			to = b.last
		} else if dl := MonoOf(l.Deadline()); dl < to {
			to = dl
		}
		ev := Event{E: "cs", Proc: p.rec.proc(), Key: name, Token: l.Token(), From: from, To: to, Wrote: wrote, Lost: l.Err() != nil}
		if m.withOwner {
			ev.Owner = p.owner
		}
		if m.permits {
			ev.Msg = l.Name()
		}
		ev.T = Mono()
		w.Emit(ev)
		p.releaseLease(ctx, l, m.release, key, m.releaseRetries)
		if gap := cfg.TTL / 4; m.rest && gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(p.rng.Int64N(int64(gap)))):
			}
		}
	}
}

// section is one critical section on key with the lease of b held: with
// the oracle, criticalSection (it reports whether the write was accepted);
// without, the MidCS hook and a hold of Cfg.Hold.
func (p *proc) section(ctx context.Context, key string, b *belief) bool {
	if p.cfg.Oracle != "" {
		return criticalSection(ctx, p.w, p.client, p.rec.proc(), key, b)
	}
	if p.w.MidCS != nil {
		p.w.MidCS(p.client, key, b.l)
	}
	if p.cfg.Hold > 0 {
		time.Sleep(p.cfg.Hold)
	}
	return false
}

// releaseLease releases l, logging a failure as "<owner> <verb> <key>". With
// Cfg.ErrorPause set, a release that failed with a store error (outcome
// unknown) is tried again after ErrorPause, up to retries times: a lease
// whose release was lost stays held until it expires, and on a store that
// gives recovered leases a fresh TTL at each restart (etcd, the lease
// server) it never does while restarts keep coming.
func (p *proc) releaseLease(ctx context.Context, l *leasehold.Lease, verb, key string, retries int) {
	cfg := p.cfg
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		err := l.Release(rctx)
		cancel()
		if err == nil || errors.Is(err, leasehold.ErrLost) {
			return
		}
		p.w.Logf("%s %s %s: %v", p.owner, verb, key, err)
		if cfg.ErrorPause <= 0 || attempt == retries || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.ErrorPause):
		}
	}
}

// attempt is one grant that, with Cfg.ErrorPause set, gives up at its
// first store error and returns it as pausing (the election and semaphore
// workloads; the lock workload retries with its request id instead, see
// acquireLock). take gets the grant's options (TTL, and the error hook).
func (p *proc) attempt(ctx context.Context, take func(ctx context.Context, opts ...leasehold.AcquireOption) (*leasehold.Lease, error)) (*leasehold.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.AcquireTimeout)
	defer cancel()
	opts := []leasehold.AcquireOption{leasehold.TTL(p.cfg.TTL)}
	var storeErr error
	if p.cfg.ErrorPause > 0 {
		opts = append(opts, leasehold.OnError(func(err error) { storeErr = err; cancel() }))
	}
	l, err := take(actx, opts...)
	if err != nil && storeErr != nil {
		return nil, pausing{storeErr}
	}
	return l, err
}

// pauseAfterError waits d (Cfg.ErrorPause) after a grant given up at a
// store error, or until ctx ends.
func pauseAfterError(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lockWorkload is the lock workload: acquire a random key, read the
// oracle's counter, hold, write the value plus one (fenced by the lease's
// token), release.
var lockWorkload = holdWorkload{grant: acquireLock, verb: "acquire", release: "release", releaseRetries: releaseRetries}

// releaseRetries is how often the lock workload's release that failed with
// a store error is tried again when cfg.ErrorPause is set.
const releaseRetries = 4

// electionWorkload is the leader-election workload (R9): each logical
// process campaigns (leasehold.Election.Campaign) in an election named by
// a random one of Cfg.Keys; once it leads, it does 1–3 rounds of leader's
// work — with the oracle, a fenced increment of the election's counter
// under its term; without, a hold of Cfg.Hold — checking before each that
// it still leads, then resigns (releases the lease), waits up to TTL/4 and
// campaigns again.
//
// Its "cs" events are leaderships, keyed by the election's name, with the
// term (the leader lease's fencing token) in Token and the leader's
// identity in Owner. Check with Permits 1 finds two leaders at once; a
// suite checks the terms themselves (one leader per term, terms
// increasing over time).
var electionWorkload = holdWorkload{
	grant: func(ctx context.Context, p *proc, c *leasehold.Client, name string) (*leasehold.Lease, error) {
		return p.attempt(ctx, func(ctx context.Context, opts ...leasehold.AcquireOption) (*leasehold.Lease, error) {
			e, err := c.Election(name, opts...)
			if err != nil {
				return nil, endProc{"election", err}
			}
			return e.Campaign(ctx)
		})
	},
	verb:      "campaign",
	rounds:    func(rng *rand.Rand) int { return 1 + rng.IntN(3) },
	withOwner: true,
	release:   "resign",
	rest:      true,
}

// semaphoreWorkload is the semaphore workload (R9): each logical process
// takes one permit of a semaphore of N = Cfg.Permits (a random name of
// Cfg.Keys) through leasehold.Semaphore, holds it — with the oracle, a
// fenced increment of the permit's own counter (keyed by the permit's
// lease name, fenced by the permit's token) — and releases it.
//
// Its "cs" events are keyed by the semaphore's name (so that Check with
// Permits N finds more than N holders at once), with the permit's token,
// the owner, and the permit's lease name (NAME/permit/I) in Msg, so that a
// suite can also check each permit on its own.
//
// Every permit is a lease of its own, recorded like any other (acquire,
// keepalive renewals, release, under the permit's lease name); only the
// semaphore's List of the holders is not recorded, and it changes nothing.
// So each permit's history is a plain lease history that porcupine checks.
var semaphoreWorkload = holdWorkload{
	grant: func(ctx context.Context, p *proc, c *leasehold.Client, name string) (*leasehold.Lease, error) {
		sem, err := c.Semaphore(name, max(p.cfg.Permits, 1))
		if err != nil {
			return nil, endProc{"semaphore", err}
		}
		return p.attempt(ctx, sem.Acquire)
	},
	verb:      "acquire a permit of",
	permits:   true,
	withOwner: true,
	release:   "release",
}
