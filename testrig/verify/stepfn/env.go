package stepfn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// FunctionName is the Lambda function every generated machine of R14
// invokes: one Go function that finds its trial by the lock in the
// payload.
const FunctionName = "r14-body"

// FunctionARN is FunctionName's ARN, as given to the generator.
const FunctionARN = "arn:aws:lambda:us-east-1:123456789012:function:" + FunctionName

// TaskResource is the resource of R14's --task machine: an integration
// that runs work Step Functions waits for but cannot stop (a Batch job),
// run as a Go function; its Arguments carry $leasehold.
const TaskResource = "arn:aws:states:::batch:submitJob.sync"

// Env is what the trials of one process share: one DynamoDB table (the
// dynamodb store's layout), one fenced oracle, and one executor per clock
// skew, each with its own node process for JSONata.
type Env struct {
	StoreURL string // dynamodb://TABLE?endpoint=...&region=...
	Endpoint string
	Table    string
	Oracle   *verify.Oracle
	// Skews are the executors' clock errors: execution slot i runs on
	// executor i mod len(Skews).
	Skews []time.Duration
	// LambdaTimeout is the function's own timeout: when it passes, the
	// function is killed (aslexec.Lambda.Timeout).
	LambdaTimeout time.Duration

	execs  []*aslexec.Executor
	oc     *oracleClient
	trials sync.Map // lock name → *trial
}

// NewEnv starts the executors and the oracle for a DynamoDB store URL
// whose table exists. Everything stops when the test ends.
func NewEnv(t testing.TB, storeURL string, skews []time.Duration, lambdaTimeout time.Duration) *Env {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	o, err := verify.NewOracle(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	env := &Env{StoreURL: storeURL, Endpoint: u.Query().Get("endpoint"), Table: u.Host, Oracle: o,
		Skews: skews, LambdaTimeout: lambdaTimeout, oc: newOracleClient(o.URL())}
	region := u.Query().Get("region")
	for _, skew := range skews {
		ex, err := aslexec.New(aslexec.Options{DynamoDB: env.Endpoint, Region: region, Skew: skew,
			Lambdas:   map[string]aslexec.Lambda{FunctionName: {Fn: env.lambdaBody, Timeout: lambdaTimeout}},
			Resources: map[string]aslexec.TaskFunc{TaskResource: env.taskBody}})
		if errors.Is(err, aslexec.ErrNoNode) {
			enginetest.Missing(t, "node and the npm package jsonata", err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		env.execs = append(env.execs, ex)
	}
	return env
}

// lambdaBody is the Lambda function and taskBody the --task work: each
// finds the trial of the lock it was called for and runs its body there.
func (env *Env) lambdaBody(ctx context.Context, call aslexec.Call, payload any) (any, error) {
	return env.dispatch(ctx, call, payload, true)
}

func (env *Env) taskBody(ctx context.Context, call aslexec.Call, args any) (any, error) {
	return env.dispatch(ctx, call, args, false)
}

func (env *Env) dispatch(ctx context.Context, call aslexec.Call, payload any, lambda bool) (any, error) {
	l, err := leaseOf(payload)
	if err != nil {
		return nil, err
	}
	v, ok := env.trials.Load(l.Lock)
	if !ok {
		return nil, fmt.Errorf("no R14 trial runs on the lock %q", l.Lock)
	}
	return v.(*trial).body(ctx, call, l, lambda)
}
