//go:build unix

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// machineRequests evaluates the JSONata expressions of one state of the
// generated machine with the jsonata reference implementation (as Step
// Functions would) and returns its Arguments: the UpdateItem request.
func machineRequests(t *testing.T, machine, state, execID string, vars map[string]any) map[string]any {
	t.Helper()
	return machineRequestsAt(t, machine, state, execID, time.Now(), map[string]any{}, vars)
}

// machineRequestsAt is machineRequests for a state entered at entered with
// the given input.
func machineRequestsAt(t *testing.T, machine, state, execID string, entered time.Time, input any, vars map[string]any) map[string]any {
	t.Helper()
	scenario := map[string]any{
		"state": state, "input": input,
		"context": map[string]any{"Execution": map[string]any{"Id": execID},
			"State": map[string]any{"EnteredTime": entered.UTC().Format("2006-01-02T15:04:05.000Z")}},
		"vars": vars,
	}
	sp := filepath.Join(t.TempDir(), "scenario.json")
	b, _ := json.Marshal(scenario)
	if err := os.WriteFile(sp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := enginetest.NodeCommand(t, filepath.Join("..", "..", "sfn", "testdata", "eval.js"), machine, sp).Output()
	if err != nil {
		t.Fatalf("eval %s: %v", state, err)
	}
	var st map[string]any
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st["Arguments"].(map[string]any)
}

// toAttr converts DynamoDB JSON ({"S": ...}, {"N": ...}, ...) to SDK values.
func toAttr(t *testing.T, v any) types.AttributeValue {
	m := v.(map[string]any)
	switch {
	case m["S"] != nil:
		return &types.AttributeValueMemberS{Value: m["S"].(string)}
	case m["N"] != nil:
		return &types.AttributeValueMemberN{Value: fmt.Sprint(m["N"])}
	case m["BOOL"] != nil:
		return &types.AttributeValueMemberBOOL{Value: m["BOOL"].(bool)}
	case m["B"] != nil:
		b, _ := base64.StdEncoding.DecodeString(m["B"].(string))
		return &types.AttributeValueMemberB{Value: b}
	}
	t.Fatalf("unsupported attribute value %v", v)
	return nil
}

// send sends an evaluated updateItem request of the machine.
func send(t *testing.T, client *ddb.Client, args map[string]any) (*ddb.UpdateItemOutput, error) {
	in := &ddb.UpdateItemInput{
		TableName:                 strPtr(args["TableName"].(string)),
		Key:                       map[string]types.AttributeValue{},
		UpdateExpression:          strPtr(args["UpdateExpression"].(string)),
		ConditionExpression:       strPtr(args["ConditionExpression"].(string)),
		ExpressionAttributeNames:  map[string]string{},
		ExpressionAttributeValues: map[string]types.AttributeValue{},
	}
	for k, v := range args["Key"].(map[string]any) {
		in.Key[k] = toAttr(t, v)
	}
	for k, v := range args["ExpressionAttributeNames"].(map[string]any) {
		in.ExpressionAttributeNames[k] = v.(string)
	}
	for k, v := range args["ExpressionAttributeValues"].(map[string]any) {
		in.ExpressionAttributeValues[k] = toAttr(t, v)
	}
	if rv, ok := args["ReturnValues"].(string); ok {
		in.ReturnValues = types.ReturnValue(rv)
	}
	return client.UpdateItem(context.Background(), in)
}

// newTable makes a fresh table, named prefix_<time>, on the shared test
// dynalite with "leasehold store init", and returns its name, its store
// URL and a DynamoDB client of it.
func newTable(ctx context.Context, t *testing.T, prefix string) (table, url string, client *ddb.Client) {
	t.Helper()
	base := enginetest.DynamoDBURL(t)
	table = fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	url = "dynamodb://" + table + base[len("dynamodb://leasehold_test"):]
	if out, err := leasehold(ctx, "store", "init", "--store", url).CombinedOutput(); err != nil {
		t.Fatalf("store init: %v\n%s", err, out)
	}
	store, err := dynamodb.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return table, url, store.Client()
}

func strPtr(s string) *string { return &s }

func conditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// TestStateMachineAndRunExclude: a "leasehold run" process and the requests
// of the machine that "leasehold sfn" writes exclude each other on one lock
// in dynalite, and share its fencing counter.
func TestStateMachineAndRunExclude(t *testing.T) {
	markTrees(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table, u, client := newTable(ctx, t, "sfn_e2e")

	def, err := sfn.Generate(sfn.Config{Table: table, Lock: "nightly",
		LambdaARN: "arn:aws:lambda:us-east-1:123456789012:function:job", LambdaTimeout: time.Minute, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	machine := filepath.Join(t.TempDir(), "machine.json")
	if err := os.WriteFile(machine, def, 0o644); err != nil {
		t.Fatal(err)
	}
	exec1 := "arn:aws:states:us-east-1:123456789012:execution:nightly:run-1"

	// 1. leasehold run holds the lock: the machine's acquire is refused.
	started := filepath.Join(t.TempDir(), "started")
	release := filepath.Join(t.TempDir(), "release")
	holder := leasehold(ctx, "run", "--store", u, "--ttl", "10s", "nightly", "--",
		"sh", "-c", `echo "$LEASEHOLD_TOKEN" > `+started+`; while [ ! -e `+release+` ]; do sleep 0.05; done`)
	startGroup(t, holder)
	runDone := make(chan error, 1)
	go func() { runDone <- holder.Wait() }()
	var runToken uint64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(started); err == nil && len(b) > 1 {
			runToken, _ = strconv.ParseUint(string(b[:len(b)-1]), 10, 64)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("leasehold run never started its command")
		}
	}
	if _, err := send(t, client, machineRequests(t, machine, sfn.StateAcquire, exec1, nil)); !conditionFailed(err) {
		t.Fatalf("machine acquired a lock held by leasehold run: %v", err)
	}

	// 2. run releases; the machine acquires with a greater token.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-runDone; err != nil {
		t.Fatalf("leasehold run: %v", err)
	}
	out, err := send(t, client, machineRequests(t, machine, sfn.StateAcquire, exec1, nil))
	if err != nil {
		t.Fatalf("machine acquire after release: %v", err)
	}
	tok := out.Attributes["Token"].(*types.AttributeValueMemberN).Value
	machineToken, _ := strconv.ParseUint(tok, 10, 64)
	if machineToken <= runToken {
		t.Fatalf("machine token %d, want > run's %d", machineToken, runToken)
	}
	// A retried (or redriven) acquire of the same execution succeeds.
	if out, err = send(t, client, machineRequests(t, machine, sfn.StateAcquire, exec1, nil)); err != nil {
		t.Fatalf("retried acquire of the same execution: %v", err)
	}
	tok = out.Attributes["Token"].(*types.AttributeValueMemberN).Value

	// 3. While the machine holds it, leasehold run cannot, and status shows
	// the execution as the holder; another execution is refused too.
	if code := exitCode(leasehold(ctx, "run", "--store", u, "--no-wait", "nightly", "--", "true").Run()); code != 75 {
		t.Fatalf("leasehold run --no-wait while the machine holds the lock: exit %d, want 75", code)
	}
	if ls := status(t, u, "nightly"); len(ls) != 1 || ls[0].Owner != exec1 {
		t.Fatalf("status while the machine holds it: %+v", ls)
	}
	if _, err := send(t, client, machineRequests(t, machine, sfn.StateAcquire, exec1+"-other", nil)); !conditionFailed(err) {
		t.Fatalf("a second execution acquired a held lock: %v", err)
	}

	// 4. The machine releases (with a stale token it would be refused), then
	// leasehold run gets the lock with a greater token.
	if _, err := send(t, client, machineRequests(t, machine, sfn.StateRelease, exec1, map[string]any{"lh_token": "1"})); !conditionFailed(err) {
		t.Fatalf("release with a stale token: %v", err)
	}
	if _, err := send(t, client, machineRequests(t, machine, sfn.StateRelease, exec1, map[string]any{"lh_token": tok})); err != nil {
		t.Fatalf("machine release: %v", err)
	}
	after := leasehold(ctx, "run", "--store", u, "--no-wait", "nightly", "--", "sh", "-c", `echo "$LEASEHOLD_TOKEN"`)
	b, err := after.Output()
	if err != nil {
		t.Fatalf("leasehold run after the machine released: %v", err)
	}
	last, _ := strconv.ParseUint(string(b[:len(b)-1]), 10, 64)
	want, _ := strconv.ParseUint(tok, 10, 64)
	if last <= want {
		t.Fatalf("run's token %d after the machine's %d", last, want)
	}
	t.Logf("tokens: run %d, machine %d (retried: %s), run %d", runToken, machineToken, tok, last)
}

// TestCleanupMachineReleasesDeadExecution: the cleanup machine's release,
// sent to dynalite, frees the lock of an execution that ended, but not a
// grant the same execution took after it ended (a redrive) nor another
// execution's; leasehold run then gets the lock with a greater token.
func TestCleanupMachineReleasesDeadExecution(t *testing.T) {
	markTrees(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table, u, client := newTable(ctx, t, "sfn_cleanup")

	cfg := sfn.Config{Table: table, Lock: "nightly", LambdaARN: "arn:aws:lambda:us-east-1:123456789012:function:job",
		LambdaTimeout: time.Minute, TTL: time.Hour}
	dir := t.TempDir()
	machine, cleanup := filepath.Join(dir, "machine.json"), filepath.Join(dir, "cleanup.json")
	for path, gen := range map[string]func(sfn.Config) ([]byte, error){machine: sfn.Generate, cleanup: sfn.Cleanup} {
		def, err := gen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, def, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dead := "arn:aws:states:us-east-1:123456789012:execution:nightly:dead"
	event := func(exec string, stopped time.Time) map[string]any {
		return map[string]any{"source": "aws.states", "detail-type": "Step Functions Execution Status Change",
			"detail": map[string]any{"executionArn": exec, "status": "ABORTED", "stopDate": stopped.UnixMilli()}}
	}
	acquiredAt := time.Now().Add(-time.Minute)
	if _, err := send(t, client, machineRequestsAt(t, machine, sfn.StateAcquire, dead, acquiredAt, map[string]any{}, nil)); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	stopped := acquiredAt.Add(10 * time.Second)
	// Another execution's end releases nothing.
	other := machineRequestsAt(t, cleanup, sfn.CleanupStateRelease, "arn:cleanup:1", time.Now(), event(dead+"-other", stopped), nil)
	if _, err := send(t, client, other); !conditionFailed(err) {
		t.Fatalf("cleanup of another execution: %v", err)
	}
	// The dead execution's own end releases its grant.
	own := machineRequestsAt(t, cleanup, sfn.CleanupStateRelease, "arn:cleanup:2", time.Now(), event(dead, stopped), nil)
	if _, err := send(t, client, own); err != nil {
		t.Fatalf("cleanup of the dead execution: %v", err)
	}
	if ls := status(t, u, "nightly"); len(ls) != 0 {
		t.Fatalf("still held after the cleanup: %+v", ls)
	}
	// Redriven, the execution acquires again after it stopped: the late
	// cleanup of its earlier end leaves the new grant alone.
	out, err := send(t, client, machineRequestsAt(t, machine, sfn.StateAcquire, dead, stopped.Add(5*time.Second), map[string]any{}, nil))
	if err != nil {
		t.Fatalf("re-acquire after a redrive: %v", err)
	}
	redriven, _ := strconv.ParseUint(out.Attributes["Token"].(*types.AttributeValueMemberN).Value, 10, 64)
	if _, err := send(t, client, own); !conditionFailed(err) {
		t.Fatalf("the cleanup of the earlier end released the redriven grant: %v", err)
	}
	if ls := status(t, u, "nightly"); len(ls) != 1 || ls[0].Owner != dead {
		t.Fatalf("after the late cleanup: %+v", ls)
	}
	// Its end in turn is cleaned up; then leasehold run gets a greater token.
	later := machineRequestsAt(t, cleanup, sfn.CleanupStateRelease, "arn:cleanup:3", time.Now(), event(dead, time.Now()), nil)
	if _, err := send(t, client, later); err != nil {
		t.Fatalf("cleanup of the redriven execution: %v", err)
	}
	b, err := leasehold(ctx, "run", "--store", u, "--no-wait", "nightly", "--", "sh", "-c", `echo "$LEASEHOLD_TOKEN"`).Output()
	if err != nil {
		t.Fatalf("leasehold run after the cleanup: %v", err)
	}
	last, _ := strconv.ParseUint(string(b[:len(b)-1]), 10, 64)
	if last <= redriven {
		t.Fatalf("run's token %d after the machine's %d", last, redriven)
	}
}
