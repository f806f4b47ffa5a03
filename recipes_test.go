package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

// TestElectionRun: two candidates run Election.Run; the leader's callbacks
// fire in order, and when the leader's Run is cancelled (a graceful
// shutdown) it resigns and the other takes over at once.
func TestElectionRun(t *testing.T) {
	s := memory.New()
	type event struct {
		who, what string
		term      uint64
	}
	var mu sync.Mutex
	var events []event
	add := func(e event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	started := make(chan string, 2)
	ctxs := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, who := range []string{"a", "b"} {
		c, _ := leasehold.New(s, leasehold.WithOwner(who))
		e, err := c.Election("svc", leasehold.TTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[who] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := e.Run(ctx, leasehold.Callbacks{
				OnStartedLeading: func(lctx context.Context, l *leasehold.Lease) {
					add(event{who, "started", l.Token()})
					started <- who
					<-lctx.Done()
				},
				OnStoppedLeading: func(err error) { add(event{who, "stopped", 0}) },
				OnNewLeader:      func(l leasehold.Leader) { add(event{who, "saw " + l.Identity, l.Term}) },
			})
			if !errors.Is(err, context.Canceled) {
				add(event{who, "run returned " + err.Error(), 0})
			}
		}()
	}
	first := <-started
	second := map[string]string{"a": "b", "b": "a"}[first]
	ctxs[first]()
	if got := <-started; got != second {
		t.Fatalf("after %s resigned, %s started leading", first, got)
	}
	ctxs[second]()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var order []string
	var terms []uint64
	for _, e := range events {
		switch e.what {
		case "started":
			order = append(order, e.who+" started")
			terms = append(terms, e.term)
		case "stopped":
			order = append(order, e.who+" stopped")
		default:
			if e.what[:3] != "saw" {
				t.Errorf("%s: %s", e.who, e.what)
			}
		}
	}
	want := []string{first + " started", first + " stopped", second + " started", second + " stopped"}
	if len(order) != 4 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] || order[3] != want[3] {
		t.Errorf("callbacks %v, want %v", order, want)
	}
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Errorf("terms %v do not increase", terms)
	}
}

func TestRecipesRejectBadInput(t *testing.T) {
	s := memory.New()
	c, _ := leasehold.New(s, leasehold.WithOwner("a"))
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"election with an empty name", func() error { _, err := c.Election(""); return err }()},
		{"election with a bad TTL", func() error { _, err := c.Election("e", leasehold.TTL(time.Nanosecond)); return err }()},
		{"semaphore with 0 permits", func() error { _, err := c.Semaphore("s", 0); return err }()},
		{"semaphore with too many permits", func() error { _, err := c.Semaphore("s", leasehold.MaxPermits+1); return err }()},
		{"semaphore whose permit names would be too long", func() error {
			_, err := c.Semaphore(strings.Repeat("n", leasehold.MaxNameLen-3), 10)
			return err
		}()},
	} {
		if !errors.Is(tc.err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.what, tc.err)
		}
	}
	if recs, _ := s.List(context.Background(), ""); len(recs) != 0 {
		t.Errorf("bad input left leases: %+v", recs)
	}
}
