package netfault_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

// session is what sessionPool needs of remote.Session and
// remote.RESPSession.
type session interface {
	leasehold.Bound
	ID() string
	Close(context.Context) error
}

// openSession opens a session of ttl on the store and returns it with the
// view of the store whose acquires attach to it.
type openSession func(ctx context.Context, ttl time.Duration) (session, leasehold.Store, error)

// sessionsOf opens the store at url with open (remote.OpenHTTP or
// remote.OpenRESP), and returns it with how to open its sessions.
func sessionsOf[L leasehold.Store, T interface {
	session
	Store() L
}, S interface {
	leasehold.Store
	OpenSession(context.Context, time.Duration, ...remote.SessionOption) (T, error)
}](open func(string) (S, error), url string) (leasehold.Store, openSession, error) {
	s, err := open(url)
	if err != nil {
		return nil, nil, err
	}
	return s, func(ctx context.Context, ttl time.Duration) (session, leasehold.Store, error) {
		sess, err := s.OpenSession(ctx, ttl)
		if err != nil {
			return nil, nil, err
		}
		return sess, sess.Store(), nil
	}, nil
}

type poolEntry struct {
	sess  session
	store leasehold.Store
}

type grantKey struct {
	name  string
	token uint64
}

// sessionPool is the store of the session rows' workers: each acquire goes
// through a session of its owner (one per logical process, as a real
// process would keep one), opened on first use and opened again once the
// previous one is lost. It remembers which session each grant was made in,
// for LeaseBound. A request id is suffixed with the session's id, so that
// a retry after a session change is a new request rather than a retry that
// the server would answer with the grant of the lost session.
type sessionPool struct {
	base leasehold.Store // Renew, Release, Get, List
	open openSession
	ttl  time.Duration

	mu      sync.Mutex
	cur     map[string]*poolEntry
	grants  map[grantKey]leasehold.Bound
	granted map[string]int64 // name → verify.Mono of its latest grant's reply
	all     []session
	opened  int
}

func newSessionPool(base leasehold.Store, ttl time.Duration, open openSession) *sessionPool {
	return &sessionPool{base: base, open: open, ttl: ttl, cur: map[string]*poolEntry{},
		grants: map[grantKey]leasehold.Bound{}, granted: map[string]int64{}}
}

// entry returns owner's live session, opening one if it has none.
func (p *sessionPool) entry(ctx context.Context, owner string) (*poolEntry, error) {
	p.mu.Lock()
	e := p.cur[owner]
	p.mu.Unlock()
	if e != nil {
		select {
		case <-e.sess.Done():
		default:
			return e, nil
		}
	}
	sess, store, err := p.open(ctx, p.ttl)
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	e = &poolEntry{sess: sess, store: store}
	p.mu.Lock()
	p.cur[owner] = e
	p.all = append(p.all, sess)
	p.opened++
	p.mu.Unlock()
	return e, nil
}

func (p *sessionPool) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	e, err := p.entry(ctx, req.Owner)
	if err != nil {
		return leasehold.Record{}, err
	}
	if req.RequestID != "" {
		req.RequestID += "." + e.sess.ID()[:8]
	}
	rec, err := e.store.TryAcquire(ctx, req)
	if err == nil {
		p.mu.Lock()
		p.grants[grantKey{rec.Name, rec.Token}] = e.sess
		p.granted[rec.Name] = verify.Mono()
		p.mu.Unlock()
	}
	return rec, err
}

// grantedAfter reports whether name was granted after t (verify.Mono).
func (p *sessionPool) grantedAfter(name string, t int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.granted[name] > t
}

// LeaseBound is the session the grant was made in.
func (p *sessionPool) LeaseBound(rec leasehold.Record) leasehold.Bound {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grants[grantKey{rec.Name, rec.Token}]
}

func (p *sessionPool) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	return p.base.Renew(ctx, name, owner, token, ttl)
}

func (p *sessionPool) Release(ctx context.Context, name, owner string, token uint64) error {
	return p.base.Release(ctx, name, owner, token)
}

