package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/leasehold/leasehold"
)

// interval is a period during which a client knew it held something: from
// the return of its acquire to the call of its release.
type interval struct {
	who        string
	term       uint64
	slot       string
	start, end time.Duration
}

// maxOverlap returns the largest number of intervals open at one instant.
func maxOverlap(iv []interval) int {
	type ev struct {
		at    time.Duration
		delta int
	}
	var evs []ev
	for _, i := range iv {
		evs = append(evs, ev{i.start, +1}, ev{i.end, -1})
	}
	// Ends sort before starts at the same instant: [a, b] and [b, c] touch
	// but do not overlap.
	sort.Slice(evs, func(a, b int) bool {
		if evs[a].at != evs[b].at {
			return evs[a].at < evs[b].at
		}
		return evs[a].delta < evs[b].delta
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// testSemaphore: 12 clients share 3 permits; never more than 3 holders, and
// every permit's grants and releases form a linearizable lease history.
func testSemaphore(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := bg(t)
	n := name(t, "sem")
	const permits, clients, rounds = 3, 12, 5
	acquire := make([]func(context.Context) (*leasehold.Lease, error), clients)
	for c := range acquire {
		cl, err := leasehold.New(s, leasehold.WithOwner(fmt.Sprintf("c%d", c)))
		if err != nil {
			t.Fatal(err)
		}
		sem, err := cl.Semaphore(n, permits)
		if err != nil {
			t.Fatal(err)
		}
		acquire[c] = func(ctx context.Context) (*leasehold.Lease, error) {
			return sem.Acquire(ctx, leasehold.TTL(30*time.Second))
		}
	}
	ivs, ops := grantRounds(t, ctx, acquire, rounds, 2*time.Millisecond, func(l *leasehold.Lease, op porcupine.Operation) porcupine.Operation {
		op.Input = slotInput{l.Name(), op.Input.(opInput)}
		return op
	})
	if m := maxOverlap(ivs); m > permits || m == 0 {
		t.Errorf("%d permit holders at once, want between 1 and %d", m, permits)
	}
	for _, iv := range ivs {
		if i, ok := leasehold.PermitIndex(n, iv.slot); !ok || i >= permits {
			t.Errorf("permit %q handed out; want indexes below %d", iv.slot, permits)
		}
	}
	if res := porcupine.CheckOperationsTimeout(SemaphoreModel(), ops, 30*time.Second); res != porcupine.Ok {
		t.Errorf("semaphore history (%d ops): porcupine says %s", len(ops), res)
	}
	t.Logf("semaphore: %d grants of %d permits to %d clients; at most %d at once", len(ivs), permits, clients, maxOverlap(ivs))
}

// grantRounds runs the acquirers at once, each rounds times taking a 30s
// lease, holding it for hold and releasing it. It returns when each held
// one (with its name and token), and the history of the grants and
// releases, client i's operations marked as i's and passed through wrap
// unless it is nil. An error fails t and ends that acquirer's rounds.
func grantRounds(t *testing.T, ctx context.Context, acquirers []func(context.Context) (*leasehold.Lease, error), rounds int,
	hold time.Duration, wrap func(*leasehold.Lease, porcupine.Operation) porcupine.Operation) ([]interval, []porcupine.Operation) {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var ivs []interval
	var ops []porcupine.Operation
	var errs []error
	var wg sync.WaitGroup
	for c, acquire := range acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				call := time.Since(start)
				l, err := acquire(ctx)
				ret := time.Since(start)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				time.Sleep(hold)
				relCall := time.Since(start)
				err = l.Release(ctx)
				relRet := time.Since(start)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				ivs = append(ivs, interval{who: l.Owner(), term: l.Token(), slot: l.Name(), start: ret, end: relCall})
				for _, op := range grantOps(c, l, call, ret, relCall, relRet, err == nil) {
					if wrap != nil {
						op = wrap(l, op)
					}
					ops = append(ops, op)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return ivs, ops
}

// grantOps are the operations of one grant of a 30s lease l, held from
// ret, and its release (called at relCall, which answered at relRet,
// released says whether it succeeded), for the lease model.
func grantOps(client int, l *leasehold.Lease, call, ret, relCall, relRet time.Duration, released bool) []porcupine.Operation {
	return []porcupine.Operation{
		{ClientId: client, Input: opInput{Kind: opAcquire, Owner: l.Owner(), RequestID: l.RequestID(), TTL: int64(30 * time.Second), Call: int64(call)},
			Call: int64(call), Output: opOutput{OK: true, Token: l.Token(), Return: int64(ret)}, Return: int64(ret)},
		{ClientId: client, Input: opInput{Kind: opRelease, Owner: l.Owner(), Token: l.Token(), Call: int64(relCall)},
			Call: int64(relCall), Output: opOutput{OK: released, Return: int64(relRet)}, Return: int64(relRet)},
	}
}

// slotInput is an operation on one permit of a semaphore.
type slotInput struct {
	Slot string
	opInput
}

// SemaphoreModel checks a semaphore history: each permit is a lease (the
// history is partitioned by permit and each part checked with the lease
// model), so no permit has two holders, tokens increase per permit, and
// releases are owner-checked.
func SemaphoreModel() porcupine.Model {
	m := LeaseModel()
	step := m.Step
	m.Partition = partitionBy(func(op porcupine.Operation) string { return op.Input.(slotInput).Slot })
	m.Step = func(state, input, output interface{}) (bool, interface{}) {
		return step(state, input.(slotInput).opInput, output)
	}
	if stepCtx := m.StepContext; stepCtx != nil {
		m.StepContext = func(ctx context.Context, state, input, output interface{}) (bool, interface{}) {
			return stepCtx(ctx, state, input.(slotInput).opInput, output)
		}
	}
	describe := m.DescribeOperation
	m.DescribeOperation = func(input, output interface{}) string {
		return input.(slotInput).Slot + ": " + describe(input.(slotInput).opInput, output)
	}
	return m
}

// testSemaphoreExpiry: permits of crashed holders come back after their TTL,
// and a smaller N never hands out the higher permits.
func testSemaphoreExpiry(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := bg(t)
	n, ttl := name(t, "sem"), h.ttl()
	a, _ := leasehold.New(s, leasehold.WithOwner("a"))
	sem5, err := a.Semaphore(n, 5)
	if err != nil {
		t.Fatal(err)
	}
	var held []*leasehold.Lease
	t0 := time.Now()
	for i := 0; i < 5; i++ {
		l, err := sem5.TryAcquire(ctx, leasehold.TTL(ttl), leasehold.NoKeepalive())
		if err != nil {
			t.Fatalf("permit %d of 5: %v", i+1, err)
		}
		held = append(held, l)
	}
	sixth, err := sem5.TryAcquire(ctx, leasehold.TTL(ttl), leasehold.NoKeepalive())
	switch {
	case errors.Is(err, leasehold.ErrNoPermit):
	case err == nil && time.Since(t0) >= ttl:
		// A slow machine: the first permit may have expired (correctly)
		// before the sixth attempt, so the refusal cannot be checked.
		t.Logf("five permits took %s, more than the TTL %s: sixth-permit refusal not checked", time.Since(t0), ttl)
		held = append(held, sixth)
	default:
		t.Fatalf("sixth permit %v within the TTL of all five: %v, want ErrNoPermit", time.Since(t0), err)
	}
	time.Sleep(ttl + ttl/2 + 20*time.Millisecond) // the holders "crash": no keepalive
	b, _ := leasehold.New(s, leasehold.WithOwner("b"))
	sem2, _ := b.Semaphore(n, 2)
	for i := 0; i < 2; i++ {
		l, err := sem2.TryAcquire(ctx, leasehold.TTL(time.Minute))
		if err != nil {
			t.Fatalf("permit after expiry: %v", err)
		}
		if idx, _ := leasehold.PermitIndex(n, l.Name()); idx >= 2 {
			t.Fatalf("N=2 handed out permit %d", idx)
		}
		if l.Token() <= held[0].Token() && l.Name() == held[0].Name() {
			t.Fatalf("token did not increase on a permit's takeover")
		}
	}
	if _, err := sem2.TryAcquire(ctx, leasehold.TTL(time.Minute)); !errors.Is(err, leasehold.ErrNoPermit) {
		t.Fatalf("third permit with N=2: %v, want ErrNoPermit", err)
	}
	if hs, err := sem2.Holders(ctx); err != nil || len(hs) != 2 {
		t.Fatalf("Holders = %d, %v; want 2", len(hs), err)
	}
	if _, err := b.Semaphore(n, 0); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("Semaphore with 0 permits: %v, want ErrInvalid", err)
	}
}

// testElection: candidates take turns leading; terms strictly increase,
// each term has one leader, and leaderships never overlap. Then a leader
// that stops renewing (as a crashed one would) is replaced within its TTL,
// and a resigning one at once.
func testElection(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := bg(t)
	n := name(t, "elect")
	acquire := make([]func(context.Context) (*leasehold.Lease, error), 4)
	for c := range acquire {
		cl, _ := leasehold.New(s, leasehold.WithOwner(fmt.Sprintf("node-%d", c)))
		e, err := cl.Election(n, leasehold.TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		acquire[c] = e.Campaign
	}
	ivs, ops := grantRounds(t, ctx, acquire, 5, time.Millisecond, nil)
	sort.Slice(ivs, func(a, b int) bool { return ivs[a].start < ivs[b].start })
	for i := 1; i < len(ivs); i++ {
		if ivs[i].term <= ivs[i-1].term {
			t.Errorf("term %d began after term %d", ivs[i].term, ivs[i-1].term)
		}
	}
	if m := maxOverlap(ivs); m != 1 {
		t.Errorf("%d leaders at once", m)
	}
	// The campaigns and resignations form a linearizable history of the
	// election's lease: one leader per term, terms increasing.
	if res := porcupine.CheckOperationsTimeout(LeaseModel(), ops, 30*time.Second); res != porcupine.Ok {
		t.Errorf("election history (%d ops): porcupine says %s", len(ops), res)
	}

	// Failover: the leader stops renewing; a standby blocked in Campaign
	// takes over within the TTL and a wake-up. The leader's TTL is at least
	// 2 s: the standby's Observe (a watch set up, then a read) must see it
	// before it expires, which 200 ms did not always leave on a loaded
	// machine.
	ttl := max(4*h.ttl(), 2*time.Second)
	crash, _ := leasehold.New(s, leasehold.WithOwner("crashes"))
	ec, _ := crash.Election(n, leasehold.TTL(ttl), leasehold.NoKeepalive())
	old, err := ec.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standby, _ := leasehold.New(s, leasehold.WithOwner("standby"))
	es, _ := standby.Election(n, leasehold.TTL(time.Minute))
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	seen := es.Observe(obsCtx, 50*time.Millisecond)
	if l := <-seen; l.Identity != "crashes" || l.Term != old.Token() {
		t.Errorf("Observe first saw %+v, want the crashing leader", l)
	}
	t0 := time.Now()
	nl, err := es.Campaign(ctx)
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if nl.Token() <= old.Token() {
		t.Errorf("new term %d <= old term %d", nl.Token(), old.Token())
	}
	if took > ttl+10*time.Second {
		t.Errorf("failover after a crash took %s, want within TTL %s (+ slack: a waiter left waiting, not a slow machine)", took, ttl)
	}
	leader, err := es.Leader(ctx)
	if err != nil || leader.Identity != "standby" || leader.Term != nl.Token() {
		t.Errorf("Leader() = %+v, %v", leader, err)
	}
	// Resign: the next standby takes over at once.
	third, _ := leasehold.New(s, leasehold.WithOwner("third"))
	e3, _ := third.Election(n, leasehold.TTL(time.Minute))
	got := make(chan time.Duration, 1)
	releaseThird := make(chan struct{})
	thirdDone := make(chan struct{})
	var resignedAt time.Time
	var rmu sync.Mutex
	go func() {
		defer close(thirdDone)
		l, err := e3.Campaign(ctx)
		rmu.Lock()
		d := time.Since(resignedAt)
		rmu.Unlock()
		got <- d
		<-releaseThird
		if err == nil {
			l.Release(ctx)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	rmu.Lock()
	resignedAt = time.Now()
	rmu.Unlock()
	if err := nl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	resign := <-got
	if resign > 5*time.Second {
		t.Errorf("takeover after resign took %s", resign)
	}
	deadline := time.After(10 * time.Second)
	for observed := false; !observed; {
		select {
		case l := <-seen:
			observed = l.Identity == "third"
		case <-deadline:
			t.Error("Observe never reported the third leader")
			observed = true
		}
	}
	close(releaseThird)
	<-thirdDone
	t.Logf("election: %d terms; failover after a crash (TTL %s) %s, after a resign %s", len(ivs), ttl, took.Round(time.Millisecond), resign.Round(time.Microsecond))
}
