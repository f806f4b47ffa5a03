package props

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/testrig/brokenstore"
	"github.com/leasehold/leasehold/testrig/verify"
)

// captureTB is a rapid.TB that records a failure instead of failing the
// test, so that a test can assert that rapid finds one.
type captureTB struct {
	name string

	mu     sync.Mutex
	failed bool
	out    []string
}

var _ rapid.TB = (*captureTB)(nil)

func (c *captureTB) Helper()      {}
func (c *captureTB) Name() string { return c.name }
func (c *captureTB) Logf(format string, args ...any) {
	c.Log(fmt.Sprintf(format, args...))
}
func (c *captureTB) Log(args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, fmt.Sprint(args...))
}
func (c *captureTB) Errorf(format string, args ...any) { c.Logf(format, args...); c.Fail() }
func (c *captureTB) Error(args ...any)                 { c.Log(args...); c.Fail() }
func (c *captureTB) Fatalf(format string, args ...any) { c.Errorf(format, args...) }
func (c *captureTB) Fatal(args ...any)                 { c.Error(args...) }

// FailNow records the failure; rapid calls it last, so it need not stop
// the goroutine.
func (c *captureTB) FailNow() { c.Fail() }
func (c *captureTB) Fail() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed = true
}
func (c *captureTB) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// rapid calls Skip only from fuzz targets; treat it as a failure of the
// harness.
func (c *captureTB) Skipf(format string, args ...any) { c.Errorf("skip: "+format, args...) }
func (c *captureTB) Skip(args ...any)                 { c.Error(append([]any{"skip: "}, args...)...) }
func (c *captureTB) SkipNow()                         { c.Error("skip") }

// failure returns the line of the captured output that says what the
// model objected to.
func (c *captureTB) failure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.out {
		if strings.Contains(l, "[rapid] failed") || strings.Contains(l, "[rapid] panic") {
			first, _, _ := strings.Cut(l, "\n")
			return first
		}
	}
	if len(c.out) > 0 {
		return c.out[0]
	}
	return ""
}

// withRapidFlags sets rapid's flags for the duration of fn. It must not
// run while other checks do (it is called from a sequential test; the
// parallel ones start after it).
func withRapidFlags(t *testing.T, set map[string]string, fn func()) {
	t.Helper()
	old := map[string]string{}
	for k, v := range set {
		f := flag.Lookup(k)
		if f == nil {
			t.Fatalf("rapid has no flag %s", k)
		}
		old[k] = f.Value.String()
		if err := flag.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for k, v := range old {
			flag.Set(k, v)
		}
	}()
	fn()
}

// TestR1CatchesBrokenStores is the negative control: the same property,
// run on the deliberately broken stores of package brokenstore, must fail
// for every bug. (brokenstore's List is a stub, so List is left out.)
func TestR1CatchesBrokenStores(t *testing.T) {
	caught := 0
	var checks int64
	withRapidFlags(t, map[string]string{
		"rapid.nofailfile": "true", // no fail files in testdata for expected failures
		"rapid.shrinktime": "5s",
	}, func() {
		for _, bug := range brokenstore.Bugs {
			tg := target{
				name: "brokenstore-" + bug.String(),
				open: func(clk *clock.Fake, _ string, _ int) (leasehold.Store, error) {
					return brokenstore.New(bug, brokenstore.WithClock(clk)), nil
				},
			}
			var tl tally
			tb := &captureTB{name: t.Name() + "/" + bug.String()}
			start := time.Now()
			rapid.Check(tb, property(tg, &tl, t.TempDir()))
			checks += tl.checks.Load()
			if !tb.Failed() {
				t.Errorf("%s: the property passed %d checks; the bug went unnoticed", bug, tl.checks.Load())
				continue
			}
			caught++
			t.Logf("%s caught (%s, %d runs incl. shrinking): %s", bug, time.Since(start).Round(time.Millisecond), tl.checks.Load(), tb.failure())
		}
	})
	verify.Report(t, verify.Row{
		Suite: "R1-control", Store: "brokenstore", Ops: int(checks), Violations: caught,
		Checker: fmt.Sprintf("caught %d/%d", caught, len(brokenstore.Bugs)),
		Note:    "the R1 property on stores with deliberate bugs",
	})
}
