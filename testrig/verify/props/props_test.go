package props

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/verify"
)

// maxSteps bounds the actions of one check (the pass figure is 1,000
// checks of at most 100 steps per store).
const maxSteps = 100

// TestMain sets rapid's number of checks to the tier's (100, or 1,000 with
// LEASEHOLD_LONG=1) unless -rapid.checks or $RAPID_CHECKS asks for another.
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set["rapid.checks"] && !env {
		if err := flag.Set("rapid.checks", strconv.Itoa(verify.Size(100, 1000))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// target is a store under test and what it documents.
type target struct {
	name string
	// open opens the store on clk. Durable stores keep their files in dir;
	// boot numbers simulated reboots.
	open         func(clk *clock.Fake, dir string, boot int) (leasehold.Store, error)
	restart      restartKind
	maxRestarts  int  // per check
	reboot       bool // the store can be told it is a new boot (SQLite)
	bootClock    bool // expiry runs on the boot-time clock, which a suspend moves
	globalTokens bool // one token counter for every name
	list         bool // List is under test
	strictReads  bool // Get and List validate their arguments
}

var targets = []target{
	{
		name: "memory",
		open: func(clk *clock.Fake, _ string, _ int) (leasehold.Store, error) {
			return memory.New(memory.WithClock(clk)), nil
		},
		list: true, strictReads: true,
	},
	{
		name: "sqlite",
		open: func(clk *clock.Fake, dir string, boot int) (leasehold.Store, error) {
			return sqlite.Open(filepath.Join(dir, "leases.db"), sqlite.WithClock(clk),
				sqlite.WithBootID(fmt.Sprintf("props-boot-%d", boot)))
		},
		restart: restartKeep, maxRestarts: maxSteps, reboot: true, bootClock: true, list: true, strictReads: true,
	},
	{
		name: "engine",
		open: func(clk *clock.Fake, dir string, _ int) (leasehold.Store, error) {
			// Tombstones are kept for longer than any check's clock runs,
			// so that a repeated release is judged by the model's rule
			// (the engine forgets released grants after TombstoneTTL).
			// The restarts here are process restarts, which records
			// written without fdatasync survive (NoSync's documented
			// guarantee); the default tier skips the syncs to save time,
			// the long tier runs the production path with them.
			e, err := server.OpenEngine(server.EngineConfig{
				Dir: dir, NoSync: !verify.Long(), Clock: clk, TombstoneTTL: 10000 * time.Hour,
			})
			if err != nil {
				return nil, err
			}
			return server.StoreOf(e), nil
		},
		// Each open of the engine's log writes a 64 MiB segment and
		// reads back every earlier one (slow under the race detector):
		// at most one restart per check in the default tier, three in
		// the long one.
		restart: restartRecover, maxRestarts: verify.Size(1, 3), globalTokens: true, list: true, strictReads: true,
	},
}

// tally counts what the checks of one target did.
type tally struct {
	checks, steps, calls, jumps, suspends, restarts, reboots atomic.Int64

	mu   sync.Mutex
	seen map[string]int // the model's rules, by how often they were exercised
}

func (tl *tally) add(seen map[string]int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.seen == nil {
		tl.seen = map[string]int{}
	}
	for k, v := range seen {
		tl.seen[k] += v
	}
}

func (tl *tally) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return verify.CountsNote(tl.seen)
}

func (tl *tally) faults() int64 {
	return tl.jumps.Load() + tl.suspends.Load() + tl.restarts.Load() + tl.reboots.Load()
}

// TestR1 runs the property on every store, in parallel.
func TestR1(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			var tl tally
			base := t.TempDir()
			start := time.Now()
			rapid.Check(t, property(tg, &tl, base))
			t.Logf("rules exercised: %s", &tl)
			verify.Report(t, verify.Row{
				Suite: "R1", Store: tg.name,
				Ops: int(tl.steps.Load()), Faults: int(tl.faults()), Violations: 0, Checker: "ok",
				Note: fmt.Sprintf("%d checks × ≤%d steps, %d store calls; %d clock jumps, %d suspends, %d restarts, %d reboots; %s",
					tl.checks.Load(), maxSteps, tl.calls.Load(), tl.jumps.Load(), tl.suspends.Load(),
					tl.restarts.Load(), tl.reboots.Load(), time.Since(start).Round(time.Millisecond)),
			})
		})
	}
}