func (p *sessionPool) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return p.base.Get(ctx, name)
}

func (p *sessionPool) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return p.base.List(ctx, prefix)
}

func (p *sessionPool) Close() error { return nil }

// closeAll closes every session the pool opened and reports how many were
// opened and how many had been lost before.
func (p *sessionPool) closeAll() (opened, lost int) {
	p.mu.Lock()
	all := append([]session(nil), p.all...)
	opened = p.opened
	p.mu.Unlock()
	for _, s := range all {
		if errors.Is(s.Err(), leasehold.ErrLost) {
			lost++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Close(ctx)
		cancel()
	}
	return opened, lost
}

// boundLayer sits between a logical process's Client and its recorder and
// gives the Client the bound of each grant, which the recorder (a plain
// Store) hides.
type boundLayer struct {
	leasehold.Store
	pool *sessionPool
}

func (b boundLayer) LeaseBound(rec leasehold.Record) leasehold.Bound { return b.pool.LeaseBound(rec) }

var (
	_ leasehold.BoundedStore = (*sessionPool)(nil)
	_ leasehold.BoundedStore = boundLayer{}
)

// serve runs `leasehold serve` with its own log (verify.StartServe), and
// returns its HTTP and RESP addresses.
func serve(t *testing.T) (httpAddr, respAddr string) {
	t.Helper()
	tg := verify.StartServe(t, "--data-dir", t.TempDir())
	return tg.HTTPAddr, tg.Addr
}

// TestNetworkFaultsSessions is R6 with session leases: the lock workload's
// logical processes (4 groups of 2, in this process) hold their leases
// through sessions of `leasehold serve` — HTTP sessions in one row, RESP
// sessions in the other — reached through the fault proxy, with a session
// TTL (1 s) shorter than the leases' (3 s), so that the server frees a
// lease when its session ends, long before the lease's own TTL would run
// out. Each process opens a new session when its last one is lost. Pass:
// 0 overlapping critical sections (a holder's belief ends at its lease's
// local deadline, which is its session's when that is earlier), 0 token
// regressions, the oracle's 0 lost, duplicated or stale-accepted writes,
// and every key granted again after the last fault heals. Porcupine is not
// run: its model judges expiry by each lease's own TTL, which a session
// overrides on the server.
func TestNetworkFaultsSessions(t *testing.T) {
	httpAddr, respAddr := serve(t)
	for _, proto := range []string{"http", "resp"} {
		t.Run(proto, func(t *testing.T) {
			switch proto {
			case "http":
				sessionFaults(t, proto, httpAddr, func(addr string) (leasehold.Store, openSession, error) {
					return sessionsOf(remote.OpenHTTP, "http://"+addr+"?timeout=2s")
				})
			case "resp":
				sessionFaults(t, proto, respAddr, func(addr string) (leasehold.Store, openSession, error) {
					return sessionsOf(remote.OpenRESP, "leasehold://"+addr+"?timeout=2s")
				})
			}
		})
	}
}

func sessionFaults(t *testing.T, proto, addr string, open func(addr string) (leasehold.Store, openSession, error)) {
	px, err := netfault.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const sessionTTL, leaseTTL = time.Second, 3 * time.Second
	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	keys := make([]string, verify.Size(6, 24))
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-k%d", proto, i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const groups = 4
	var wg sync.WaitGroup
	hists := make([]*verify.History, groups)
	errs := make([]error, groups)
	pools := make([]*sessionPool, groups)
	for g := range groups {
		base, opener, err := open(px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer base.Close()
		pool := newSessionPool(base, sessionTTL, opener)
		pools[g] = pool
		// WriteMargin: a session's deadline is at most 0.99 s ahead, so a
		// holder writes only with half a session TTL to spare. Half the
		// groups hold for longer than a session TTL, so that critical
		// sections span the faults that end sessions (with leases bounded by
		// their own TTL only, these rows found overlaps).
		hold := 50 * time.Millisecond
		if g%2 == 1 {
			hold = 1200 * time.Millisecond
		}
		cfg := verify.WorkerConfig{ID: fmt.Sprintf("s%d", g), Keys: keys, Clients: 2, TTL: leaseTTL,
			Oracle: o.URL(), Hold: hold, WriteMargin: sessionTTL / 2, Seed: 616 + uint64(g)}
		in := verify.InProcess{Wrap: func(_ int, s leasehold.Store) leasehold.Store { return boundLayer{s, pool} }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hists[g], errs[g] = verify.RunInProcess(ctx, pool, cfg, in)
		}()
	}

	began := time.Now()
	faults, err := px.Run(context.Background(), netfault.NewSchedule(sessionTTL, 66), verify.Size(12*time.Second, 5*time.Minute))
	if err != nil {
		cancel()
		wg.Wait()
		t.Fatalf("fault schedule: %v", err)
	}
	if len(faults) == 0 {
		t.Fatal("no fault was applied")
	}
	// After the last heal, wait until every key has been granted again
	// (a generous bound: CI never fails on timing alone), and at least 2 s,
	// so that the history ends with clean operations.
	heal := faults[len(faults)-1].To
	const bound = 90 * time.Second
	for wait := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		all := true
		for _, k := range keys {
			got := false
			for _, p := range pools {
				got = got || p.grantedAfter(k, heal)
			}
			all = all && got
		}
		if all && time.Since(wait) >= 2*time.Second {
			break
		}
		if time.Since(wait) > bound {
			break // reported below from the history
		}
	}
	cancel()
	wg.Wait()
	ran := time.Since(began)
	h := &verify.History{}
	for g := range groups {
		if errs[g] != nil {
			t.Fatalf("group %d: %v", g, errs[g])
		}
		h.Events = append(h.Events, hists[g].Events...)
	}
	opened, lost := 0, 0
	for _, p := range pools {
		o, l := p.closeAll()
		opened, lost = opened+o, lost+l
	}
	res := verify.Check(h, verify.CheckOptions{NoLinearizability: true})
	or := o.Check()
	gs := grants(h)
	var missing []string
	for _, k := range keys {
		if _, ok := firstAfter(gs, k, heal); !ok {
			missing = append(missing, k)
		}
	}
	rec := measure(gs, keys, faults, sessionTTL)
	kinds := map[string]int{}
	for i, f := range faults {
		kinds[f.Kind]++
		t.Logf("fault %d: %s", i, f)
	}
	t.Logf("history: %s", res)
	t.Logf("oracle: %+v", or)
	t.Logf("indeterminate operations by error:\n%s", unknownErrors(h))
	violations := res.Violations() + or.Violations()
	checker := "ok" // the note says which checks ran
	if violations > 0 {
		checker = "violations"
	}
	verify.Report(t, verify.Row{Suite: "R6", Store: "server, " + proto + " sessions", Ops: res.Ops, Faults: px.Applied(),
		Violations: violations, Checker: checker,
		Note: fmt.Sprintf("%d faults in %s (latency %d, blackhole %d, reset %d, slicer %d); session TTL %s, lease TTL %s; %d sessions opened, %d lost; %d critical sections, %d writes accepted, %d rejected; %d indeterminate ops; after the last heal every key granted within %s; checked by overlaps, oracle and token order (porcupine's model knows no sessions)",
			len(faults), ran.Round(time.Second), kinds["latency"], kinds["blackhole"], kinds["reset"], kinds["slicer"], sessionTTL, leaseTTL,
			opened, lost, res.CS, or.Accepted, or.Rejected, res.Indeterminate, rec.last.Round(time.Millisecond))})
	if violations > 0 {
		first := res.FirstBad
		if first == "" {
			first = or.First
		}
		t.Fatalf("%d violations: %s\n%s\noracle: %+v", violations, first, res, or)
	}
	if len(missing) > 0 {
		t.Errorf("keys %v were not granted again within %s after the last fault healed", missing, bound)
	}
	if or.Accepted == 0 || res.CS == 0 {
		t.Fatalf("no write was accepted (%d critical sections)", res.CS)
	}
}
