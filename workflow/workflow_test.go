package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/workflow"
)

var strategies = []workflow.Strategy{workflow.Optimistic, workflow.Pessimistic, workflow.Lease, workflow.Adaptive}

func approval(name string) workflow.Definition {
	return workflow.Definition{
		Name:    name,
		Initial: "DRAFT",
		Transitions: map[string][]string{
			"DRAFT":    {"PENDING"},
			"PENDING":  {"APPROVED", "REJECTED"},
			"REJECTED": {"DRAFT"},
			"APPROVED": {"ARCHIVED"},
		},
	}
}

// counting is the experiment's definition: "0" → "1" → ... → "n".
func counting(name string, n int) workflow.Definition {
	tr := make(map[string][]string, n)
	for i := range n {
		tr[strconv.Itoa(i)] = []string{strconv.Itoa(i + 1)}
	}
	return workflow.Definition{Name: name, Initial: "0", Transitions: tr}
}

func newWF(t *testing.T, def workflow.Definition, e engine, s workflow.Strategy) *workflow.Workflows {
	t.Helper()
	w, err := workflow.New(def, workflow.Config{Records: e.records, Leases: e.leases, Strategy: s, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestDefinitionValidate(t *testing.T) {
	good := approval("approval")
	if err := good.Validate(); err != nil {
		t.Fatalf("valid definition refused: %v", err)
	}
	bad := map[string]workflow.Definition{
		"no name":          {Initial: "A", Transitions: map[string][]string{"A": {"B"}}},
		"no initial":       {Name: "w", Transitions: map[string][]string{"A": {"B"}}},
		"no transitions":   {Name: "w", Initial: "A"},
		"unknown initial":  {Name: "w", Initial: "Z", Transitions: map[string][]string{"A": {"B"}}},
		"slash in name":    {Name: "a/b", Initial: "A", Transitions: map[string][]string{"A": {"B"}}},
		"slash in state":   {Name: "w", Initial: "A", Transitions: map[string][]string{"A": {"B/C"}}},
		"empty target":     {Name: "w", Initial: "A", Transitions: map[string][]string{"A": {""}}},
		"duplicate target": {Name: "w", Initial: "A", Transitions: map[string][]string{"A": {"B", "B"}}},
		"control char":     {Name: "w\n", Initial: "A", Transitions: map[string][]string{"A": {"B"}}},
		"long state":       {Name: "w", Initial: "A", Transitions: map[string][]string{"A": {strings.Repeat("x", 49)}}},
	}
	for name, d := range bad {
		err := d.Validate()
		if !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: got %v, want an *InvalidError", name, err)
		}
		if _, err := workflow.New(d, workflow.Config{Records: memory.New()}); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: New accepted it (%v)", name, err)
		}
	}
	if !good.Allowed("PENDING", "APPROVED") || good.Allowed("DRAFT", "APPROVED") {
		t.Error("Allowed is wrong")
	}
}

func TestConfig(t *testing.T) {
	def := approval("cfg")
	m := memory.New()
	for name, c := range map[string]workflow.Config{
		"no records":                          {},
		"lease without store":                 {Records: m, Strategy: workflow.Lease},
		"pessimistic without locks or leases": {Records: m, Strategy: workflow.Pessimistic},
		"unknown strategy":                    {Records: m, Strategy: "eventual"},
		"threshold":                           {Records: m, Threshold: 1.5},
		"max attempts":                        {Records: m, MaxAttempts: -1},
	} {
		if _, err := workflow.New(def, c); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: got %v, want an *InvalidError", name, err)
		}
	}
}

// eachStrategy runs test as a subtest "engine/strategy" for every engine
// and strategy.
func eachStrategy(t *testing.T, test func(t *testing.T, e engine, s workflow.Strategy)) {
	for _, e := range engines(t) {
		for _, s := range strategies {
			t.Run(e.name+"/"+string(s), func(t *testing.T) { test(t, e, s) })
		}
	}
}

func TestTransitions(t *testing.T) {
	eachStrategy(t, testTransitions)
}

