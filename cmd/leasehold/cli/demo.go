package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sqlite"
)

// demoLease is the lease the demo workers take turns on.
const demoLease = "demo/job"

const demoLong = `Demo starts WORKERS goroutines, each with its own client and owner
(worker-1, worker-2, ...), that take turns on the lease "` + demoLease + `": each of
them, ROUNDS times, waits for the lease (TTL 2s), prints its fencing token,
works for about 100ms and releases it. At the end it checks that the tokens
strictly increased and that no two workers ever held the lease at once.

Without --store it uses a temporary SQLite file that it removes afterwards.

Exit codes: 0 success, 64 usage error, 70 store error or a failed check.`

const demoExample = `  leasehold demo
  leasehold demo --workers 4 --rounds 3
  leasehold demo --store memory://`

func newDemoCmd(e *env) *cobra.Command {
	var store string
	var rounds, workers int
	cmd := &cobra.Command{
		Use:     "demo [flags]",
		Short:   "Show workers taking turns on one lease",
		Long:    demoLong,
		Example: demoExample,
		Args:    cobra.NoArgs,
		RunE: wrapRun(func(cmd *cobra.Command, args []string) error {
			if rounds < 1 || rounds > 1000 {
				return usagef("demo: --rounds %d must be in [1, 1000]", rounds)
			}
			if workers < 1 || workers > 100 {
				return usagef("demo: --workers %d must be in [1, 100]", workers)
			}
			s, cleanup, err := e.demoStore(cmd, store)
			if err != nil {
				return err
			}
			defer cleanup()
			return runDemo(cmd.Context(), e, s, workers, rounds)
		}),
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL (default: a temporary SQLite file)")
	cmd.Flags().IntVar(&rounds, "rounds", 5, "turns each worker takes")
	cmd.Flags().IntVar(&workers, "workers", 2, "number of workers")
	return cmd
}

// demoStore opens the --store URL, or a temporary SQLite file.
func (e *env) demoStore(cmd *cobra.Command, url string) (leasehold.Store, func(), error) {
	if cmd.Flags().Changed("store") {
		s, err := e.openStore(cmd.Context(), url)
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "leasehold-demo-")
	if err != nil {
		return nil, nil, exitf(ExitInternal, "demo: %v", err)
	}
	s, err := sqlite.Open(filepath.Join(dir, "demo.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, classify(err, "demo: open store")
	}
	return s, func() { s.Close(); os.RemoveAll(dir) }, nil
}

// demoLog records the turns of the demo.
type demoLog struct {
	mu       sync.Mutex
	tokens   []uint64
	active   atomic.Int32
	overlaps atomic.Int32
}

func runDemo(ctx context.Context, e *env, s leasehold.Store, workers, rounds int) error {
	var log demoLog
	var out sync.Mutex
	printf := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(e.stdout, format, args...)
	}
	printf("%d workers take %d turns each on %s\n", workers, rounds, demoLease)
	start := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		owner := fmt.Sprintf("worker-%d", i+1)
		c, err := leasehold.New(s, leasehold.WithOwner(owner))
		if err != nil {
			return classify(err, "demo")
		}
		wg.Go(func() { errs[i] = demoWorker(ctx, c, rounds, &log, printf) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return exitf(ExitInternal, "demo: %v", err)
	}

	increasing := true
	for i := 1; i < len(log.tokens); i++ {
		if log.tokens[i] <= log.tokens[i-1] {
			increasing = false
		}
	}
	printf("\n%d turns in %s.\n", len(log.tokens), time.Since(start).Round(time.Millisecond))
	if increasing {
		printf("Tokens strictly increasing: %d .. %d.\n", log.tokens[0], log.tokens[len(log.tokens)-1])
	}
	if log.overlaps.Load() == 0 {
		printf("No overlap detected: never more than one holder at a time.\n")
	}
	switch {
	case !increasing:
		return exitf(ExitInternal, "demo: tokens did not strictly increase: %v", log.tokens)
	case log.overlaps.Load() != 0:
		return exitf(ExitInternal, "demo: %d overlapping turns detected", log.overlaps.Load())
	}
	return nil
}

// demoWorker takes rounds turns on the demo lease with client c.
func demoWorker(ctx context.Context, c *leasehold.Client, rounds int, log *demoLog, printf func(string, ...any)) error {
	for range rounds {
		l, err := c.Acquire(ctx, demoLease, leasehold.TTL(2*time.Second))
		if err != nil {
			return fmt.Errorf("%s: acquire: %w", c.Owner(), err)
		}
		if log.active.Add(1) != 1 {
			log.overlaps.Add(1)
		}
		log.mu.Lock()
		log.tokens = append(log.tokens, l.Token())
		log.mu.Unlock()
		printf("%s holds %s with token %d\n", c.Owner(), demoLease, l.Token())

		time.Sleep(100 * time.Millisecond) // the work

		log.active.Add(-1)
		lostErr := l.Err()
		if err := releaseLease(l); err != nil {
			return fmt.Errorf("%s: %w", c.Owner(), err)
		}
		if lostErr != nil && !errors.Is(lostErr, leasehold.ErrReleased) {
			return fmt.Errorf("%s: %w", c.Owner(), lostErr)
		}
		// Step back briefly so that the other workers get their turn.
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
