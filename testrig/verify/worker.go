package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/cmd/leasehold/cli"
	"github.com/leasehold/leasehold/stores"
)

// EnvWorker carries a worker's configuration (JSON) to a worker process.
const EnvWorker = "LEASEHOLD_VERIFY_WORKER"

// WorkerConfig is what one worker process does.
type WorkerConfig struct {
	ID      string   // worker id, set by StartWorkers
	Store   string   // store URL (stores.Open)
	Keys    []string // lease names to contend for
	Mode    string   // "lock" (default); others are registered in workerModes
	Clients int      // logical processes (goroutines), default 2
	// Cycles per client; 0 runs until the worker is told to stop (SIGTERM).
	Cycles int
	TTL    time.Duration // lease TTL (default 1s)
	// Oracle is the oracle's URL; empty skips the read/write step.
	Oracle string
	// Hold is how long a holder stays between reading and writing.
	Hold time.Duration
	// Naive makes the holder write without checking that its lease is still
	// held (the GC-pause client of the unfenced control). Otherwise it
	// writes only while its local deadline is at least WriteMargin away.
	Naive       bool
	WriteMargin time.Duration // default TTL/4
	// OpTimeout bounds each store call (default TTL); AcquireTimeout each
	// Acquire (default 5 × TTL).
	OpTimeout      time.Duration
	AcquireTimeout time.Duration
	// Gap is the longest random sleep between two operations of Mode
	// "random" (default TTL/2).
	Gap time.Duration
	// ErrorPause, when set, makes the lock workload's Acquire stop at a
	// transient store error (one that is neither "held" nor invalid) and
	// try again after ErrorPause with the same request id, instead of
	// retrying with its backoff (5 ms up). While a store is down every
	// attempt is an indeterminate operation; this keeps them few.
	ErrorPause time.Duration
	// Permits is the semaphore size for Mode "semaphore".
	Permits int
	Seed    uint64
}

