package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// The compare-and-set register model that record histories are checked
// against, one register per key (porcupine partitions a history by key).
// The state is whether the key exists, its value and its version. Versions
// are opaque, but every write must give the key a version greater than all
// its earlier ones, also across a delete: the state keeps the version of a
// deleted record as the floor for the next one. A put or delete succeeds
// exactly when its expected version is the current one (0: absent); a
// conflict must name the version found, unless the store is allowed not to
// know it; an add turns a counter (absent counts as 0) into old+delta.
//
// An operation that returned an error other than a conflict, not-found or
// invalid answer is indeterminate: it may or may not have taken effect, and
// if it did, the version it wrote is unknown (above the one it replaced);
// the model then keeps only that lower bound until an answer pins the
// version down again. Such a client is retired, as in the lease histories.

type recOpKind int

const (
	recGet recOpKind = iota
	recPut
	recDelete
	recAdd
)

func (k recOpKind) String() string {
	return [...]string{"get", "put", "delete", "add"}[k]
}

// recInput is what a client asked.
type recInput struct {
	Kind   recOpKind
	Key    string
	Value  string // put
	Expect uint64 // put, delete
	Delta  int64  // add
}

type recResult int

const (
	recOK       recResult = iota
	recConflict           // *ConflictError
	recNotFound           // ErrNotFound
	recInvalid            // *InvalidError
	recUnknown            // indeterminate
)

// recOutput is what it got back.
type recOutput struct {
	Result      recResult
	Value       string // get; add (the new counter value)
	Version     uint64 // get, put, add: the version read or written
	Actual      uint64 // conflict: the version the store reports having found
	CheckActual bool   // conflict: whether the model holds the store to Actual
}

type recState struct {
	Exists bool
	Value  string
	// Version is the record's version while it exists, and the version of
	// the last deleted record (0 if none) while it does not. With Above,
	// the true version is unknown and greater than Version.
	Version uint64
	Above   bool
}

// is reports whether the current version may be v.
func (s recState) is(v uint64) bool {
	if s.Above {
		return v > s.Version
	}
	return v == s.Version
}

// isNot reports whether the current version may differ from v.
func (s recState) isNot(v uint64) bool { return s.Above || s.Version != v }

// matches reports whether a condition on expect may hold.
func (s recState) matches(expect uint64) bool {
	if expect == 0 {
		return !s.Exists
	}
	return s.Exists && s.is(expect)
}

// mismatches reports whether a condition on expect may fail.
func (s recState) mismatches(expect uint64) bool {
	if expect == 0 {
		return s.Exists
	}
	return !s.Exists || s.isNot(expect)
}

// pinned is the state with its version known to be v (which s.is(v)).
func (s recState) pinned(v uint64) recState {
	s.Version, s.Above = v, false
	return s
}

// counterAfter is the value an add of delta leaves, if it is legal.
func (s recState) counterAfter(delta int64) (int64, bool) {
	old := int64(0)
	if s.Exists {
		n, err := strconv.ParseInt(s.Value, 10, 64)
		if err != nil {
			return 0, false
		}
		old = n
	}
	n, err := storekit.AddInt64("", old, delta)
	return n, err == nil
}

