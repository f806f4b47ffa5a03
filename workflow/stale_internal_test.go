package workflow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/sqlite"
)

// afterTxn runs hook once, after the first Txn that succeeds.
type afterTxn struct {
	leasehold.RecordStore
	once sync.Once
	hook func()
}

func (a *afterTxn) Txn(ctx context.Context, t leasehold.Txn) (leasehold.TxnResult, error) {
	out, err := a.RecordStore.Txn(ctx, t)
	if err == nil {
		a.once.Do(a.hook)
	}
	return out, err
}

// recordStores returns memory, SQLite, and PostgreSQL when configured.
func recordStores(t *testing.T) map[string]leasehold.RecordStore {
	t.Helper()
	out := map[string]leasehold.RecordStore{"memory": memory.New()}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "wf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	out["sqlite"] = s
	if url := os.Getenv("LEASEHOLD_TEST_POSTGRES"); url != "" {
		p, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		out["postgres"] = p
	}
	return out
}

// TestQueueSeesOtherProcesses: a queue head that keeps its view of the
// instance between batches must not answer from it once another Workflows
// (another process) has moved the instance. Here the head applies A → B,
// another value moves B → C, and then this value is asked C → D: it must
// apply it, not refuse it as "the instance is in B (version 1)" — a state
// the instance had left before the call was made.
func TestQueueSeesOtherProcesses(t *testing.T) {
	for name, rs := range recordStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			def := chain("stale" + name[:3] + time.Now().Format("150405.000000")[7:])
			other, err := New(def, Config{Records: rs, Strategy: Optimistic})
			if err != nil {
				t.Fatal(err)
			}
			hooked := &afterTxn{RecordStore: rs}
			w, err := New(def, Config{Records: hooked, LocalQueue: true, Strategy: Adaptive, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Create(ctx, "i"); err != nil {
				t.Fatal(err)
			}
			queued(t, w, "i")
			late := make(chan outcome, 1)
			var hookErr error // set by the head's goroutine, read after it answered
			hooked.hook = func() {
				// The head has just written A → B (version 1). Another
				// process moves the instance on, and only then is this
				// value asked C → D.
				if r, err := other.Transition(ctx, "i", "B", "C", "other", "o1"); err != nil || r.Outcome != Applied {
					hookErr = fmt.Errorf("the other process: %+v %v", r, err)
					return
				}
				go func() {
					r, err := w.Transition(ctx, "i", "C", "D", "late", "l1")
					late <- outcome{r, err}
				}()
				h := w.acquireHot("i")
				defer w.releaseHot(h)
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					h.mu.Lock()
					n := len(h.q)
					h.mu.Unlock()
					if n > 0 {
						return
					}
					if time.Now().After(deadline) {
						hookErr = errors.New("C → D never reached the queue")
						return
					}
				}
			}
			if r, err := w.Transition(ctx, "i", "A", "B", "first", "f1"); err != nil || r.Outcome != Applied {
				t.Fatalf("first: %+v %v", r, err)
			}
			if hookErr != nil {
				t.Fatal(hookErr)
			}
			o := <-late
			if o.err != nil || o.res.Outcome != Applied || o.res.Version != 3 {
				t.Fatalf("C → D asked after the instance reached C (version 2): %+v, %v; want applied at version 3", o.res, o.err)
			}
		})
	}
}