func (c *WorkerConfig) defaults() {
	if c.Mode == "" {
		c.Mode = "lock"
	}
	if c.Clients == 0 {
		c.Clients = 2
	}
	if c.TTL == 0 {
		c.TTL = time.Second
	}
	if c.WriteMargin == 0 {
		c.WriteMargin = c.TTL / 4
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = c.TTL
	}
	if c.AcquireTimeout == 0 {
		c.AcquireTimeout = 5 * c.TTL
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
}

// Worker is the running state a mode function gets.
type Worker struct {
	Cfg   WorkerConfig
	Store leasehold.Store
	Emit  func(Event)
	// InProcess holds what only an in-process run (RunInProcess) sets: an
	// injected clock per logical process, a fault layer, a hook in the
	// critical section. Zero in worker processes.
	InProcess
	seq    atomic.Int64
	http   *http.Client
	pid    int
	emitMu sync.Mutex // held by Emit
}

// workerModes maps WorkerConfig.Mode to what each logical process runs.
// client is that process's number; it returns when ctx ends or its cycles
// are done.
var workerModes = map[string]func(ctx context.Context, w *Worker, client int){
	"lock":      lockWorkload.run,
	"election":  electionWorkload.run,
	"semaphore": semaphoreWorkload.run,
	"random":    randomClient,
}

// MaybeWorker turns the current process into a worker if EnvWorker is set,
// or into the leasehold command line if EnvCLI is set, and never returns in
// those cases. Test binaries of the suites call it first
// thing in TestMain, so StartWorkers can run them as workers.
func MaybeWorker() {
	ProcessMain(EnvCLI, "verify", func(argv []string) int {
		return cli.Main(context.Background(), argv, os.Stdout, os.Stderr)
	})
	ProcessMain(EnvWorker, "verify worker", func(cfg WorkerConfig) int {
		return ExitStatus("verify worker "+cfg.ID, RunWorker(cfg, os.Stdout))
	})
}

// ProcessMain turns the process into what the environment variable env
// configures (JSON, decoded into a C), if it is set, and exits with run's
// status, or 2 if the configuration cannot be decoded (what names the
// process in that message). It returns when env is not set.
func ProcessMain[C any](env, what string, run func(cfg C) int) {
	raw := os.Getenv(env)
	if raw == "" {
		return
	}
	var cfg C
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: bad %s: %v\n", what, env, err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

// ExitStatus is a process's exit status after err: 0 if nil, else 1 with
// err written to standard error after what.
func ExitStatus(what string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return 1
}

// RunWorker runs a worker until its cycles are done or SIGTERM, writing its
// events to out as JSON lines (unbuffered, so a killed worker loses none
// that it had written).
func RunWorker(cfg WorkerConfig, out io.Writer) error {
	cfg.defaults()
	mode, ok := workerModes[cfg.Mode]
	if !ok {
		return fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	store, err := OpenStore(ctx, cfg.Store, 60*time.Second)
	if err != nil {
		return err
	}
	defer store.Close()
	enc := json.NewEncoder(out)
	newWorker(cfg, store, InProcess{}, func(ev Event) { _ = enc.Encode(ev) }).run(ctx, mode)
	return nil
}

// OpenStore opens the store at url for a worker process. The engine may
// be down (a suite killed it): it keeps trying for up to within, each try
// bounded by a sixth of that, unless the URL is invalid or ctx ends.
func OpenStore(ctx context.Context, url string, within time.Duration) (leasehold.Store, error) {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		octx, cancel := context.WithTimeout(ctx, within/6)
		store, err := stores.Open(octx, url)
		cancel()
		if err == nil {
			return store, nil
		}
		if errors.Is(err, leasehold.ErrInvalid) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
}

// newWorker returns the worker of cfg on store; its Emit stamps each event
// with the worker's id and hands it to emit, one at a time.
func newWorker(cfg WorkerConfig, store leasehold.Store, in InProcess, emit func(Event)) *Worker {
	w := &Worker{Cfg: cfg, Store: store, InProcess: in, pid: os.Getpid(),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	w.Emit = func(ev Event) {
		ev.Worker = cfg.ID
		w.emitMu.Lock()
		defer w.emitMu.Unlock()
		emit(ev)
	}
	return w
}

// run runs mode in each of Cfg.Clients logical processes and returns when
// all have.
func (w *Worker) run(ctx context.Context, mode func(ctx context.Context, w *Worker, client int)) {
	var wg sync.WaitGroup
	for c := 0; c < w.Cfg.Clients; c++ {
		wg.Go(func() { mode(ctx, w, c) })
	}
	wg.Wait()
}

// Recorded returns a Store for logical process client that records every
// lease operation, and the owner identity that process uses.
func (w *Worker) Recorded(client int) (leasehold.Store, string) {
	base := fmt.Sprintf("%s-%d", w.Cfg.ID, client)
	return newRecStore(w.Store, w.Emit, w.Cfg.ID, base, &w.seq), base
}

// Rand returns a random source for logical process client.
func (w *Worker) Rand(client int) *rand.Rand {
	return rand.New(rand.NewPCG(w.Cfg.Seed, uint64(client)))
}

// Logf emits a log event.
func (w *Worker) Logf(format string, args ...any) {
	w.Emit(Event{E: "log", T: Mono(), Msg: fmt.Sprintf(format, args...)})
}

// errStale is the oracle's refusal of a stale token.
var errStale = fmt.Errorf("oracle: stale token")

// OracleRead reads key's counter under token.
func (w *Worker) OracleRead(ctx context.Context, proc, key string, token uint64) (int64, error) {
	q := url.Values{"k": {key}, "p": {proc}, "tok": {strconv.FormatUint(token, 10)}, "pid": {strconv.Itoa(w.pid)}}
	resp, err := w.oracle(ctx, "/read", q)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct{ Value int64 }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	return body.Value, nil
}

// OracleWrite writes read+1 to key's counter under token, telling the
// oracle the writer's local deadline (Mono).
func (w *Worker) OracleWrite(ctx context.Context, proc, key string, token uint64, read, deadline int64) error {
	q := url.Values{"k": {key}, "p": {proc}, "tok": {strconv.FormatUint(token, 10)}, "pid": {strconv.Itoa(w.pid)},
		"read": {strconv.FormatInt(read, 10)}, "deadline": {strconv.FormatInt(deadline, 10)}}
	resp, err := w.oracle(ctx, "/write", q)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (w *Worker) oracle(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Cfg.Oracle+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return resp, nil
	case http.StatusConflict:
		resp.Body.Close()
		return nil, errStale
	default:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("oracle %s: %s: %s", path, resp.Status, b)
	}
}

// Main is the TestMain of a suite's test binary: the binary is a worker
// or the command line when StartWorkers or StartServe runs it as one (see
// MaybeWorker), else it runs its tests.
func Main(m *testing.M) {
	MaybeWorker()
	os.Exit(m.Run())
}
