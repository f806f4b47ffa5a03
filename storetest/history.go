package storetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// historyRun is what CheckHistories and CheckRecordHistories share: run
// many independent histories, a few at a time, each with concurrent
// clients of its own, and check each with porcupine.
type historyRun struct {
	histories, clients, parallel int
	seed                         uint64
	clientStream                 uint64 // PCG stream of every client's generator
	timeout                      time.Duration
	model                        porcupine.Model
	// client runs client c of history h with its own generator and
	// returns the operations it recorded.
	client func(ctx context.Context, h, c int, r *rand.Rand) []porcupine.Operation
	// prepare, if set, completes a history's operations from the whole
	// history before it is checked, and returns them.
	prepare func(ops []porcupine.Operation) []porcupine.Operation
	// tally counts a checked history's operations; it is called under the
	// runner's lock.
	tally func(ops []porcupine.Operation)
	// describe lists history h for FirstBad.
	describe func(h int, ops []porcupine.Operation) string
}

// Verdicts is what the checker said of a run of histories: the part that
// HistoryResult and RecordHistoryResult share.
type Verdicts struct {
	Seed       uint64
	Histories  int
	Operations int
	Unknown    int    // indeterminate operations recorded
	Ok         int    // histories the checker found linearizable
	Illegal    int    // histories it proved not linearizable
	Undecided  int    // histories it could not decide in time (never a pass)
	FirstBad   string // the first history proved not linearizable, listed
}

// Passed reports whether every history was checked and found linearizable.
func (v Verdicts) Passed() bool { return v.Ok == v.Histories && v.Histories > 0 }

// run runs the histories and records the checker's verdicts in v, under the
// lock that tally runs under. History h seeds its clients from PCG(seed,
// h), so a seed replays the same workload (the timing, and so the store's
// answers, may differ).
func (hr historyRun) run(ctx context.Context, v *Verdicts) {
	v.Seed, v.Histories = hr.seed, hr.histories
	var mu sync.Mutex
	sem := make(chan struct{}, hr.parallel)
	var wg sync.WaitGroup
	for h := 0; h < hr.histories; h++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(h int) {
			defer wg.Done()
			defer func() { <-sem }()
			ops := hr.runOne(ctx, h)
			if hr.prepare != nil {
				ops = hr.prepare(ops)
			}
			result := porcupine.CheckOperationsTimeout(hr.model, ops, hr.timeout)
			mu.Lock()
			defer mu.Unlock()
			v.Operations += len(ops)
			hr.tally(ops)
			switch result {
			case porcupine.Ok:
				v.Ok++
			case porcupine.Illegal:
				v.Illegal++
				if v.FirstBad == "" {
					v.FirstBad = hr.describe(h, ops)
				}
			default:
				v.Undecided++
			}
		}(h)
	}
	wg.Wait()
}

// runOne drives the clients of history h at once and gathers their
// operations.
func (hr historyRun) runOne(ctx context.Context, h int) []porcupine.Operation {
	rng := rand.New(rand.NewPCG(hr.seed, uint64(h)))
	seeds := make([]uint64, hr.clients)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	var mu sync.Mutex
	var ops []porcupine.Operation
	var wg sync.WaitGroup
	for c := 0; c < hr.clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			mine := hr.client(ctx, h, c, rand.New(rand.NewPCG(seeds[c], hr.clientStream)))
			mu.Lock()
			ops = append(ops, mine...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	return ops
}

// orDefault sets *p to def if it is the zero value.
func orDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
