package stepfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// The scenarios below are the defects of issue 14 as single, ordered
// cases: each fails on the generator before the fix. They run on the
// shared dynalite, one lock each, one executor.

// behaviour is what one run of an execution's task does.
type behaviour struct {
	hold       time.Duration    // how long the work takes (cut by a Lambda's kill or the task's grace); < 0: it fails at once, doing nothing
	abortAfter time.Duration    // > 0: the execution is stopped this long into the work
	fail       *aslexec.Failure // returned after the work
	// early: fail is returned at once while the work goes on (a service
	// error after which the function runs on).
	early   bool
	started chan<- struct{} // closed when the work starts
}

type scenario struct {
	t     *testing.T
	ex    *aslexec.Executor
	table string
	lock  string
	grace time.Duration
	mu    sync.Mutex
	works sync.WaitGroup // work that may outlive its execution
	evs   []verify.Event
	// by execution name and redrive count, "NAME/rN", or with the
	// attempt too, "NAME/rN/aK" (taken first)
	plan map[string]behaviour
}

func newScenario(t *testing.T, grace time.Duration) *scenario {
	t.Helper()
	u, err := url.Parse(enginetest.DynamoDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	u.Host = "lh_r14_scenarios"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamodb.Init(ctx, u.String()); err != nil {
		t.Fatalf("create the table: %v", err)
	}
	s := &scenario{t: t, table: u.Host, lock: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()), grace: grace, plan: map[string]behaviour{}}
	s.ex, err = aslexec.New(aslexec.Options{DynamoDB: q.Get("endpoint"), Region: q.Get("region"),
		Lambdas: map[string]aslexec.Lambda{FunctionName: {Timeout: lambdaTimeout, Fn: func(ctx context.Context, call aslexec.Call, p any) (any, error) {
			return s.work(ctx, call, p, false)
		}}},
		Resources: map[string]aslexec.TaskFunc{TaskResource: func(ctx context.Context, call aslexec.Call, p any) (any, error) {
			return s.work(ctx, call, p, true)
		}}})
	if errors.Is(err, aslexec.ErrNoNode) {
		enginetest.Missing(t, "node and the npm package jsonata", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ex.Close() })
	return s
}

// lambdaConfig and taskConfig are the generator's configurations of the
// scenarios' machines; the task state times out after timeout.
func (s *scenario) lambdaConfig(ttl time.Duration) sfn.Config {
	return sfn.Config{Table: s.table, Lock: s.lock, LambdaARN: FunctionARN, LambdaTimeout: lambdaTimeout, TTL: ttl, MaxDelay: 2 * time.Second}
}

func (s *scenario) taskConfig(ttl time.Duration, timeout int) sfn.Config {
	task, _ := json.Marshal(map[string]any{"Type": "Task", "Resource": TaskResource, "TimeoutSeconds": timeout,
		"Arguments": map[string]any{"leasehold": "{% $leasehold %}"}})
	return sfn.Config{Table: s.table, Lock: s.lock, Task: task, TaskGrace: s.grace, TTL: ttl, MaxDelay: 2 * time.Second}
}

func (s *scenario) generate(c sfn.Config) []byte {
	s.t.Helper()
	def, err := sfn.Generate(c)
	if err != nil {
		s.t.Fatal(err)
	}
	return def
}

func (s *scenario) start(def []byte, name string) *aslexec.Execution {
	s.t.Helper()
	x, err := s.ex.Start(def, "scenario", name, map[string]any{})
	if err != nil {
		s.t.Fatal(err)
	}
	return x
}

func (s *scenario) wait(x *aslexec.Execution) aslexec.Result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := x.Wait(ctx)
	if err != nil {
		s.t.Fatalf("%s: %v", x.Name, err)
	}
	return r
}

// work is the task: a critical section recorded from its start to its end
// (a Lambda function's at the latest when it is killed; --task work's at
// the latest grace after Step Functions abandoned it).
func (s *scenario) work(ctx context.Context, call aslexec.Call, payload any, graced bool) (any, error) {
	l, err := leaseOf(payload)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	key := fmt.Sprintf("%s/r%d", call.Execution.Name, call.RedriveCount)
	b, ok := s.plan[fmt.Sprintf("%s/a%d", key, call.RetryCount)]
	if !ok {
		b = s.plan[key]
	}
	s.mu.Unlock()
	if b.hold < 0 { // the work failed before it did anything
		return nil, b.fail
	}
	s.works.Add(1)
	if b.early {
		go s.section(ctx, call, l, b, graced)
		return nil, b.fail
	}
	return s.section(ctx, call, l, b, graced)
}

// section is the work's critical section, recorded when it ends.
func (s *scenario) section(ctx context.Context, call aslexec.Call, l payloadLease, b behaviour, graced bool) (any, error) {
	defer s.works.Done()
	if b.hold == 0 {
		b.hold = 200 * time.Millisecond
	}
	if b.abortAfter > 0 {
		time.AfterFunc(b.abortAfter, func() { call.Execution.Stop("Scenario.Aborted", "stopped while the task ran") })
	}
	from := verify.Mono()
	if b.started != nil {
		close(b.started)
	}
	to := from + int64(b.hold)
	var grace <-chan time.Time
	var cut int64 // when the work must have stopped: grace after it was abandoned
	hold := time.NewTimer(b.hold)
	defer hold.Stop()
	abandoned := call.Abandoned
	for done := false; !done; {
		select {
		case <-hold.C:
			done = true
		case <-ctx.Done(): // a Lambda function killed at its timeout
			to, done = verify.Mono(), true
		case <-abandoned:
			abandoned = nil
			if graced {
				cut = verify.Mono() + int64(s.grace)
				grace = time.After(s.grace)
			}
		case <-grace:
			to, done = cut, true
		}
	}
	s.mu.Lock()
	s.evs = append(s.evs, verify.Event{E: "cs", Worker: "sfn", Proc: fmt.Sprintf("%s/r%d/a%d", call.Execution.Name, call.RedriveCount, call.RetryCount),
		Owner: call.Execution.Name, Key: l.Lock, Token: l.Token, From: from, To: to})
	s.mu.Unlock()
	if b.fail != nil {
		return nil, b.fail
	}
	return map[string]any{"ok": true}, nil
}

// check waits for the work still going on, and requires n critical
// sections, none overlapping, tokens in order.
func (s *scenario) check(n int) []verify.Event {
	s.t.Helper()
	s.works.Wait()
	s.mu.Lock()
	evs := append([]verify.Event(nil), s.evs...)
	s.mu.Unlock()
	if len(evs) != n {
		s.t.Errorf("%d critical sections, want %d", len(evs), n)
	}
	res := verify.Check(&verify.History{Events: evs}, verify.CheckOptions{NoLinearizability: true})
	if res.Overlaps > 0 {
		s.t.Errorf("%d overlaps: %s", res.Overlaps, res.FirstBad)
	}
	if k, first := tokenOrder(evs); k > 0 {
		s.t.Errorf("tokens out of order: %s", first)
	}
	return evs
}
