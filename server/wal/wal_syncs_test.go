package wal

import (
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// overlap is a datasync for tests of overlapping group commits: the first
// call waits (up to a generous bound) until a second call has begun and
// returned, then returns first's result; later calls return their own
// fdatasync's result at once.
type overlap struct {
	first        error
	calls        atomic.Int32
	secondDone   chan struct{}
	firstDone    atomic.Bool // the first call has returned
	firstStarted chan struct{}
	overlapped   atomic.Bool // a second call began while the first ran
}

func newOverlap(first error) *overlap {
	return &overlap{first: first, secondDone: make(chan struct{}), firstStarted: make(chan struct{})}
}

func (o *overlap) datasync(f *os.File) error {
	switch o.calls.Add(1) {
	case 1:
		close(o.firstStarted)
		select {
		case <-o.secondDone:
			o.overlapped.Store(true)
			time.Sleep(20 * time.Millisecond) // let a premature report happen, if it would
		case <-time.After(3 * time.Second):
		}
		err := fdatasync(f)
		if o.first != nil {
			err = o.first
		}
		o.firstDone.Store(true)
		return err
	case 2:
		err := fdatasync(f)
		close(o.secondDone)
		return err
	default:
		return fdatasync(f)
	}
}

// TestSyncsOverlap checks that a batch appended while the previous one
// syncs is written and synced at once (Syncs 2), and reported only after
// the previous one, once that is durable, even if its own sync ended
// first.
func TestSyncsOverlap(t *testing.T) {
	o := newOverlap(nil)
	setDatasync(t, o.datasync)
	opts := Options{Dir: t.TempDir(), Syncs: 2}
	l, _ := open(t, opts)
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	add := func(rec string) {
		wg.Add(1)
		l.Append([]byte(rec), func(err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("%s: %v", rec, err)
			}
			if !o.firstDone.Load() {
				t.Errorf("%s reported durable before the first batch's sync returned", rec)
			}
			mu.Lock()
			order = append(order, rec)
			mu.Unlock()
		})
	}
	add("a")
	<-o.firstStarted
	add("b")
	wg.Wait()
	if !o.overlapped.Load() {
		t.Errorf("the second batch's sync did not begin while the first one's ran")
	}
	closeLog(t, l)
	equal(t, "reported", order, []string{"a", "b"})
	equal(t, "recovered", reopen(t, opts).records, []string{"a", "b"})
}

// TestSyncsOverlapFailure checks that when a sync fails, the batch synced
// after it, at the same time, fails too although its own sync went well,
// and that the log is broken.
func TestSyncsOverlapFailure(t *testing.T) {
	boom := errors.New("injected sync failure")
	o := newOverlap(boom)
	setDatasync(t, o.datasync)
	l, _ := open(t, Options{Dir: t.TempDir(), Syncs: 2})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	l.Append([]byte("a"), func(err error) { errs[0] = err; wg.Done() })
	<-o.firstStarted
	l.Append([]byte("b"), func(err error) { errs[1] = err; wg.Done() })
	wg.Wait()
	if !o.overlapped.Load() {
		t.Errorf("the second batch's sync did not begin while the first one's ran")
	}
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("record %d: %v, want the first sync's error", i, err)
		}
	}
	if err := appendWait(l, []byte("later")); !errors.Is(err, boom) {
		t.Errorf("Append after failure: %v", err)
	}
	if err := l.Close(); !errors.Is(err, boom) {
		t.Errorf("Close after failure: %v", err)
	}
}

// TestSyncsOne checks that Syncs 1 syncs one batch at a time, and that a
// negative Syncs is refused.
func TestSyncsOne(t *testing.T) {
	var running, most atomic.Int32
	setDatasync(t, func(f *os.File) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		return fdatasync(f)
	})
	opts := Options{Dir: t.TempDir(), Syncs: 1}
	l, _ := open(t, opts)
	recs := records("one", 200)
	appendAll(t, l, recs[:100])
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range recs[100+25*i : 125+25*i] {
				if err := appendWait(l, []byte(r)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	closeLog(t, l)
	if most.Load() != 1 {
		t.Errorf("%d syncs at once with Syncs 1", most.Load())
	}
	got := reopen(t, opts).records
	slices.Sort(got)
	want := slices.Clone(recs)
	slices.Sort(want)
	equal(t, "recovered", got, want)
	if _, _, err := tryOpen(Options{Dir: t.TempDir(), Syncs: -1}); err == nil {
		t.Error("Open with Syncs -1 succeeded")
	}
}
