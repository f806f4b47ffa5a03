package holders

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

// backend is a store the Go client reaches over a network, through a
// fault proxy (netfault.Proxy) in front of addr.
type backend struct {
	name   string // "server", "redis", "server-http"
	addr   string // the engine's or server's address (host:port)
	url    string // its store URL, direct
	urlFor func(addr string) string
}

// backends starts what the Go client rows run on: a `leasehold serve`
// of their own (reached over RESP, and in the long tier also over HTTP)
// and the shared test Redis.
func backends(t *testing.T) []backend {
	t.Helper()
	srv := verify.StartTarget(t, "server")
	bs := []backend{{name: "server", addr: srv.Addr, url: srv.URL, urlFor: srv.URLFor}}
	if verify.Long() {
		httpURL := func(addr string) string { return "http://" + addr }
		bs = append(bs, backend{name: "server-http", addr: srv.HTTPAddr, url: httpURL(srv.HTTPAddr), urlFor: httpURL})
	}
	ru := enginetest.RedisURL(t)
	u, err := url.Parse(ru)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := enginetest.Lookup("redis")
	return append(bs, backend{name: "redis", addr: u.Host, url: ru, urlFor: e.URL})
}

// openStore opens url for the test (closed when it ends).
func openStore(t testing.TB, url string) leasehold.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stores.Open(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// probe records, for one lease name, the holder's local deadline as the
// model has it: t0 (taken before each acquire or renew is sent) plus
// TTL·(1−ρ) − ε, moved on only by a renewal confirmed before the deadline
// it extends. The client takes t0 a moment earlier (before calling the
// store), so its own deadline is never later than this one. The probe
// hides the store's Queuer and Watcher, so the client under test polls
// with TryAcquire.
type probe struct {
	leasehold.Store
	name string
	// onDeadline, if set, is told every new deadline (under the probe's
	// lock, in order).
	onDeadline func(token uint64, deadline int64)

	mu       sync.Mutex
	token    uint64
	deadline int64 // verify.Mono
	renewals int
}

func (p *probe) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	t0 := verify.Mono()
	rec, err := p.Store.TryAcquire(ctx, req)
	if err == nil && req.Name == p.name {
		p.mu.Lock()
		p.token, p.deadline = rec.Token, t0+int64(life(rec.TTL))
		if p.onDeadline != nil {
			p.onDeadline(p.token, p.deadline)
		}
		p.mu.Unlock()
	}
	return rec, err
}

func (p *probe) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	t0 := verify.Mono()
	err := p.Store.Renew(ctx, name, owner, token, ttl)
	t1 := verify.Mono()
	if err == nil && name == p.name {
		p.mu.Lock()
		if token == p.token && t1 < p.deadline {
			p.deadline = t0 + int64(life(ttl))
			p.renewals++
			if p.onDeadline != nil {
				p.onDeadline(p.token, p.deadline)
			}
		}
		p.mu.Unlock()
	}
	return err
}

func (p *probe) state() (token uint64, deadline int64, renewals int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token, p.deadline, p.renewals
}

// forceRelease frees name whoever holds it, behind the holder's back: the
// lease server's force-release, or on a store used directly a release by
// the holder's owner and token as read just before (what `leasehold
// force-release` does).
func forceRelease(ctx context.Context, s leasehold.Store, name string) error {
	if fr, ok := s.(interface {
		ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
	}); ok {
		_, err := fr.ForceRelease(ctx, name)
		return err
	}
	rec, err := s.Get(ctx, name)
	if err != nil {
		return err
	}
	return s.Release(ctx, name, rec.Owner, rec.Token)
}

// blackhole makes the proxy hang: it keeps accepting connections and
// passes nothing on, either way.
func blackhole(p *netfault.Proxy) error {
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.Add(netfault.Toxic{Type: "timeout", Stream: stream, Attributes: map[string]any{"timeout": 0}}); err != nil {
			return err
		}
	}
	return nil
}