// property is one check: a fresh store and model, then up to maxSteps
// random actions, each answer compared with the model and the whole state
// read back after each step.
func property(tg target, tl *tally, base string) func(*rapid.T) {
	return func(t *rapid.T) {
		tl.checks.Add(1)
		r := &run{t: t, tg: tg, tl: tl, ctx: context.Background(), m: newModel(tg.globalTokens)}
		defer func() { tl.add(r.m.seen) }()
		r.clk = clock.NewFake(time.Unix(1_700_000_000, 0))
		if tg.restart != restartNone {
			dir, err := os.MkdirTemp(base, "check")
			if err != nil {
				t.Fatal(err)
			}
			r.dir = dir
			defer os.RemoveAll(dir)
		}
		s, err := tg.open(r.clk, r.dir, r.boot)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		r.s = s
		defer func() { r.s.Close() }()

		actions := tg.actions()
		// rapid favours small numbers: count down from maxSteps so that
		// most checks run long (a failing check stops at its failure, so
		// shrinking is not hurt).
		steps := maxSteps - rapid.IntRange(0, maxSteps-1).Draw(t, "steps short of the maximum")
		for r.step = 1; r.step <= steps; r.step++ {
			name := rapid.SampledFrom(actions).Draw(t, "action")
			allActions[name](r)
			tl.steps.Add(1)
			r.checkState()
		}
	}
}

// actions lists the action names for tg, each as often as its weight.
func (tg target) actions() []string {
	weights := []struct {
		name string
		n    int
		on   bool
	}{
		// rapid draws the first and last entries more often than the
		// others: the common actions go there, the rare ones between.
		{"acquire", 10, true},
		{"renew", 4, true},
		{"get", 2, true},
		{"restart", 1, tg.restart != restartNone},
		{"suspend", 1, true},
		{"reboot", 1, tg.reboot},
		{"invalid", 3, true},
		{"list", 2, tg.list},
		{"release", 4, true},
		{"advance", 6, true},
	}
	var out []string
	for _, w := range weights {
		for i := 0; w.on && i < w.n; i++ {
			out = append(out, w.name)
		}
	}
	return out
}

var allActions = map[string]func(*run){
	"acquire": (*run).acquire,
	"renew":   (*run).renew,
	"release": (*run).release,
	"get":     (*run).get,
	"list":    (*run).list,
	"invalid": (*run).invalid,
	"advance": (*run).advance,
	"suspend": (*run).suspend,
	"restart": (*run).restart,
	"reboot":  (*run).rebootAction,
}

// The small worlds the actions draw from: names that share prefixes (and
// one that is not ASCII), a few owners and request ids.
var (
	names      = []string{"a", "a/b", "ab", "b", "é"}
	prefixes   = []string{"", "a", "a/", "ab", "b", "é", "z"}
	owners     = []string{"o1", "o2", "o3"}
	requestIDs = []string{"", "r1", "r2"}
	datas      = [][]byte{nil, []byte("x"), []byte("yy")}

	genName   = rapid.SampledFrom(names)
	genPrefix = rapid.SampledFrom(prefixes)
	genOwner  = rapid.SampledFrom(owners)
	genReqID  = rapid.SampledFrom(requestIDs)
	genData   = rapid.SampledFrom(datas)
)

// run is the state of one check.
type run struct {
	t    *rapid.T
	tg   target
	tl   *tally
	ctx  context.Context
	clk  *clock.Fake
	dir  string
	boot int
	s    leasehold.Store
	m    *model
	step int

	restarts int
}

func (r *run) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d (model clock %s): %s", r.step, r.m.now, fmt.Sprintf(format, args...))
}

// failIf fails the run with msg, a model check's complaint, unless it is
// empty.
func (r *run) failIf(msg string) {
	r.t.Helper()
	if msg != "" {
		r.fail("%s", msg)
	}
}

func (r *run) logf(format string, args ...any) {
	r.t.Logf("step %d at %s: %s", r.step, r.m.now, fmt.Sprintf(format, args...))
}

func (r *run) call() { r.tl.calls.Add(1) }

func drawTTL(t *rapid.T) time.Duration {
	switch rapid.IntRange(0, 4).Draw(t, "ttl kind") {
	case 0:
		return leasehold.MinTTL
	case 1:
		return time.Duration(rapid.IntRange(10, 1000).Draw(t, "ttl ms")) * time.Millisecond
	case 2:
		return time.Duration(rapid.IntRange(1, 60).Draw(t, "ttl s")) * time.Second
	case 3:
		return time.Duration(rapid.Int64Range(int64(leasehold.MinTTL), int64(time.Minute)).Draw(t, "ttl ns"))
	default:
		return leasehold.MaxTTL
	}
}

func (r *run) acquire() {
	req := leasehold.AcquireRequest{
		Name: genName.Draw(r.t, "name"), Owner: genOwner.Draw(r.t, "owner"),
		RequestID: genReqID.Draw(r.t, "request id"), TTL: drawTTL(r.t), Data: genData.Draw(r.t, "data"),
	}
	// Often retry as the latest grant's owner and request id (a retried
	// acquire while it is live, a new grant after it expired).
	if g := r.m.leases[req.Name]; g != nil && g.reqID != "" && rapid.Bool().Draw(r.t, "as a retry") {
		req.Owner, req.RequestID = g.owner, g.reqID
	}
	r.logf("acquire %q by %s req %q ttl %s data %q", req.Name, req.Owner, req.RequestID, req.TTL, req.Data)
	r.call()
	rec, err := r.s.TryAcquire(r.ctx, req)
	r.failIf(r.m.checkAcquire(req, rec, err))
}