func stepRecords(st, in, out interface{}) []interface{} {
	s, i, o := st.(recState), in.(recInput), out.(recOutput)
	if o.Result == recUnknown {
		res := []interface{}{s}
		if next, ok := recUnknownEffect(s, i); ok {
			res = append(res, next)
		}
		return res
	}
	// conflict checks a conflict answer: the condition must be able to
	// fail, and the version reported must be one the record may have.
	conflict := func() []interface{} {
		if !s.mismatches(i.Expect) {
			return nil
		}
		if !o.CheckActual {
			return []interface{}{s}
		}
		switch {
		case o.Actual == i.Expect:
			return nil
		case o.Actual == 0:
			if s.Exists {
				return nil
			}
			return []interface{}{s}
		case !s.Exists || !s.is(o.Actual):
			return nil
		}
		return []interface{}{s.pinned(o.Actual)}
	}
	switch i.Kind {
	case recGet:
		switch o.Result {
		case recOK:
			if !s.Exists || s.Value != o.Value || !s.is(o.Version) {
				return nil
			}
			return []interface{}{s.pinned(o.Version)}
		case recNotFound:
			if s.Exists {
				return nil
			}
			return []interface{}{s}
		}
	case recPut:
		switch o.Result {
		case recOK:
			if !s.matches(i.Expect) || o.Version <= s.Version || o.Version <= i.Expect {
				return nil
			}
			return []interface{}{recState{Exists: true, Value: i.Value, Version: o.Version}}
		case recConflict:
			return conflict()
		}
	case recDelete:
		switch o.Result {
		case recOK:
			if i.Expect == 0 || !s.matches(i.Expect) {
				return nil
			}
			return []interface{}{recState{Version: i.Expect}}
		case recNotFound:
			if s.Exists {
				return nil
			}
			return []interface{}{s}
		case recConflict:
			if !s.Exists {
				return nil // an absent key is ErrNotFound
			}
			return conflict()
		}
	case recAdd:
		n, legal := s.counterAfter(i.Delta)
		switch o.Result {
		case recOK:
			if !legal || o.Value != strconv.FormatInt(n, 10) || o.Version <= s.Version {
				return nil
			}
			return []interface{}{recState{Exists: true, Value: o.Value, Version: o.Version}}
		case recInvalid:
			if legal {
				return nil
			}
			return []interface{}{s}
		}
	}
	return nil
}

// recUnknownEffect is the state after an indeterminate operation that did
// take effect.
func recUnknownEffect(s recState, i recInput) (recState, bool) {
	switch i.Kind {
	case recPut:
		if !s.matches(i.Expect) {
			return s, false
		}
		floor := s.Version
		if i.Expect != 0 {
			floor = i.Expect
		}
		return recState{Exists: true, Value: i.Value, Version: floor, Above: true}, true
	case recDelete:
		if i.Expect == 0 || !s.matches(i.Expect) {
			return s, false
		}
		return recState{Version: i.Expect}, true
	case recAdd:
		n, legal := s.counterAfter(i.Delta)
		if !legal {
			return s, false
		}
		return recState{Exists: true, Value: strconv.FormatInt(n, 10), Version: s.Version, Above: true}, true
	}
	return s, false
}

// RecordModel is the porcupine model of versioned records, partitioned by
// key.
func RecordModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionBy(func(op porcupine.Operation) string { return op.Input.(recInput).Key }),
		Init:      func() []interface{} { return []interface{}{recState{}} },
		Step:      stepRecords,
		Equal: func(a, b interface{}) bool {
			return a.(recState) == b.(recState)
		},
		DescribeOperation: func(in, out interface{}) string { return describeRecOp(in.(recInput), out.(recOutput)) },
		DescribeState: func(st interface{}) string {
			s := st.(recState)
			if !s.Exists {
				return fmt.Sprintf("absent (floor %d)", s.Version)
			}
			above := ""
			if s.Above {
				above = ">"
			}
			return fmt.Sprintf("%q@%s%d", s.Value, above, s.Version)
		},
	}
	return nm.ToModel()
}

func describeRecOp(i recInput, o recOutput) string {
	var call string
	switch i.Kind {
	case recGet:
		call = "get"
	case recPut:
		call = fmt.Sprintf("put %q if %d", i.Value, i.Expect)
	case recDelete:
		call = fmt.Sprintf("delete if %d", i.Expect)
	case recAdd:
		call = fmt.Sprintf("add %d", i.Delta)
	}
	var res string
	switch o.Result {
	case recOK:
		switch i.Kind {
		case recGet, recAdd:
			res = fmt.Sprintf("%q@%d", o.Value, o.Version)
		case recPut:
			res = fmt.Sprintf("ok @%d", o.Version)
		default:
			res = "ok"
		}
	case recConflict:
		res = fmt.Sprintf("conflict (found %d)", o.Actual)
		if !o.CheckActual {
			res = "conflict"
		}
	case recNotFound:
		res = "not found"
	case recInvalid:
		res = "invalid"
	case recUnknown:
		res = "unknown"
	}
	return fmt.Sprintf("%s %s -> %s", i.Key, call, res)
}

