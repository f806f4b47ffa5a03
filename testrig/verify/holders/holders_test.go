package holders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) {
	maybeHolder()  // the stopped holder of the Go client's "stop" rows
	maybeCommand() // the command of the `leasehold run` rows
	verify.Main(m) // the lease server (StartServe) and workers
}

// The bounds R17 states, in both tiers.
const (
	// lossBound: a holder declares its lease lost at most this long after
	// its local deadline (or after it was continued, if it was stopped
	// past the deadline), or after the store refused a renewal.
	lossBound = 500 * time.Millisecond
	// callBound: a call given a timeout returns at most this long after it
	// (the Python client's contract, docs/clients.md, says 0.5 s too).
	callBound = 500 * time.Millisecond
)

// life is how long after t0 a lease of this TTL is believed held by a
// holder with the default drift settings: TTL·(1−ρ) − ε.
func life(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*leasehold.DefaultDriftRate) - leasehold.DefaultDriftMargin
}

// ms renders a duration in milliseconds, for notes.
func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

// signed renders a signed offset: "12 ms after" or "40 ms before".
func signed(d time.Duration, after, before string) string {
	if d < 0 {
		return ms(-d) + " " + before
	}
	return ms(d) + " " + after
}

// row is one row of the report, one surface × fault: what was measured
// (notes) and what was found wrong (bad). In control mode (expectBad) a
// violation does not fail the test: the caller wants to see one.
type row struct {
	t         testing.TB
	surface   string // "client(server)", "run(redis)", ...
	fault     string // "hang", "late", "force", "stop", ...
	ops       int
	faults    int
	expectBad bool

	mu     sync.Mutex
	bad    []string
	keys   []string          // figures' keys, in the order first noted
	notes  map[string]string // key → the worst round's figure
	worst  map[string]int64
	rounds int
}

func newRow(t testing.TB, surface, fault string) *row {
	return &row{t: t, surface: surface, fault: fault}
}

func (r *row) name() string { return r.surface + " " + r.fault }

// violation records a failed check (and fails the test unless expectBad).
func (r *row) violation(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.bad = append(r.bad, msg)
	r.mu.Unlock()
	if r.expectBad {
		r.t.Logf("%s: violation (expected in this control): %s", r.name(), msg)
		return
	}
	r.t.Errorf("%s: %s", r.name(), msg)
}

// note records a measured figure for the row's note under key: of the
// rounds' figures with one key the note keeps the one with the highest v
// (the worst: the latest loss, the longest overrun, ...), or the first.
func (r *row) note(key string, v int64, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notes == nil {
		r.notes, r.worst = map[string]string{}, map[string]int64{}
	}
	if w, ok := r.worst[key]; ok && v <= w {
		return
	} else if !ok {
		r.keys = append(r.keys, key)
	}
	r.notes[key], r.worst[key] = fmt.Sprintf(format, args...), v
}

// round counts a round of the row.
func (r *row) round() {
	r.mu.Lock()
	r.rounds++
	r.mu.Unlock()
}

func (r *row) op(n int) {
	r.mu.Lock()
	r.ops += n
	r.mu.Unlock()
}

func (r *row) violations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bad)
}

// report writes the row (suite R17).
func (r *row) report() {
	r.t.Helper()
	r.mu.Lock()
	checker := "ok"
	if len(r.bad) > 0 {
		checker = "violations"
	}
	var notes []string
	if r.rounds > 1 {
		notes = append(notes, fmt.Sprintf("%d rounds, the worst of each figure", r.rounds))
	}
	for _, k := range r.keys {
		notes = append(notes, r.notes[k])
	}
	if len(r.bad) > 0 {
		notes = append(notes, "first violation: "+r.bad[0])
	}
	rw := verify.Row{Suite: "R17", Store: r.name(), Ops: r.ops, Faults: r.faults, Violations: len(r.bad), Checker: checker,
		Note: strings.Join(notes, "; ")}
	r.mu.Unlock()
	verify.Report(r.t, rw)
}

// timed is a call made with a timeout during a fault, and how long it took.
type timed struct {
	what    string
	timeout time.Duration
	took    time.Duration
	err     error
}

// timer runs calls with timeouts and checks that each returned within its
// timeout + callBound.
type timer struct {
	mu    sync.Mutex
	calls []timed
	wg    sync.WaitGroup
}

// call runs f with a context that ends after timeout, in the background.
func (tm *timer) call(what string, timeout time.Duration, f func(ctx context.Context) error) {
	tm.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		tm.mu.Lock()
		tm.calls = append(tm.calls, timed{what: what, timeout: timeout, took: time.Since(start), err: err})
		tm.mu.Unlock()
	})
}

// record adds a call timed elsewhere.
func (tm *timer) record(what string, timeout, took time.Duration, err error) {
	tm.mu.Lock()
	tm.calls = append(tm.calls, timed{what: what, timeout: timeout, took: took, err: err})
	tm.mu.Unlock()
}

// check waits for the calls and records them on r: each must return within
// its timeout + callBound (a row figure says by how much the latest one
// overran its timeout).
func (tm *timer) check(r *row) {
	tm.wg.Wait()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if len(tm.calls) == 0 {
		return
	}
	r.op(len(tm.calls))
	worst := tm.calls[0]
	for _, c := range tm.calls {
		if c.took-c.timeout > worst.took-worst.timeout {
			worst = c
		}
		if c.took > c.timeout+callBound {
			r.violation("%s with a %s timeout returned after %s (bound: timeout + %s; error: %v)", c.what, ms(c.timeout), ms(c.took), ms(callBound), c.err)
		}
	}
	r.note("timeouts", int64(worst.took-worst.timeout), "timeouts: %d calls, the latest returned %s its timeout (%s, bound +%s)", len(tm.calls),
		signed(worst.took-worst.timeout, "after", "before"), worst.what, ms(callBound))
}

// oracle is a fenced resource (verify.Oracle) and a client of it: a write
// with a token lower than one it has accepted is refused.
type oracle struct {
	o  *verify.Oracle
	hc *http.Client
}

func newOracle(t testing.TB) *oracle {
	o := verify.MustOracle(t, true, nil)
	t.Cleanup(func() { o.Close() })
	return &oracle{o: o, hc: &http.Client{Timeout: 10 * time.Second}}
}

// errStale is the oracle's refusal of a stale token.
var errStale = errors.New("refused: stale token")

// write reads key's counter under token and writes it plus one; it
// returns errStale if the resource refused the token.
func (o *oracle) write(ctx context.Context, base, key, proc string, token uint64) error {
	return oracleWrite(ctx, o.hc, base, key, proc, token)
}

func oracleWrite(ctx context.Context, hc *http.Client, base, key, proc string, token uint64) error {
	q := url.Values{"k": {key}, "p": {proc}, "tok": {strconv.FormatUint(token, 10)}, "pid": {"0"}}
	var read int64
	for _, path := range []string{"/read", "/write"} {
		if path == "/write" {
			q.Set("read", strconv.FormatInt(read, 10))
			q.Set("deadline", "0")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path+"?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusNoContent:
		case http.StatusConflict:
			return errStale
		default:
			return fmt.Errorf("oracle %s: %s: %s", path, resp.Status, body)
		}
		if path == "/read" {
			var v struct {
				Value int64 `json:"value"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return fmt.Errorf("oracle read: %v: %s", err, body)
			}
			read = v.Value
		}
	}
	return nil
}

// checkOracle records the oracle's own findings on r.
func (o *oracle) check(r *row) {
	res := o.o.Check()
	if n := res.Violations(); n > 0 {
		r.violation("the fenced resource found %d violations: %+v", n, res)
	}
}