// drawHolder picks an owner and token for a renewal or release of name:
// the latest grant's, or one of several wrong ones.
func (r *run) drawHolder(name string) (string, uint64) {
	g := r.m.leases[name]
	owner, token := "o1", uint64(1)
	if g != nil {
		owner, token = g.owner, g.token
	}
	switch rapid.IntRange(0, 4).Draw(r.t, "who") {
	case 0, 1: // the latest grant's holder
	case 2: // another owner with the right token
		for _, o := range owners {
			if o != owner {
				owner = o
				break
			}
		}
	case 3: // the right owner with an older or newer token
		if rapid.Bool().Draw(r.t, "older") && token > 1 {
			token--
		} else {
			token++
		}
	default:
		owner, token = genOwner.Draw(r.t, "any owner"), rapid.Uint64Range(1, 20).Draw(r.t, "any token")
	}
	return owner, token
}

func (r *run) renew() {
	name := genName.Draw(r.t, "name")
	owner, token := r.drawHolder(name)
	ttl := drawTTL(r.t)
	r.logf("renew %q by %s token %d ttl %s", name, owner, token, ttl)
	r.call()
	err := r.s.Renew(r.ctx, name, owner, token, ttl)
	r.failIf(r.m.checkRenew(name, owner, token, ttl, err))
}

func (r *run) release() {
	name := genName.Draw(r.t, "name")
	owner, token := r.drawHolder(name)
	r.logf("release %q by %s token %d", name, owner, token)
	r.call()
	err := r.s.Release(r.ctx, name, owner, token)
	r.failIf(r.m.checkRelease(name, owner, token, err))
}

func (r *run) get() {
	name := genName.Draw(r.t, "name")
	r.call()
	rec, err := r.s.Get(r.ctx, name)
	r.failIf(r.m.checkGet(name, rec, err))
}

func (r *run) list() {
	prefix := genPrefix.Draw(r.t, "prefix")
	r.call()
	recs, err := r.s.List(r.ctx, prefix)
	r.failIf(r.m.checkList(prefix, recs, err))
}

// Arguments every store must refuse with an *InvalidError.
var (
	badNames  = []string{"", "a\x00b", "tab\tname", "line\n", "\xff\xfe", strings.Repeat("n", leasehold.MaxNameLen+1)}
	badOwners = []string{"", "o\r", strings.Repeat("o", leasehold.MaxOwnerLen+1)}
	badReqIDs = []string{"r\x7f", strings.Repeat("r", leasehold.MaxRequestIDLen+1)}
	badTTLs   = []time.Duration{0, -1, -time.Second, leasehold.MinTTL - 1, leasehold.MaxTTL + 1, 1 << 62}
	bigData   = make([]byte, leasehold.MaxDataLen+1)
)

// invalid sends a request with one bad argument: it must be refused as
// invalid, and (checked after the step) change nothing.
func (r *run) invalid() {
	name := genName.Draw(r.t, "name")
	owner, token := r.drawHolder(name)
	req := leasehold.AcquireRequest{Name: name, Owner: owner, TTL: time.Second}
	kinds := []string{"acquire name", "acquire owner", "acquire request id", "acquire ttl", "acquire data",
		"renew ttl", "renew token", "renew name", "release token", "release owner", "release name"}
	if r.tg.strictReads {
		kinds = append(kinds, "get name", "list prefix")
	}
	kind := rapid.SampledFrom(kinds).Draw(r.t, "invalid")
	var err error
	r.call()
	switch kind { // the acquire kinds set one bad field of req, sent after the switch
	case "acquire name":
		req.Name = rapid.SampledFrom(badNames).Draw(r.t, "bad name")
	case "acquire owner":
		req.Owner = rapid.SampledFrom(badOwners).Draw(r.t, "bad owner")
	case "acquire request id":
		req.RequestID = rapid.SampledFrom(badReqIDs).Draw(r.t, "bad request id")
	case "acquire ttl":
		req.TTL = rapid.SampledFrom(badTTLs).Draw(r.t, "bad ttl")
	case "acquire data":
		req.Data = bigData
	case "renew ttl":
		err = r.s.Renew(r.ctx, name, owner, token, rapid.SampledFrom(badTTLs).Draw(r.t, "bad ttl"))
	case "renew token":
		err = r.s.Renew(r.ctx, name, owner, 0, time.Second)
	case "renew name":
		err = r.s.Renew(r.ctx, rapid.SampledFrom(badNames).Draw(r.t, "bad name"), owner, token, time.Second)
	case "release token":
		err = r.s.Release(r.ctx, name, owner, 0)
	case "release owner":
		err = r.s.Release(r.ctx, name, rapid.SampledFrom(badOwners).Draw(r.t, "bad owner"), token)
	case "release name":
		err = r.s.Release(r.ctx, rapid.SampledFrom(badNames).Draw(r.t, "bad name"), owner, token)
	case "get name":
		_, err = r.s.Get(r.ctx, rapid.SampledFrom(badNames).Draw(r.t, "bad name"))
	case "list prefix":
		_, err = r.s.List(r.ctx, rapid.SampledFrom(badNames[1:]).Draw(r.t, "bad prefix")) // "" lists all
	}
	if strings.HasPrefix(kind, "acquire ") {
		_, err = r.s.TryAcquire(r.ctx, req)
	}
	r.logf("invalid %s: %v", kind, err)
	if got := classify(err); got != ansInvalid {
		r.fail("%s: answered %s, want an *InvalidError", kind, got)
	}
	r.m.seen["invalid refused"]++
}

