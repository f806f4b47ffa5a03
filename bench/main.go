// Command bench measures leasehold's stores side by side with the raw engine
// primitives and with peer libraries, on the same servers in one run, and
// prints a Markdown table. It is a separate module so that the main module
// does not depend on the peers.
//
//	cd bench && go run . -redis redis://127.0.0.1:6379/0 -postgres postgres://...
//
// Every figure is a median and a p99 (or a rate) measured in this run; quote
// ratios, not absolutes. See docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"

	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// locker is one lock implementation under test.
type locker struct {
	name string
	// try makes one attempt; ok is false when the lock is held.
	try func(ctx context.Context, key string) (unlock func(context.Context) error, ok bool, err error)
	// wait blocks until the lock is taken (the library's own waiting).
	wait func(ctx context.Context, key string) (unlock func(context.Context) error, err error)
}

var (
	pairs    = flag.Int("pairs", 2000, "uncontended acquire+release pairs per implementation")
	handoffs = flag.Int("handoffs", 300, "handoffs measured per implementation")
	waiters  = flag.Int("waiters", 8, "blocked waiters in the handoff measure")
	clients  = flag.Int("clients", 32, "clients in the throughput measures")
	duration = flag.Duration("duration", 3*time.Second, "length of each throughput measure")
	only     = flag.String("only", "", "comma-separated implementation name prefixes to run (default all)")
)

func main() {
	redisURL := flag.String("redis", os.Getenv("LEASEHOLD_TEST_REDIS"), "Redis URL (default $LEASEHOLD_TEST_REDIS)")
	pgURL := flag.String("postgres", os.Getenv("LEASEHOLD_TEST_POSTGRES"), "PostgreSQL URL (default $LEASEHOLD_TEST_POSTGRES)")
	flag.Parse()
	ctx := context.Background()
	var lockers []locker
	if *redisURL != "" {
		ls, err := redisLockers(ctx, *redisURL)
		check(err)
		lockers = append(lockers, ls...)
	}
	if *pgURL != "" {
		ls, err := postgresLockers(ctx, *pgURL)
		check(err)
		lockers = append(lockers, ls...)
	}
	if len(lockers) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no engine given (-redis, -postgres)")
		os.Exit(2)
	}
	fmt.Printf("| implementation | uncontended pair p50 / p99 | handoff p50 / p99 (%d waiters) | %d clients, distinct keys | same key: handoffs/s (holder changes) |\n", *waiters, *clients)
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, l := range lockers {
		if !selected(l.name) {
			continue
		}
		row := []string{l.name, "—", "—", "—", "—"}
		if l.try != nil {
			row[1] = pct(measurePairs(ctx, l))
			row[3] = fmt.Sprintf("%.0f/s", measureDistinct(ctx, l))
		}
		if l.wait != nil {
			row[2] = pct(measureHandoff(ctx, l))
			rate, changes := measureSameKey(ctx, l)
			row[4] = fmt.Sprintf("%.0f/s (%.0f %%)", rate, 100*changes)
		}
		fmt.Println("| " + strings.Join(row, " | ") + " |")
	}
}

func selected(name string) bool {
	if *only == "" {
		return true
	}
	for _, p := range strings.Split(*only, ",") {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var keySeq atomic.Int64

func freshKey(what string) string {
	return fmt.Sprintf("bench/%s/%d/%d", what, time.Now().UnixNano(), keySeq.Add(1))
}

func pct(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	slices.Sort(d)
	return fmt.Sprintf("%s / %s", short(d[len(d)/2]), short(d[len(d)*99/100]))
}

func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// measurePairs: one client, uncontended try+release of one key.
func measurePairs(ctx context.Context, l locker) []time.Duration {
	key := freshKey("pair")
	out := make([]time.Duration, 0, *pairs)
	for i := -*pairs / 10; i < *pairs; i++ { // the first tenth warms up connections and caches
		if i == 0 {
			out = out[:0]
		}
		t0 := time.Now()
		unlock, ok, err := l.try(ctx, key)
		if err != nil || !ok {
			fmt.Fprintf(os.Stderr, "%s: pair %d: ok=%v err=%v\n", l.name, i, ok, err)
			return out
		}
		if err := unlock(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "%s: release: %v\n", l.name, err)
			return out
		}
		out = append(out, time.Since(t0))
	}
	return out
}

// measureHandoff: waiters+1 workers contend for one key; each holder works
// 500 µs, notes the time and releases, and joins the waiters again only once
// another worker holds the lock, so every handoff goes to a blocked waiter.
// The next holder records how long after the release call it got the lock.
func measureHandoff(ctx context.Context, l locker) []time.Duration {
	key := freshKey("handoff")
	var mu sync.Mutex
	var out []time.Duration
	var relAt, gen atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w <= *waiters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				unlock, err := l.wait(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "%s: wait: %v\n", l.name, err)
						cancel()
					}
					return
				}
				got := time.Since(start)
				mine := gen.Add(1)
				if r := relAt.Load(); r > 0 {
					mu.Lock()
					out = append(out, got-time.Duration(r))
					if len(out) >= *handoffs {
						cancel()
					}
					mu.Unlock()
				}
				time.Sleep(500 * time.Microsecond)
				relAt.Store(int64(time.Since(start)))
				if err := unlock(context.WithoutCancel(ctx)); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "%s: release: %v\n", l.name, err)
				}
				for gen.Load() == mine && ctx.Err() == nil {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// measureDistinct: clients try+release their own keys for the duration.
func measureDistinct(ctx context.Context, l locker) float64 {
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := freshKey("distinct")
			for ctx.Err() == nil {
				unlock, ok, err := l.try(ctx, key)
				if err != nil || !ok {
					continue
				}
				if unlock(context.WithoutCancel(ctx)) == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(t0).Seconds()
}

// measureSameKey: clients take turns on one key with the library's waiting
// and no work; returns handoffs/s and the share of grants that went to a
// different client than the previous one.
func measureSameKey(ctx context.Context, l locker) (float64, float64) {
	key := freshKey("same")
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var mu sync.Mutex
	last, grants, changes := -1, 0, 0
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for ctx.Err() == nil {
				unlock, err := l.wait(ctx, key)
				if err != nil {
					return
				}
				mu.Lock()
				grants++
				if last != -1 && last != c {
					changes++
				}
				last = c
				mu.Unlock()
				_ = unlock(context.WithoutCancel(ctx))
			}
		}(c)
	}
	wg.Wait()
	if grants == 0 {
		return 0, 0
	}
	return float64(grants) / time.Since(t0).Seconds(), float64(changes) / float64(max(grants-1, 1))
}

// pollWait turns a try into a blocking wait that polls every interval.
func pollWait(try func(context.Context, string) (func(context.Context) error, bool, error), every time.Duration) func(context.Context, string) (func(context.Context) error, error) {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		for {
			unlock, ok, err := try(ctx, key)
			if err != nil || ok {
				return unlock, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(every):
			}
		}
	}
}
