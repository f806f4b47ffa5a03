package sfn

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// node runs one of the testdata scripts with the npm packages that
// scripts/engines.sh installs (asl-validator, jsonata).
func node(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	cmd := enginetest.NodeCommand(t, append([]string{filepath.Join("testdata", script)}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node %s: %v\n%s", script, err, stderr)
	}
	return out
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("f%d.json", time.Now().UnixNano()))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// made is what gen (Generate, Cleanup, CloudFormation) makes of c: the
// JSON and the object it decodes to.
func made(t *testing.T, gen func(Config) ([]byte, error), c Config) ([]byte, map[string]any) {
	t.Helper()
	b, err := gen(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return b, m
}

func generate(t *testing.T, c Config) (string, map[string]any) {
	t.Helper()
	def, m := made(t, Generate, c)
	p := filepath.Join(t.TempDir(), "machine.json")
	if err := os.WriteFile(p, def, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, m
}

var lambdaConfig = Config{
	Table: "leasehold", Lock: "nightly-import",
	LambdaARN: "arn:aws:lambda:eu-west-1:123456789012:function:import", LambdaTimeout: 5 * time.Minute,
	TTL: time.Hour, MaxClockSkew: 2 * time.Second, Wait: 5 * time.Minute, MaxAttempts: 50, MaxDelay: 20 * time.Second,
}

var taskConfig = Config{
	Table: "leasehold", Lock: "batch",
	Task: json.RawMessage(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.sync",
		"Arguments": {"Cluster": "c", "TaskDefinition": "t", "LaunchType": "FARGATE"}, "End": true}`),
	TTL: 30 * time.Minute, TaskGrace: time.Minute,
}

type validation struct {
	IsValid bool  `json:"isValid"`
	Errors  []any `json:"errors"`
}

func TestGeneratedMachinesAreValid(t *testing.T) {
	for _, c := range []Config{lambdaConfig, taskConfig} {
		p, _ := generate(t, c)
		var v validation
		if err := json.Unmarshal(node(t, "validate.js", p), &v); err != nil {
			t.Fatal(err)
		}
		if !v.IsValid {
			t.Errorf("asl-validator rejects the machine for %q: %v", c.Lock, v.Errors)
		}
	}
	// The validator is not a check that cannot fail: a machine with a
	// dangling transition is rejected.
	_, m := generate(t, lambdaConfig)
	m["States"].(map[string]any)[StateAcquire].(map[string]any)["Next"] = "Nowhere"
	var v validation
	if err := json.Unmarshal(node(t, "validate.js", writeJSON(t, m)), &v); err != nil {
		t.Fatal(err)
	}
	if v.IsValid {
		t.Error("asl-validator accepts a machine whose Acquire goes to a missing state")
	}
}

// eval evaluates the JSONata expressions of one state.
func eval(t *testing.T, machine string, scenario map[string]any) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(node(t, "eval.js", machine, writeJSON(t, scenario)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func TestExpressionsEvaluate(t *testing.T) {
	p, _ := generate(t, lambdaConfig)
	entered := "2026-11-29T10:00:00.250Z"
	enteredMs := time.Date(2026, 11, 29, 10, 0, 0, 250e6, time.UTC).UnixMilli()
	exec := "arn:aws:states:eu-west-1:123456789012:execution:m:run-1"
	ctx := map[string]any{"Execution": map[string]any{"Id": exec}, "State": map[string]any{"EnteredTime": entered}}
	input := map[string]any{"file": "s3://bucket/key"}

	init := eval(t, p, map[string]any{"state": StateInit, "input": input, "context": ctx})
	if got := dig(init, "Assign", "lh_input", "file"); got != "s3://bucket/key" {
		t.Errorf("Init assigns lh_input.file = %v", got)
	}
	if got := dig(init, "Assign", "lh_deadline"); got != float64(enteredMs+(5*time.Minute).Milliseconds()) {
		t.Errorf("Init assigns lh_deadline = %v, want entry + the 5m wait", got)
	}

	acq := eval(t, p, map[string]any{"state": StateAcquire, "input": input, "context": ctx,
		"result": map[string]any{"Attributes": map[string]any{"Token": map[string]any{"N": "42"}}},
		"vars":   map[string]any{"lh_input": input, "lh_attempt": 0}})
	vals := dig(acq, "Arguments", "ExpressionAttributeValues").(map[string]any)
	want := map[string]string{
		":me": exec, ":now": strconv.FormatInt(enteredMs, 10),
		":expires": strconv.FormatInt(enteredMs+time.Hour.Milliseconds(), 10),
		":stale":   strconv.FormatInt(enteredMs-2000, 10),
	}
	for k, w := range want {
		v := vals[k].(map[string]any)
		got := v["S"]
		if got == nil {
			got = v["N"]
		}
		if got != w {
			t.Errorf("Acquire %s = %v, want %s", k, got, w)
		}
	}
	if got := dig(acq, "Arguments", "Key", "LockKey", "S"); got != "nightly-import" {
		t.Errorf("Acquire's key = %v", got)
	}
	if got := dig(acq, "Assign", "lh_token"); got != "42" {
		t.Errorf("Acquire assigns lh_token = %v, want \"42\"", got)
	}
	if got := dig(acq, "Assign", "lh_expires"); got != float64(enteredMs+time.Hour.Milliseconds()) {
		t.Errorf("Acquire assigns lh_expires = %v", got)
	}
	if got := dig(acq, "Assign", "lh_redrives"); got != float64(0) {
		t.Errorf("Acquire assigns lh_redrives = %v, want 0 (no RedriveCount in the context)", got)
	}
	lh := dig(acq, "Assign", "leasehold")
	if dig(lh, "token") != float64(42) || dig(lh, "owner") != exec || dig(lh, "lock") != "nightly-import" {
		t.Errorf("Acquire assigns leasehold = %v", lh)
	}
	if got := dig(acq, "Output", "file"); got != "s3://bucket/key" {
		t.Errorf("Acquire's output passes the input on: %v", got)
	}

	task := eval(t, p, map[string]any{"state": StateTask, "input": input, "context": ctx,
		"result":      map[string]any{"Payload": map[string]any{"done": true}},
		"errorOutput": map[string]any{"Error": "Boom", "Cause": "it broke"},
		"vars": map[string]any{"lh_token": "42", "lh_redrives": 0,
			"leasehold": map[string]any{"lock": "nightly-import", "owner": exec, "token": 42}}})
	payload := dig(task, "Arguments", "Payload")
	if dig(payload, "file") != "s3://bucket/key" || dig(payload, "leasehold", "token") != float64(42) ||
		dig(payload, "leasehold", "owner") != exec || dig(payload, "leasehold", "lock") != "nightly-import" {
		t.Errorf("task payload = %v", payload)
	}
	if dig(task, "Output", "done") != true {
		t.Errorf("task output = %v", task["Output"])
	}
	if got := dig(task, "Catch").([]any)[0].(map[string]any)["Assign"].(map[string]any)["lh_error"]; dig(got, "Error") != "Boom" {
		t.Errorf("Catch assigns lh_error = %v", got)
	}
	// The state's timeout outlasts the function's own 5m by the start
	// allowance, so a timed-out state means an ended function.
	if task["TimeoutSeconds"] != float64(310) {
		t.Errorf("task timeout %v, want 310 (Lambda timeout 5m + 10s)", task["TimeoutSeconds"])
	}

	rel := eval(t, p, map[string]any{"state": StateRelease, "input": map[string]any{"done": true}, "context": ctx,
		"vars": map[string]any{"lh_token": "42"}})
	rv := dig(rel, "Arguments", "ExpressionAttributeValues").(map[string]any)
	if dig(rv, ":token", "N") != "42" || dig(rv, ":me", "S") != exec || dig(rel, "Output", "done") != true {
		t.Errorf("Release evaluates to %v", rel)
	}
	fail := eval(t, p, map[string]any{"state": StateTaskFailed, "vars": map[string]any{"lh_error": map[string]any{"Error": "Boom", "Cause": "it broke"}}})
	if fail["Error"] != "Boom" || fail["Cause"] != "it broke" {
		t.Errorf("TaskFailed = %v", fail)
	}
}

func TestConfigErrors(t *testing.T) {
	bad := []func(c *Config){
		func(c *Config) { c.Table = "x" },
		func(c *Config) { c.Table = "bad table" },
		func(c *Config) { c.Lock = "" },
		func(c *Config) { c.Lock = "a\nb" },
		func(c *Config) { c.LambdaARN = "" },
		func(c *Config) { c.Task = json.RawMessage(`{"Type":"Task","Resource":"x"}`) },
		func(c *Config) { c.LambdaARN = "arn:aws:s3:::bucket" },
		func(c *Config) { c.TTL = time.Second },
		func(c *Config) { c.MaxAttempts = 100000 },
		func(c *Config) { c.MaxDelay = time.Millisecond },
		func(c *Config) { c.Margin = 2 * time.Hour },
		func(c *Config) {
			c.LambdaARN = ""
			c.Task = json.RawMessage(`{"Type":"Pass"}`)
		},
		func(c *Config) {
			c.LambdaARN = ""
			c.Task = json.RawMessage(`{"Type":"Task","Resource":"r","Catch":[]}`)
		},
		func(c *Config) {
			c.LambdaARN = ""
			c.Task = json.RawMessage(`{"Type":"Task","Resource":"r","QueryLanguage":"JSONPath"}`)
		},
		func(c *Config) { c.LambdaARN, c.Task = "", json.RawMessage(`not json`) },
		// Lock names: the store's rules (control characters, UTF-8,
		// length, the records' key space).
		func(c *Config) { c.Lock = "a\x1fb" },
		func(c *Config) { c.Lock = "a\u0085b" },
		func(c *Config) { c.Lock = "\xff" },
		func(c *Config) { c.Lock = strings.Repeat("x", 257) },
		func(c *Config) { c.Lock = "\x1erecord/k" },
		// The Lambda function's own timeout: required, and within the lease.
		func(c *Config) { c.LambdaTimeout = 0 },
		func(c *Config) { c.LambdaTimeout = 1500 * time.Millisecond },
		func(c *Config) { c.LambdaTimeout = 16 * time.Minute },
		func(c *Config) { c.TTL, c.LambdaTimeout, c.Wait = 30*time.Second, 15*time.Second, 0 },
		func(c *Config) { c.TaskGrace = time.Minute },
		// The wait against the attempts and the delay.
		func(c *Config) { c.Wait, c.MaxAttempts, c.MaxDelay = 24*time.Hour, 100, time.Second },
		func(c *Config) { c.Wait, c.MaxAttempts, c.MaxDelay = 0, 0, time.Second },
		func(c *Config) { c.Wait, c.MaxDelay = 5*time.Second, 20*time.Second },
		func(c *Config) { c.Margin = 500 * time.Millisecond },
		func(c *Config) { c.Name = "bad name" },
	}
	for _, task := range []string{
		`{"Type":"Task","Resource":"r","Parameters":{"a":1}}`,
		`{"Type":"Task","Resource":"r","Arguments":{"a.$":"$.x"}}`,
		`{"Type":"Task","Resource":"r","ResultPath":"$.x"}`,
		`{"Type":"Task","Resource":"r","Retry":[{"ErrorEquals":["States.ALL"]}]}`,
		`{"Type":"Task","Resource":"r","Retry":[{"ErrorEquals":["States.Timeout"]}]}`,
		`{"Type":"Task","Resource":"r","Retry":[{"ErrorEquals":["X"],"MaxAttempts":5000}]}`,
		`{"Type":"Task","Resource":"r","Retry":[{"ErrorEquals":["X"],"MaxAttempts":50,"IntervalSeconds":3600}]}`,
		`{"Type":"Task","Resource":"r","Retry":[{"ErrorEquals":["X"],"BackoffRate":0.5}]}`,
		`{"Type":"Task","Resource":"r","Assign":{"lh_token":"1"}}`,
		`{"Type":"Task","Resource":"r","Assign":{"leasehold":"1"}}`,
		`{"Type":"Task","Resource":"r","TimeoutSeconds":"{% 5 %}"}`,
		`{"Type":"Task","Resource":"r","TimeoutSeconds":7200}`,
		`{"Type":"Task","Resource":"r","TimeoutSeconds":60,"HeartbeatSeconds":60}`,
		`{"Type":"Task","Resource":"r"} {}`,
		`null`,
	} {
		c := taskConfig
		c.Task = json.RawMessage(task)
		if _, err := Generate(c); err == nil {
			t.Errorf("task %s accepted", task)
		}
	}
	// A task that invokes Lambda needs the function's timeout, not a grace.
	lambdaTask := taskConfig
	lambdaTask.Task = json.RawMessage(`{"Type":"Task","Resource":"arn:aws:states:::lambda:invoke","Arguments":{"FunctionName":"f"}}`)
	if _, err := Generate(lambdaTask); err == nil {
		t.Error("a task invoking Lambda accepted without --lambda-timeout")
	}
	lambdaTask.TaskGrace, lambdaTask.LambdaTimeout = 0, time.Minute
	if _, err := Generate(lambdaTask); err != nil {
		t.Errorf("a task invoking Lambda with its timeout: %v", err)
	}
	for i, mutate := range bad {
		c := lambdaConfig
		mutate(&c)
		if _, err := Generate(c); err == nil {
			t.Errorf("case %d: bad config accepted", i)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("case %d: empty error", i)
		}
	}
}
