package serverbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
)

// QueueResult is what MeasureQueue saw.
type QueueResult struct {
	Waiters        int
	QueueTime      time.Duration // for all of them to be queued
	HeapPerWaiter  float64       // bytes of live heap per queued waiter (after GC)
	StackPerWaiter float64       // bytes of goroutine stack per waiter (each waits in its own call)
	RSS            uint64
	Handoffs       int             // releases that handed the lease on, each to the queue's head
	Handoff        []time.Duration // release call to the next holder's grant, sorted
}

func (r QueueResult) String() string {
	return fmt.Sprintf("%d queued waiters (queued in %s): heap %.0f B/waiter + goroutine stack %.0f B/waiter, process RSS %.0f MB; %d handoffs in queue order, p50 %s / p99 %s",
		r.Waiters, r.QueueTime.Round(time.Millisecond), r.HeapPerWaiter, r.StackPerWaiter, float64(r.RSS)/1e6,
		r.Handoffs, fmtDur(pct(r.Handoff, 50)), fmtDur(pct(r.Handoff, 99)))
}

// MeasureQueue queues n waiters on one held name of a durable engine in
// dir, each in its own goroutine calling Acquire with a wait of an hour,
// measures the memory they take, then releases the lease handoffs times
// while they wait: every release must hand the lease to the head of the
// queue (the order Waiters reported), and the time from the release call
// to the next holder's grant is measured. The rest get ErrClosed when the
// engine closes.
func MeasureQueue(ctx context.Context, dir string, n, handoffs int) (QueueResult, error) {
	res := QueueResult{Waiters: n}
	handoffs = min(handoffs, n)
	heap0, stack0 := liveHeap(), stackInuse()
	e, err := server.OpenEngine(server.EngineConfig{Dir: dir})
	if err != nil {
		return res, err
	}
	defer e.Close()
	const name = "queue/one"
	held, err := e.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: "first", TTL: time.Hour}})
	if err != nil {
		return res, err
	}
	type grant struct {
		rec leasehold.Record
		at  time.Time
	}
	granted := make(chan grant, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := e.Acquire(ctx, server.AcquireRequest{
				AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: "waiter-" + strconv.Itoa(i), TTL: time.Hour},
				Wait:           time.Hour,
			})
			switch {
			case err == nil:
				granted <- grant{rec, time.Now()}
			case !errors.Is(err, leasehold.ErrClosed):
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	for e.Stats().Waiters < n {
		select {
		case err := <-errs:
			return res, err
		case <-time.After(10 * time.Millisecond):
		}
	}
	res.QueueTime = time.Since(start)
	heap1, stack1 := liveHeap(), stackInuse()
	res.HeapPerWaiter = float64(heap1-min(heap0, heap1)) / float64(n)
	res.StackPerWaiter = float64(stack1-min(stack0, stack1)) / float64(n)
	res.RSS = rss()
	order := e.Waiters(name)
	if len(order) != n {
		return res, fmt.Errorf("queue: %d waiters listed, want %d", len(order), n)
	}
	for k := range handoffs {
		t0 := time.Now()
		if err := e.Release(ctx, held.Name, held.Owner, held.Token); err != nil {
			return res, err
		}
		var g grant
		select {
		case g = <-granted:
		case err := <-errs:
			return res, err
		case <-time.After(time.Minute):
			return res, fmt.Errorf("queue: handoff %d: no grant within a minute", k)
		}
		if g.rec.Owner != order[k].Owner {
			return res, fmt.Errorf("queue: handoff %d went to %s, the queue's head was %s", k, g.rec.Owner, order[k].Owner)
		}
		if w := e.Stats().Waiters; w != n-k-1 {
			return res, fmt.Errorf("queue: %d waiting after handoff %d, want %d", w, k, n-k-1)
		}
		res.Handoff = append(res.Handoff, g.at.Sub(t0))
		res.Handoffs++
		held = g.rec
	}
	slices.Sort(res.Handoff)
	if err := e.Close(); err != nil {
		return res, err
	}
	wg.Wait()
	select {
	case err := <-errs:
		return res, err
	default:
	}
	return res, nil
}

func stackInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}
