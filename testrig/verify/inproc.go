package verify

import (
	"context"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// InProcess is what an in-process run adds to a WorkerConfig: what a worker
// process cannot be handed as JSON. Every field is optional.
type InProcess struct {
	// Clock gives logical process client its own clock (nil: the real
	// one). Its Client takes deadlines, keepalive and waits from it
	// (leasehold.WithClock), and so does the critical section's check
	// before writing. Such a process's critical sections are recorded as
	// ending at the last real instant its lease was found held (see
	// belief), and its writes carry no deadline for the oracle's
	// AfterDeadline count, since its deadline is not a real-time instant.
	Clock func(client int) clock.Clock
	// Wrap puts a layer between logical process client's Client and its
	// recorder: a fault (a partition, a delayed reply) that the process
	// sees and the store does not. Calls the layer does not pass on are
	// not recorded.
	Wrap func(client int, s leasehold.Store) leasehold.Store
	// MidCS is called in every critical section, after the oracle read
	// (without an oracle: before the hold), with the lease held: a suite
	// pauses, suspends or moves the holder's clock there.
	MidCS func(client int, key string, l *leasehold.Lease)
}

// clock returns logical process client's injected clock, or nil.
func (in InProcess) clock(client int) clock.Clock {
	if in.Clock == nil {
		return nil
	}
	return in.Clock(client)
}

// RunInProcess runs cfg's workload (cfg.Mode, "lock" by default) as
// goroutines of this process against store, recording as a worker process
// does, and returns the history once every logical process has done its
// cycles or ctx has ended. cfg.ID defaults to "w0"; runs whose histories
// are checked together need distinct IDs. store is not closed.
func RunInProcess(ctx context.Context, store leasehold.Store, cfg WorkerConfig, in InProcess) (*History, error) {
	if cfg.ID == "" {
		cfg.ID = "w0"
	}
	cfg.defaults()
	mode, ok := workerModes[cfg.Mode]
	if !ok {
		return nil, fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("no keys")
	}
	var events []Event // appended to under w.emitMu
	w := newWorker(cfg, store, in, func(ev Event) { events = append(events, ev) })
	w.run(ctx, mode)
	w.http.CloseIdleConnections()
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	return &History{Events: slices.Clone(events)}, nil
}