// advance jumps the fake clock: a little, a lot (several TTLs), or onto,
// just before or just after a live lease's expiry.
func (r *run) advance() {
	var d time.Duration
	switch rapid.IntRange(0, 3).Draw(r.t, "jump kind") {
	case 0:
		d = time.Duration(rapid.IntRange(1, 50).Draw(r.t, "jump ms")) * time.Millisecond
	case 1:
		d = time.Duration(rapid.IntRange(1, 5000).Draw(r.t, "jump ms")) * time.Millisecond
	case 2:
		d = time.Duration(rapid.IntRange(1, 180).Draw(r.t, "jump s")) * time.Second
	default:
		exp := r.m.expiries()
		if len(exp) == 0 {
			d = time.Millisecond
			break
		}
		at := rapid.SampledFrom(exp).Draw(r.t, "expiry") + time.Duration(rapid.IntRange(-1, 1).Draw(r.t, "off by ns"))
		d = max(at-r.m.now, time.Nanosecond)
	}
	r.logf("advance %s", d)
	r.clk.Advance(d)
	r.m.now += d
	r.tl.jumps.Add(1)
}

// suspend simulates a suspended machine: the boot-time reading moves, the
// monotonic one does not. Only stores that judge expiry on the boot clock
// see time pass.
func (r *run) suspend() {
	d := time.Duration(rapid.IntRange(1, 120_000).Draw(r.t, "suspend ms")) * time.Millisecond
	r.logf("suspend %s", d)
	r.clk.Suspend(d)
	if r.tg.bootClock {
		r.m.now += d
	}
	r.tl.suspends.Add(1)
}

// restart closes the store and opens its files again (up to the target's
// limit per check; beyond it the step reads the state instead).
func (r *run) restart() {
	if r.restarts >= r.tg.maxRestarts {
		r.logf("restart (over the limit: skipped)")
		return
	}
	r.restarts++
	r.logf("restart")
	if err := r.s.Close(); err != nil {
		r.fail("close: %v", err)
	}
	s, err := r.tg.open(r.clk, r.dir, r.boot)
	if err != nil {
		r.fail("reopen: %v", err)
	}
	r.s = s
	r.tl.restarts.Add(1)
	for _, name := range r.m.restart(r.tg.restart) {
		r.call()
		rec, err := r.s.Get(r.ctx, name)
		if msg := r.m.settle(name, rec, err); msg != "" {
			r.fail("%s %q", msg, name)
		}
	}
}

// rebootAction reopens the store as after a reboot of the machine.
func (r *run) rebootAction() {
	r.logf("reboot")
	if err := r.s.Close(); err != nil {
		r.fail("close: %v", err)
	}
	r.boot++
	s, err := r.tg.open(r.clk, r.dir, r.boot)
	if err != nil {
		r.fail("reopen after reboot: %v", err)
	}
	r.s = s
	r.m.reboot()
	r.tl.reboots.Add(1)
}

// checkState reads the whole state back and compares it with the model:
// List("") when List is under test (it returns every live lease's
// record), else a Get of every name.
func (r *run) checkState() {
	if r.tg.list {
		r.call()
		recs, err := r.s.List(r.ctx, "")
		if msg := r.m.checkList("", recs, err); msg != "" {
			r.fail("state check: %s", msg)
		}
		return
	}
	for _, name := range names {
		r.call()
		rec, err := r.s.Get(r.ctx, name)
		if msg := r.m.checkGet(name, rec, err); msg != "" {
			r.fail("state check: %s", msg)
		}
	}
}