func testTransitions(t *testing.T, e engine, s workflow.Strategy) {
	ctx := context.Background()
	w := newWF(t, approval(unique("approval")), e, s)

	if _, err := w.Transition(ctx, "doc-1", "DRAFT", "PENDING", "alice", "r0"); !errors.Is(err, workflow.ErrNoInstance) {
		t.Fatalf("transition of a missing instance: %v", err)
	}
	in, err := w.Create(ctx, "doc-1")
	if err != nil || in.State != "DRAFT" || in.Version != 0 {
		t.Fatalf("create: %+v, %v", in, err)
	}
	if _, err := w.Create(ctx, "doc-1"); !errors.Is(err, workflow.ErrExists) {
		t.Fatalf("second create: %v", err)
	}

	r, err := w.Transition(ctx, "doc-1", "DRAFT", "PENDING", "alice", "submit-1")
	if err != nil || r.Outcome != workflow.Applied || r.State != "PENDING" || r.Version != 1 {
		t.Fatalf("submit: %+v, %v", r, err)
	}
	first, err := w.Transition(ctx, "doc-1", "PENDING", "APPROVED", "bob", "approve-bob")
	if err != nil || first.Outcome != workflow.Applied || first.Version != 2 || first.Entry.Actor != "bob" {
		t.Fatalf("approve: %+v, %v", first, err)
	}
	if s == workflow.Lease && first.Entry.Token == 0 {
		t.Errorf("the lease strategy did not record its token: %+v", first.Entry)
	}

	// The same request again: the original result, nothing changed.
	again, err := w.Transition(ctx, "doc-1", "PENDING", "APPROVED", "bob", "approve-bob")
	if err != nil || again.Outcome != workflow.Repeated || again.Entry != first.Entry || again.Version != 2 {
		t.Fatalf("repeat: %+v, %v (original %+v)", again, err, first)
	}
	// Another request: already done, by bob's request — never "applied".
	other, err := w.Transition(ctx, "doc-1", "PENDING", "APPROVED", "carol", "approve-carol")
	if err != nil || other.Outcome != workflow.AlreadyDone || other.Entry.Actor != "bob" || other.Entry.RequestID != "approve-bob" || other.Entry.At.IsZero() {
		t.Fatalf("second approver: %+v, %v", other, err)
	}
	if !strings.Contains(other.String(), "already done by bob") {
		t.Errorf("result text: %s", other)
	}
	// A transition that does not start from the current state.
	_, err = w.Transition(ctx, "doc-1", "PENDING", "REJECTED", "dave", "reject-dave")
	var ws *workflow.WrongStateError
	if !errors.As(err, &ws) || ws.Current != "APPROVED" || ws.From != "PENDING" || ws.Last == nil || ws.Last.Actor != "bob" {
		t.Fatalf("wrong state: %v", err)
	}
	if !strings.Contains(err.Error(), `is in "APPROVED"`) {
		t.Errorf("unclear error: %v", err)
	}
	// Not in the definition.
	_, err = w.Transition(ctx, "doc-1", "APPROVED", "DRAFT", "dave", "x1")
	var na *workflow.NotAllowedError
	if !errors.As(err, &na) {
		t.Fatalf("not allowed: %v", err)
	}
	if _, err := w.Transition(ctx, "doc-1", "APPROVED", "NOPE", "dave", "x2"); !errors.Is(err, workflow.ErrNotAllowed) || !strings.Contains(err.Error(), "not a state") {
		t.Fatalf("unknown state: %v", err)
	}
	// The same request id for another transition is a mistake, said so.
	if _, err := w.Transition(ctx, "doc-1", "APPROVED", "ARCHIVED", "bob", "approve-bob"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("reused request id: %v", err)
	}
	// Bad input.
	for name, args := range map[string][5]string{
		"empty actor":      {"doc-1", "APPROVED", "ARCHIVED", "", "r9"},
		"empty request id": {"doc-1", "APPROVED", "ARCHIVED", "eve", ""},
		"slash instance":   {"doc/1", "APPROVED", "ARCHIVED", "eve", "r9"},
		"empty instance":   {"", "APPROVED", "ARCHIVED", "eve", "r9"},
		"control in id":    {"doc-1", "APPROVED", "ARCHIVED", "eve", "r\x00"},
		"long request id":  {"doc-1", "APPROVED", "ARCHIVED", "eve", strings.Repeat("r", 129)},
	} {
		if _, err := w.Transition(ctx, args[0], args[1], args[2], args[3], args[4]); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := w.Create(ctx, "a/b"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("create with a slash: %v", err)
	}
	// An instance id over the limit names the limit it is over, whatever
	// its length (a 1 MiB id was said to be over 256 bytes, the lease
	// names' limit, one of 49 bytes over 48).
	for _, n := range []int{workflow.MaxNameLen + 1, 1 << 20} {
		_, err := w.Transition(ctx, strings.Repeat("d", n), "APPROVED", "ARCHIVED", "eve", "r9")
		if want := fmt.Sprintf("limit of %d", workflow.MaxNameLen); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("instance id of %d bytes: %v, want an invalid-input error naming the %s", n, err, want)
		}
	}

	// Nothing of the refused calls changed anything.
	in, err = w.Get(ctx, "doc-1")
	if err != nil || in.State != "APPROVED" || in.Version != 2 || in.LastActor != "bob" || in.Last.RequestID != "approve-bob" {
		t.Fatalf("get: %+v, %v", in, err)
	}
	h, err := w.History(ctx, "doc-1")
	if err != nil || len(h) != 2 {
		t.Fatalf("history: %+v, %v", h, err)
	}
	want := [][4]string{{"DRAFT", "PENDING", "alice", "submit-1"}, {"PENDING", "APPROVED", "bob", "approve-bob"}}
	for i, e := range h {
		if got := [4]string{e.From, e.To, e.Actor, e.RequestID}; got != want[i] || e.Version != uint64(i+1) || e.Instance != "doc-1" {
			t.Errorf("history[%d] = %+v, want %v", i, e, want[i])
		}
	}
	if h[1] != first.Entry {
		t.Errorf("history entry %+v differs from the result's %+v", h[1], first.Entry)
	}
	// A repeat after the instance moved on still gets its original result.
	if _, err := w.Transition(ctx, "doc-1", "APPROVED", "ARCHIVED", "bob", "archive"); err != nil {
		t.Fatal(err)
	}
	if r, err := w.Transition(ctx, "doc-1", "PENDING", "APPROVED", "bob", "approve-bob"); err != nil || r.Outcome != workflow.Repeated || r.Entry != first.Entry {
		t.Fatalf("repeat after moving on: %+v, %v", r, err)
	}
	// A cycle back to a state: a new request applies, an old one repeats.
	w2 := newWF(t, approval(unique("cycle")), e, s)
	mustCreate(t, w2, "c")
	for i, tr := range [][2]string{{"DRAFT", "PENDING"}, {"PENDING", "REJECTED"}, {"REJECTED", "DRAFT"}} {
		if r, err := w2.Transition(ctx, "c", tr[0], tr[1], "u", fmt.Sprint("c", i)); err != nil || r.Outcome != workflow.Applied {
			t.Fatalf("cycle %d: %+v %v", i, r, err)
		}
	}
	if r, err := w2.Transition(ctx, "c", "DRAFT", "PENDING", "u", "c0"); err != nil || r.Outcome != workflow.Repeated || r.Version != 1 {
		t.Fatalf("old request in a cycle: %+v %v", r, err)
	}
	if in, _ := w2.Get(ctx, "c"); in.State != "DRAFT" || in.Version != 3 {
		t.Fatalf("the repeat changed the instance: %+v", in)
	}
}