// RecordHistoryConfig shapes the randomized histories of
// CheckRecordHistories.
type RecordHistoryConfig struct {
	Histories    int           // independent histories (default 100)
	Keys         int           // keys per history (default 3)
	Clients      int           // clients per history (default 5)
	OpsPerClient int           // operations per client (default 30)
	Parallel     int           // histories run at once (default 8)
	Prefix       string        // key prefix (default "rlinear/")
	Seed         uint64        // 0 = random
	Timeout      time.Duration // checker time per history (default 10s)
	// ActualUnknown: do not hold the store to the Actual of its conflicts
	// (see RecordsHarness.ActualUnknown).
	ActualUnknown bool
}

func (c *RecordHistoryConfig) defaults() {
	orDefault(&c.Histories, 100)
	orDefault(&c.Keys, 3)
	orDefault(&c.Clients, 5)
	orDefault(&c.OpsPerClient, 30)
	orDefault(&c.Parallel, 8)
	orDefault(&c.Prefix, "rlinear/")
	orDefault(&c.Seed, rand.Uint64())
	orDefault(&c.Timeout, 10*time.Second)
}

// RecordHistoryResult counts what the checker said.
type RecordHistoryResult struct {
	Verdicts
	Writes    int // successful puts
	Conflicts int // conflict answers
	Deletes   int // successful deletes
	Adds      int // successful adds
}

func (r RecordHistoryResult) String() string {
	return fmt.Sprintf("seed %d: %d histories, %d ops (%d puts, %d conflicts, %d deletes, %d adds, %d indeterminate): %d ok, %d illegal, %d undecided%s",
		r.Seed, r.Histories, r.Operations, r.Writes, r.Conflicts, r.Deletes, r.Adds, r.Unknown, r.Ok, r.Illegal, r.Undecided, r.relooked())
}

// CheckRecordHistories runs randomized concurrent workloads of gets, puts
// and deletes conditioned on versions, and adds, against store, each
// history on cfg.Keys keys of its own, records every operation with its
// call and return times, and checks each history with porcupine against
// RecordModel.
func CheckRecordHistories(ctx context.Context, store leasehold.RecordStore, cfg RecordHistoryConfig) RecordHistoryResult {
	cfg.defaults()
	var res RecordHistoryResult
	start := time.Now()
	keys := func(h int) []string {
		keys := make([]string, cfg.Keys)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s%d-%d/%d", cfg.Prefix, cfg.Seed%100000, h, i)
		}
		return keys
	}
	historyRun{
		histories: cfg.Histories, clients: cfg.Clients, parallel: cfg.Parallel,
		seed: cfg.Seed, clientStream: 11, timeout: cfg.Timeout, model: RecordModel(),
		client: func(ctx context.Context, h, c int, r *rand.Rand) []porcupine.Operation {
			return runRecClient(ctx, store, keys(h), c, cfg, start, r)
		},
		tally: func(ops []porcupine.Operation) {
			for _, op := range ops {
				i, o := op.Input.(recInput), op.Output.(recOutput)
				switch {
				case o.Result == recUnknown:
					res.Unknown++
				case o.Result == recConflict:
					res.Conflicts++
				case o.Result != recOK:
				case i.Kind == recPut:
					res.Writes++
				case i.Kind == recDelete:
					res.Deletes++
				case i.Kind == recAdd:
					res.Adds++
				}
			}
		},
		describe: func(_ int, ops []porcupine.Operation) string { return describeRecHistory(ops) },
	}.run(ctx, &res.Verdicts)
	return res
}

