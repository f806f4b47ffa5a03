package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/workflow"
)

// staleService answers every tenth transition that cannot start from the
// first state it read with a refusal naming that state — as the adaptive
// queue answered from its stale view of the instance before the fix.
type staleService struct {
	Service
	mu  sync.Mutex
	old *workflow.Instance
	n   int
}

func (s *staleService) Get(ctx context.Context, instance string) (workflow.Instance, error) {
	in, err := s.Service.Get(ctx, instance)
	s.mu.Lock()
	if s.old == nil && err == nil && in.Version > 0 {
		s.old = &in
	}
	s.mu.Unlock()
	return in, err
}

func (s *staleService) Apply(ctx context.Context, r workflow.Request) (workflow.Result, error) {
	s.mu.Lock()
	s.n++
	old, n := s.old, s.n
	s.mu.Unlock()
	if old != nil && n%10 == 0 && old.State != r.From && old.State != r.To {
		return workflow.Result{Outcome: workflow.WrongState, Instance: r.Instance, From: r.From, To: r.To,
			State: old.State, Version: old.Version, Entry: *old.Last}, nil
	}
	return s.Service.Apply(ctx, r)
}

// TestR16CatchesStale is R16's negative control: the same workload and
// checker, with one of three values answering some refusals from an old
// view of the instance, must find stale answers, and nothing wrong with the history.
func TestR16CatchesStale(t *testing.T) {
	m := memory.New()
	cfg := Config{Workflow: "r16ctl", Instance: "i", Strategy: workflow.Optimistic, Clients: 4, Duration: 2 * time.Second}
	w, err := New(cfg, m, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	var log callLog
	emit := log.emit
	var wg sync.WaitGroup
	for p := range 3 {
		c := cfg
		c.ID, c.Seed = string(rune('a'+p)), uint64(p+1)
		wp, err := New(c, m, m)
		if err != nil {
			t.Fatal(err)
		}
		var svc Service = wp
		if p == 0 {
			svc = &staleService{Service: wp}
		}
		wg.Go(func() { Run(ctx, c, func(int) Service { return svc }, emit) })
	}
	wg.Wait()
	hist, err := w.History(ctx, "i")
	if err != nil {
		t.Fatal(err)
	}
	r := Check(Chain("r16ctl"), log.all(), hist)
	t.Logf("%s", r)
	if r.Kinds["stale"] == 0 || r.Lost+r.Duplicated+r.Phantom+r.Unresolved > 0 {
		t.Fatalf("want stale answers caught (and no lost, duplicated, phantom or unresolved): %s %v", r, r.First)
	}
}