func mustCreate(t *testing.T, w *workflow.Workflows, id string) {
	t.Helper()
	if _, err := w.Create(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func TestTxnUnsupported(t *testing.T) {
	w, err := workflow.New(approval("nt"), workflow.Config{Records: noTxn{memory.New()}, Strategy: workflow.Optimistic})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustCreate(t, w, "x")
	_, err = w.Transition(ctx, "x", "DRAFT", "PENDING", "a", "r")
	if !errors.Is(err, leasehold.ErrTxnUnsupported) {
		t.Fatalf("got %v, want ErrTxnUnsupported", err)
	}
	if in, _ := w.Get(ctx, "x"); in.State != "DRAFT" {
		t.Fatalf("changed: %+v", in)
	}
}

// noTxn is a record store without multi-key transactions, as dynalite's
// DynamoDB API is.
type noTxn struct{ *memory.Store }

func (noTxn) Txn(context.Context, leasehold.Txn) (leasehold.TxnResult, error) {
	return leasehold.TxnResult{}, leasehold.ErrTxnUnsupported
}

// TestHundredWorkers: 100 workers on one instance, each advancing it
// n → n+1 (reading n first, and again whenever told the instance moved)
// several times; every strategy must lose and duplicate nothing, and the
// adaptive one apply every transition.
func TestHundredWorkers(t *testing.T) {
	for _, e := range engines(t) {
		per := 5 // transitions per worker
		if e.name != "memory" || testing.Short() {
			per = 1
		}
		for _, s := range strategies {
			t.Run(e.name+"/"+string(s), func(t *testing.T) {
				testHundred(t, e, s, per)
			})
		}
	}
}

func testHundred(t *testing.T, e engine, s workflow.Strategy, per int) {
	const workers = 100
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := workflow.New(counting(unique("adv"), workers*per), workflow.Config{
		Records: e.records, Leases: e.leases, Strategy: s, LockWait: time.Minute, Owner: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, w, "one")
	var mu sync.Mutex
	applied := map[string]bool{}
	failed := 0
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			<-start
			for j := range per {
				req := fmt.Sprintf("w%d-%d", i, j)
				in, err := w.Get(ctx, "one")
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(in.State)
				for {
					r, err := w.Transition(ctx, "one", strconv.Itoa(n), strconv.Itoa(n+1), fmt.Sprint("w", i), req)
					var ws *workflow.WrongStateError
					switch {
					case err == nil && r.Outcome == workflow.Applied:
						mu.Lock()
						if applied[req] {
							t.Errorf("%s applied twice", req)
						}
						applied[req] = true
						mu.Unlock()
					case err == nil && r.Outcome == workflow.AlreadyDone:
						if r.Entry.RequestID == req || r.Entry.RequestID == "" {
							t.Errorf("already-done names %q", r.Entry.RequestID)
						}
						n, _ = strconv.Atoi(r.State)
						continue
					case errors.As(err, &ws):
						n, _ = strconv.Atoi(ws.Current)
						continue
					case err == nil:
						t.Errorf("unexpected outcome %+v", r)
					default:
						// A strategy's budget ran out (lock wait, retries).
						var ex *leasehold.RetriesExhaustedError
						if !errors.As(err, &ex) && !errors.Is(err, leasehold.ErrLockTimeout) {
							t.Errorf("%s: %v", req, err)
						}
						mu.Lock()
						failed++
						mu.Unlock()
					}
					break
				}
			}
		})
	}
	close(start)
	wg.Wait()
	in, err := w.Get(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.History(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if in.Version != uint64(len(applied)) || len(h) != len(applied) || in.State != strconv.Itoa(len(applied)) {
		t.Fatalf("applied %d, but the instance is at %s version %d with %d history entries", len(applied), in.State, in.Version, len(h))
	}
	for i, e := range h {
		if e.Version != uint64(i+1) || e.From != strconv.Itoa(i) || e.To != strconv.Itoa(i+1) || !applied[e.RequestID] {
			t.Fatalf("history[%d] = %+v", i, e)
		}
		delete(applied, e.RequestID) // each request id once
	}
	t.Logf("%s/%s: %d of %d applied, %d over budget", e.name, s, len(h), workers*per, failed)
	if s == workflow.Adaptive && len(h) != workers*per {
		t.Fatalf("adaptive applied %d of %d", len(h), workers*per)
	}
}

// TestApproveRace: 100 approvers of one request at once: one applies, all
// the others are told, without an error, who did.
func TestApproveRace(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e engine, s workflow.Strategy) {
		ctx := context.Background()
		w, err := workflow.New(approval(unique("appr")), workflow.Config{
			Records: e.records, Leases: e.leases, Strategy: s, LockWait: time.Minute, MaxAttempts: 100, Owner: "t",
		})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, w, "doc")
		if _, err := w.Transition(ctx, "doc", "DRAFT", "PENDING", "author", "submit"); err != nil {
			t.Fatal(err)
		}
		results := make([]workflow.Result, 100)
		errs := make([]error, 100)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			wg.Go(func() {
				<-start
				results[i], errs[i] = w.Transition(ctx, "doc", "PENDING", "APPROVED", fmt.Sprint("admin", i), fmt.Sprint("ok", i))
			})
		}
		close(start)
		wg.Wait()
		winner := ""
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("approver %d: %v", i, errs[i])
			}
			if r.Outcome == workflow.Applied {
				if winner != "" {
					t.Fatalf("applied twice: %s and %s", winner, r.Entry.RequestID)
				}
				winner = r.Entry.RequestID
			}
		}
		for i, r := range results {
			if r.Outcome != workflow.Applied && (r.Outcome != workflow.AlreadyDone || r.Entry.RequestID != winner) {
				t.Fatalf("approver %d: %+v (winner %s)", i, r, winner)
			}
		}
		if h, _ := w.History(ctx, "doc"); len(h) != 2 || h[1].RequestID != winner {
			t.Fatalf("history %+v", h)
		}
	})
}

func TestAdaptiveMovesAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := memory.New()
	name := unique("hot")
	const window = 500 * time.Millisecond
	// Reads answered a millisecond late make concurrent attempts overlap, so
	// the 50 writers below conflict however the scheduler runs them (on
	// the bare memory store they can run one after another and never
	// conflict).
	w, err := workflow.New(counting(name, 4000), workflow.Config{Records: slowReads{m}, Leases: m, Registerer: reg, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustCreate(t, w, "x")
	// One writer at a time: no conflicts, optimistic.
	for i := range 20 {
		if _, err := w.Transition(ctx, "x", strconv.Itoa(i), strconv.Itoa(i+1), "solo", fmt.Sprint("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	if q, rate := w.InstanceMode("x"); q || rate != 0 {
		t.Fatalf("after sequential writes: queued %v rate %v", q, rate)
	}
	// Many at once: conflicts, queued.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			for j := range 10 {
				in, _ := w.Get(ctx, "x")
				n, _ := strconv.Atoi(in.State)
				for {
					r, err := w.Transition(ctx, "x", strconv.Itoa(n), strconv.Itoa(n+1), "many", fmt.Sprint("m", i, "-", j))
					var ws *workflow.WrongStateError
					if errors.As(err, &ws) {
						n, _ = strconv.Atoi(ws.Current)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if r.Outcome == workflow.AlreadyDone {
						n, _ = strconv.Atoi(r.State)
						continue
					}
					break
				}
			}
		})
	}
	wg.Wait()
	q0, r0 := w.InstanceMode("x")
	t.Logf("after the writers: queued %v rate %v", q0, r0)
	if v := metricValue(t, reg, "leasehold_workflow_strategy_switches_total", map[string]string{"to": "queued"}); v < 1 {
		t.Fatalf("50 concurrent writers did not move the instance to the queue (switches: %v)", v)
	}
	// Alone again: once the window has passed, the rate is below half the
	// threshold and the instance goes back to optimistic.
	time.Sleep(window + window/5)
	in, _ := w.Get(ctx, "x")
	n, _ := strconv.Atoi(in.State)
	r, err := w.Transition(ctx, "x", strconv.Itoa(n), strconv.Itoa(n+1), "solo", "after")
	if err != nil || r.Strategy != workflow.Optimistic {
		t.Fatalf("after the window: %+v, %v", r, err)
	}
	if q, rate := w.InstanceMode("x"); q || rate != 0 {
		t.Fatalf("did not cool: queued %v rate %v", q, rate)
	}
	if v := metricValue(t, reg, "leasehold_workflow_instance_strategy", map[string]string{"instance": "x", "strategy": "optimistic"}); v != 1 {
		t.Fatalf("strategy gauge: %v", v)
	}
	if v := metricValue(t, reg, "leasehold_workflow_transitions_total", map[string]string{"strategy": "queued", "outcome": "applied"}); v < 1 {
		t.Fatalf("queued applied: %v", v)
	}
}

// metricValue finds one series of a registry's metric family.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s %v", name, labels)
	return 0
}

// slowReads answers every read of a record store a millisecond late.
type slowReads struct{ leasehold.RecordStore }

func (s slowReads) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	v, err := s.RecordStore.GetRecord(ctx, key)
	time.Sleep(time.Millisecond) // after the read: the value ages before its write
	return v, err
}