// describeRecHistory lists a history by key, in call order.
func describeRecHistory(ops []porcupine.Operation) string {
	ops = append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(ops, func(a, b int) bool {
		ka, kb := ops[a].Input.(recInput).Key, ops[b].Input.(recInput).Key
		if ka != kb {
			return ka < kb
		}
		return ops[a].Call < ops[b].Call
	})
	s := fmt.Sprintf("history (%d ops):", len(ops))
	for _, op := range ops {
		ret := fmt.Sprintf("%8.3fms", float64(op.Return)/1e6)
		if op.Return >= 1<<62 {
			ret = "       never"
		}
		s += fmt.Sprintf("\n  c%d [%8.3fms %s] %s", op.ClientId, float64(op.Call)/1e6, ret,
			describeRecOp(op.Input.(recInput), op.Output.(recOutput)))
	}
	return s
}

// runRecClient issues cfg.OpsPerClient random operations. The client
// remembers the versions it has seen (the latest and the one before), so
// that its conditional writes are sometimes current and sometimes stale.
// Every value it puts is a distinct decimal number, so any key may be added
// to and every put can be told apart.
func runRecClient(ctx context.Context, store leasehold.RecordStore, keys []string, id int, cfg RecordHistoryConfig, start time.Time, r *rand.Rand) []porcupine.Operation {
	now := func() int64 { return int64(time.Since(start)) }
	var ops []porcupine.Operation
	seen := map[string]uint64{}
	prev := map[string]uint64{}
	learn := func(k string, v uint64) {
		if seen[k] != v {
			prev[k], seen[k] = seen[k], v
		}
	}
	for n := 0; n < cfg.OpsPerClient; n++ {
		if ctx.Err() != nil {
			break
		}
		k := keys[r.IntN(len(keys))]
		in := recInput{Key: k}
		p := r.IntN(100)
		switch {
		case p < 25:
			in.Kind = recGet
		case p < 50:
			in.Kind, in.Expect = recPut, seen[k]
		case p < 58:
			in.Kind, in.Expect = recPut, 0
		case p < 63 && prev[k] != 0:
			in.Kind, in.Expect = recPut, prev[k]
		case p < 78 && seen[k] != 0:
			in.Kind, in.Expect = recDelete, seen[k]
		case p < 78:
			in.Kind = recGet
		default:
			in.Kind, in.Delta = recAdd, int64(r.IntN(7)-3)
			if in.Delta == 0 {
				in.Delta = 4
			}
		}
		if in.Kind == recPut {
			in.Value = strconv.Itoa(1000*(id+1)*cfg.OpsPerClient + 1000*n + r.IntN(1000))
		}
		var out recOutput
		call := now()
		var err error
		switch in.Kind {
		case recGet:
			var rec leasehold.Versioned
			rec, err = store.GetRecord(ctx, k)
			if err == nil {
				out.Value, out.Version = string(rec.Value), rec.Version
				learn(k, rec.Version)
			}
		case recPut:
			out.Version, err = store.PutRecord(ctx, k, []byte(in.Value), in.Expect)
			if err == nil {
				learn(k, out.Version)
			}
		case recDelete:
			err = store.DeleteRecord(ctx, k, in.Expect)
			if err == nil {
				learn(k, 0)
			}
		case recAdd:
			var v int64
			v, out.Version, err = store.AddCounter(ctx, k, in.Delta)
			if err == nil {
				out.Value = strconv.FormatInt(v, 10)
				learn(k, out.Version)
			}
		}
		ret := now()
		var ce *leasehold.ConflictError
		switch {
		case err == nil:
			out.Result = recOK
		case errors.As(err, &ce):
			out.Result, out.Actual, out.CheckActual = recConflict, ce.Actual, !cfg.ActualUnknown
			if ce.Actual != 0 || !cfg.ActualUnknown {
				learn(k, ce.Actual)
			}
		case errors.Is(err, leasehold.ErrNotFound):
			out.Result = recNotFound
			learn(k, 0)
		case errors.Is(err, leasehold.ErrInvalid):
			out.Result = recInvalid
		default:
			// Indeterminate: the operation may or may not have taken effect.
			// The client is retired, as Jepsen does.
			out.Result, ret = recUnknown, int64(1)<<62
		}
		ops = append(ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
		if out.Result == recUnknown {
			break
		}
		time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
	}
	return ops
}