// late makes the proxy deliver every reply d late.
func late(p *netfault.Proxy, d time.Duration) error {
	_, err := p.Add(netfault.Toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": d.Milliseconds(), "jitter": 0}})
	return err
}

// The Go client's faults.
const (
	faultHang  = "hang"  // the backend accepts connections and never answers
	faultLate  = "late"  // every reply comes late: first in time, then too late for any renewal
	faultForce = "force" // the lease is force-released behind the holder's back
	faultStop  = "stop"  // the holder's process is stopped (SIGSTOP) past its deadline, then continued
)

// clientTTL is the Go client rows' lease TTL. The late rows use lateTTL:
// their replies first come lateHeld late (within the renewal window,
// TTL·0.99 − 5 ms − TTL/3 ≈ 1.97 s: renewals are confirmed late but in
// time), then lateLost late (beyond it: none can be confirmed in time).
const (
	clientTTL = 2 * time.Second
	lateTTL   = 3 * time.Second
	lateHeld  = time.Second
	lateLost  = 2500 * time.Millisecond
)

// TestR17Client is R17 for the Go leasehold.Client, over the lease
// server (RESP; also HTTP in the long tier) and Redis, each reached
// through a fault proxy: the backend hangs, answers late, or the lease is
// force-released behind the holder's back, or the holder's process is
// stopped past its deadline and continued (stoppedRound). Per row: loss
// declared by the local deadline + lossBound (for a force-release: by the
// next renewal, TTL/3 later, + lossBound; for a stop: lossBound after the
// resume), no work after the loss or the deadline, no overlap with the
// next holder, every call with a timeout back within it + callBound, and
// the lost grant's token refused for renewals, releases and fenced
// writes.
func TestR17Client(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	rounds := verify.Size(1, 5)
	for _, b := range backends(t) {
		for _, fault := range []string{faultHang, faultLate, faultForce, faultStop} {
			t.Run(b.name+"/"+fault, func(t *testing.T) {
				t.Parallel()
				r := newRow(t, "client("+b.name+")", fault)
				for i := 0; i < rounds && !t.Failed(); i++ {
					r.round()
					if fault == faultStop {
						stoppedRound(t, r, b)
					} else {
						clientRound(t, r, b, fault, nil)
					}
				}
				r.report()
			})
		}
	}
}

// TestR17ClientControl shows that the checks of a Go client row can fail:
// the hang row again, with the holder's client on a clock that runs at
// half speed (far beyond the 1 % the deadline allows for), must be caught
// (its loss comes about a TTL late, and it works on after its deadline).
func TestR17ClientControl(t *testing.T) {
	if testing.Short() {
		t.Skip("R17 holds leases for seconds")
	}
	srv := verify.StartTarget(t, "server")
	b := backend{name: "server", addr: srv.Addr, url: srv.URL, urlFor: srv.URLFor}
	r := newRow(t, "client(server)", faultHang+", clock at half speed")
	r.expectBad = true
	clientRound(t, r, b, faultHang, clock.NewSkewed(-0.5))
	caught := 0
	for _, v := range r.bad {
		if strings.Contains(v, "loss declared") || strings.Contains(v, "work steps") || strings.Contains(v, "overlaps") {
			caught = 1 // by the holder's checks, not by a call's timeout
		}
	}
	verify.Report(t, verify.Row{Suite: "R17-control", Store: r.name(), Ops: r.ops, Faults: r.faults, Violations: r.violations(),
		Checker: fmt.Sprintf("caught %d/1", caught), Note: fmt.Sprintf("%d violations found, first: %s", r.violations(), first(r.bad))})
	if caught == 0 {
		t.Errorf("a holder on a clock at half speed was not caught")
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// granted is B's grant.
type granted struct {
	l    *leasehold.Lease
	from int64 // verify.Mono when Acquire returned
	err  error
	werr error // of B's fenced write
}

// work is one step of the holder's work: at T0 it asked Held and was told
// yes; T1 is when that answer came.
type work struct{ T0, T1 int64 }

// clientRound is one round of a Go client row: the holder A takes a lease
// through the proxy, works in 5 ms steps while Held says so, and the fault
// strikes; k, if set, is A's clock (the control's broken one).
func clientRound(t *testing.T, r *row, b backend, fault string, k clock.Clock) {
	ctx := context.Background()
	proxy, err := netfault.NewProxy(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := openStore(t, b.url)
	via := openStore(t, b.urlFor(proxy.Addr()))
	tag := fmt.Sprintf("%x", rand.Uint32())
	name := fmt.Sprintf("r17/%s/%s/%s", b.name, fault, tag)
	ttl := clientTTL
	if fault == faultLate {
		ttl = lateTTL
	}
	or := newOracle(t)

	p := &probe{Store: via, name: name}
	opts := []leasehold.Option{leasehold.WithOwner("r17-a-" + tag)}
	if k != nil {
		opts = append(opts, leasehold.WithClock(k))
	}
	a, err := leasehold.New(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// C holds another lease all along, for which a client of the proxied
	// store (its queue or watch visible) waits with a deadline.
	held := name + "/held"
	cl, err := leasehold.New(direct, leasehold.WithOwner("r17-c-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := cl.Acquire(ctx, held, leasehold.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Release(ctx)
	waiter, err := leasehold.New(via, leasehold.WithOwner("r17-w-"+tag))
	if err != nil {
		t.Fatal(err)
	}

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := a.Acquire(actx, name, leasehold.TTL(ttl))
	cancel()
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	grantAt := verify.Mono()
	token, _, _ := p.state()
	r.op(1)
	lost := make(chan int64, 1)
	go func() { <-l.Done(); lost <- verify.Mono() }()
	var (
		wmu   sync.Mutex
		works []work
	)
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		for n := 0; ; n++ {
			t0 := verify.Mono()
			if !l.Held() {
				return
			}
			t1 := verify.Mono()
			if n == 0 {
				if err := or.write(ctx, or.o.URL(), name, "a", token); err != nil {
					t.Errorf("A's first fenced write (token %d): %v", token, err)
				}
			}
			wmu.Lock()
			works = append(works, work{t0, t1})
			wmu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// The calls with timeouts. An acquire that waits for C's lease starts
	// just before the fault (it is in the store's queue, or watching, when
	// the fault comes); the others start once the fault is in place.
	var tm timer
	waitHeld := func(timeout time.Duration) {
		tm.call("Client.Acquire of a held lease", timeout, func(ctx context.Context) error {
			wl, err := waiter.Acquire(ctx, held, leasehold.TTL(ttl))
			if err == nil {
				wl.Release(context.Background())
				return errors.New("granted a lease that C holds")
			}
			return err
		})
	}
	// B, a direct client, asks for the lease as soon as the fault strikes
	// (after a force-release: once A has found out), takes it when the
	// store lets it go and writes the fenced resource at once.
	b2, err := leasehold.New(direct, leasehold.WithOwner("r17-b-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	bch := make(chan granted, 1)
	takeB := func() {
		go func() {
			bctx, cancel := context.WithTimeout(ctx, 2*ttl+5*time.Second)
			defer cancel()
			lb, err := b2.Acquire(bctx, name, leasehold.TTL(time.Minute))
			g := granted{l: lb, from: verify.Mono(), err: err}
			if err == nil {
				g.werr = or.write(ctx, or.o.URL(), name, "b", lb.Token())
			}
			bch <- g
		}()
	}
	var faultAt int64
	switch fault {
	case faultHang:
		waitHeld(1200 * time.Millisecond)
		time.Sleep(200 * time.Millisecond)
		if err := blackhole(proxy); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		r.faults++
		takeB()
	case faultLate:
		// First the replies come lateHeld late: renewals are confirmed
		// late but in time, and the lease stays held. Then lateLost late:
		// no renewal can be confirmed before the deadline any more.
		time.Sleep(200 * time.Millisecond)
		if err := late(proxy, lateHeld); err != nil {
			t.Fatal(err)
		}
		_, _, before := p.state()
		time.Sleep(3 * ttl / 2)
		_, _, during := p.state()
		if err := proxy.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := late(proxy, lateLost); err != nil {
			t.Fatal(err)
		}
		faultAt = verify.Mono()
		r.faults += 2
		takeB()
		r.note("late renewals", -int64(during-before), "%d renewals confirmed %s late while the lease was held", during-before, ms(lateHeld))
		if l.Err() != nil {
			r.note("lost early", 0, "lost while the replies came %s late: %v", ms(lateHeld), l.Err())
		}
		waitHeld(3 * time.Second)
	case faultForce:
		waitHeld(time.Second)
		time.Sleep(200 * time.Millisecond)
		if err := forceRelease(ctx, direct, name); err != nil {
			t.Fatalf("force-release %s: %v", name, err)
		}
		faultAt = verify.Mono()
		r.faults++
	}
	const callTimeout = 300 * time.Millisecond
	tm.call("Store.Get", callTimeout, func(ctx context.Context) error { _, err := via.Get(ctx, name); return err })
	tm.call("Store.Renew", callTimeout, func(ctx context.Context) error { return via.Renew(ctx, name, a.Owner(), token, ttl) })
	tm.call("Store.TryAcquire", callTimeout, func(ctx context.Context) error {
		rec, err := via.TryAcquire(ctx, leasehold.AcquireRequest{Name: name + "/other", Owner: "r17-x-" + tag, TTL: ttl})
		if err == nil {
			via.Release(context.Background(), rec.Name, rec.Owner, rec.Token)
		}
		return err
	})
	tm.call("Client.Acquire of a free lease", 2*callTimeout, func(ctx context.Context) error {
		fl, err := waiter.Acquire(ctx, name+"/free", leasehold.TTL(ttl))
		if err == nil {
			fl.Release(context.Background())
		}
		return err
	})

	// Loss.
	var lossAt int64
	select {
	case lossAt = <-lost:
	case <-time.After(life(ttl) + lossBound + 5*time.Second):
		r.violation("no loss declared %s after the fault (the deadline is at most %s after it)", ms(life(ttl)+lossBound+5*time.Second), ms(life(ttl)))
	}
	select {
	case <-worked:
	case <-time.After(10 * time.Second):
		r.violation("the holder still works 10 s after its loss was declared")
	}
	_, deadline, renewals := p.state()
	if lossAt != 0 {
		if err := l.Err(); !errors.Is(err, leasehold.ErrLost) {
			r.violation("after Done, Err = %v, want ErrLost", err)
		}
		if l.Held() {
			r.violation("Held after the loss")
		}
		// (A grant that came after its own deadline is lost at once.)
		late := time.Duration(lossAt - max(deadline, grantAt))
		if late > lossBound {
			r.violation("loss declared %s after the local deadline (bound %s)", ms(late), ms(lossBound))
		}
		if fault == faultForce {
			after := time.Duration(lossAt - faultAt)
			if after > ttl/3+lossBound {
				r.violation("loss declared %s after the force-release (bound: the next renewal, TTL/3 = %s, + %s)", ms(after), ms(ttl/3), ms(lossBound))
			}
			r.note("loss", int64(after), "loss declared %s after the force-release (bound TTL/3 + %s = %s), %s the local deadline", ms(after), ms(lossBound),
				ms(ttl/3+lossBound), signed(late, "after", "before"))
		} else {
			r.note("loss", int64(late), "loss declared %s the local deadline (bound +%s)", signed(late, "after", "before"), ms(lossBound))
		}
		// The Lease's own release, during the fault: back in time, and
		// harmless (B has not been granted yet).
		tm.call("Lease.Release after the loss", callTimeout, func(ctx context.Context) error { return l.Release(ctx) })
	}
	wmu.Lock()
	ws := append([]work(nil), works...)
	wmu.Unlock()
	r.op(len(ws))
	var lastWork work
	afterDeadline, afterLoss := 0, 0
	for _, w := range ws {
		if w.T0 >= deadline {
			afterDeadline++
		}
		if lossAt != 0 && w.T0 > lossAt {
			afterLoss++
		}
		lastWork = w
	}
	if afterDeadline > 0 {
		r.violation("%d work steps began after the local deadline (the last %s after it)", afterDeadline, ms(time.Duration(lastWork.T0-deadline)))
	}
	if afterLoss > 0 {
		r.violation("%d work steps began after the loss was declared", afterLoss)
	}
	if len(ws) > 0 {
		r.note("work", lastWork.T0-deadline, "%d work steps, the last begun %s the local deadline", len(ws), signed(time.Duration(lastWork.T0-deadline), "after", "before"))
	}

	if fault == faultForce {
		takeB() // after the loss: the overlap a force-release causes before it is inherent
	}
	var g granted
	select {
	case g = <-bch:
	case <-time.After(2*ttl + 20*time.Second):
		t.Fatalf("B's acquire of %s did not return", name)
	}
	if g.err != nil {
		t.Fatalf("B could not take %s after A's loss: %v", name, g.err)
	}
	lb, bFrom := g.l, g.from
	r.op(1)
	if lb.Token() <= token {
		r.violation("B's token %d is not above A's lost one %d", lb.Token(), token)
	}
	if g.werr != nil {
		r.violation("B's fenced write (token %d): %v", lb.Token(), g.werr)
	}
	tm.check(r)
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	checkReuse(r, reuseCalls(l, via, or.o.URL(), name, a.Owner(), token, ttl), direct, token, lb)
	bTo := verify.Mono()
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
	or.check(r)

	// The critical sections: A's from its grant to its last work step, B's
	// from its grant to its release.
	h := &verify.History{Events: []verify.Event{
		{E: "cs", Worker: "a", Proc: "a", Key: name, Token: token, From: grantAt, To: max(lastWork.T1, grantAt)},
		{E: "cs", Worker: "b", Proc: "b", Key: name, Token: lb.Token(), From: bFrom, To: bTo},
	}}
	if res := verify.Check(h, verify.CheckOptions{NoLinearizability: true}); res.Overlaps > 0 || res.TokenRegressions > 0 {
		r.violation("critical sections: %d overlaps, %d token regressions: %s", res.Overlaps, res.TokenRegressions, res.FirstBad)
	}
	r.note("renewals", 0, "%d renewals confirmed", renewals)
}

// reused is one use of a lost grant's token and how it went: ok if it
// was refused, or harmless, as it must be.
type reused struct {
	What string `json:"what"`
	OK   bool   `json:"ok"`
	Err  string `json:"err,omitempty"`
}

// reuseCalls uses a lost grant after the next holder took the lease (and
// wrote the fenced resource): the Lease (nil: skipped) must refuse to
// renew (ErrLost) and its release must change nothing (nil or ErrLost);
// the store must refuse a renew and a release with the token
// (ErrNotHeld); the fenced resource at oracleURL must refuse a write with
// it. Calls that meet a connection the fault broke are asked again.
func reuseCalls(l *leasehold.Lease, s leasehold.Store, oracleURL, name, owner string, token uint64, ttl time.Duration) []reused {
	ctx := context.Background()
	again := func(f func(ctx context.Context) error) error {
		var err error
		for range 5 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = f(cctx)
			cancel()
			if err == nil || errors.Is(err, leasehold.ErrLost) || errors.Is(err, leasehold.ErrNotHeld) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}
	var out []reused
	add := func(what string, err error, ok bool) {
		u := reused{What: what, OK: ok}
		if err != nil {
			u.Err = err.Error()
		}
		out = append(out, u)
	}
	if l != nil {
		err := again(l.Renew)
		add("Lease.Renew", err, errors.Is(err, leasehold.ErrLost))
		err = again(l.Release)
		add("Lease.Release", err, err == nil || errors.Is(err, leasehold.ErrLost))
	}
	err := again(func(ctx context.Context) error { return s.Renew(ctx, name, owner, token, ttl) })
	add("Store.Renew", err, errors.Is(err, leasehold.ErrNotHeld))
	err = again(func(ctx context.Context) error { return s.Release(ctx, name, owner, token) })
	add("Store.Release", err, errors.Is(err, leasehold.ErrNotHeld))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = oracleWrite(cctx, &http.Client{}, oracleURL, name, "lost", token)
	cancel()
	add("fenced write", err, errors.Is(err, errStale))
	return out
}

// checkReuse records the uses of a lost token (reuseCalls) on r, and
// checks that the next holder still holds its lease and can renew it.
func checkReuse(r *row, uses []reused, direct leasehold.Store, token uint64, holder *leasehold.Lease) {
	ctx := context.Background()
	refused := 0
	for _, u := range uses {
		if !u.OK {
			r.violation("%s with the lost token %d: %s (want it refused, or harmless)", u.What, token, u.Err)
		} else {
			refused++
		}
	}
	rec, err := direct.Get(ctx, holder.Name())
	switch {
	case err != nil:
		r.violation("the next holder's lease is gone after the lost grant's calls: %v", err)
	case rec.Token != holder.Token() || rec.Owner != holder.Owner():
		r.violation("the lease is %s/%d after the lost grant's calls, want the next holder's %s/%d", rec.Owner, rec.Token, holder.Owner(), holder.Token())
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := holder.Renew(rctx); err != nil {
		r.violation("the next holder cannot renew after the lost grant's calls: %v", err)
	}
	r.op(len(uses) + 2)
	r.note("reuse", -int64(refused), "the lost token %d: %d/%d uses refused or harmless, the next holder's grant %d intact", token, refused, len(uses), holder.Token())
}
