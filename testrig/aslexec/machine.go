package aslexec

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// machine is a parsed state machine definition.
type machine struct {
	StartAt        string
	States         map[string]*state
	TimeoutSeconds float64 // 0: none
}

// state is one state, with the fields of the subset this package runs.
type state struct {
	Name string
	Type string // Pass, Task, Choice, Wait, Succeed, Fail
	Next string
	End  bool

	Arguments any // Task
	Output    any
	HasOutput bool
	Assign    map[string]any

	Resource       string // Task
	TimeoutSeconds any    // Task: a number or "{% %}"; nil: none
	// HeartbeatSeconds (Task: a number or "{% %}"; nil: none): an attempt
	// that sends no heartbeat (Call.Heartbeat) for this long fails with
	// States.HeartbeatTimeout.
	HeartbeatSeconds any
	Retry            []retrier
	Catch            []catcher

	Choices []choiceRule // Choice
	Default string

	Seconds, Timestamp any // Wait

	Error, Cause any // Fail
}

type retrier struct {
	ErrorEquals     []string
	IntervalSeconds float64
	MaxAttempts     int
	BackoffRate     float64
	MaxDelaySeconds float64 // 0: no cap
	JitterStrategy  string  // "FULL" or "NONE"
}

// exit is where a catcher or a choice rule goes, and what it gives the
// next state.
type exit struct {
	Next      string
	Output    any
	HasOutput bool
	Assign    map[string]any
}

// decodeExit reads an exit's fields of a catcher or a choice rule.
func decodeExit(f map[string]json.RawMessage, e *exit) []error {
	_, e.HasOutput = f["Output"]
	return []error{decode(f, "Next", &e.Next), decode(f, "Output", &e.Output), decode(f, "Assign", &e.Assign)}
}

type catcher struct {
	ErrorEquals []string
	exit
}

type choiceRule struct {
	Condition any
	exit
}

// fields each state type may have (besides Type, Comment, QueryLanguage);
// anything else is refused, so that a machine using what this executor
// does not implement fails loudly instead of running differently.
var allowed = map[string][]string{
	"Pass":    {"Next", "End", "Output", "Assign"},
	"Task":    {"Next", "End", "Output", "Assign", "Arguments", "Resource", "TimeoutSeconds", "HeartbeatSeconds", "Retry", "Catch", "Credentials"},
	"Choice":  {"Choices", "Default", "Output", "Assign"},
	"Wait":    {"Next", "End", "Output", "Assign", "Seconds", "Timestamp"},
	"Succeed": {"Output"},
	"Fail":    {"Error", "Cause"},
}

// parseMachine decodes a definition and checks that it stays inside the
// subset: JSONata everywhere, the six state types, known fields only,
// transitions to existing states.
func parseMachine(def []byte) (*machine, error) {
	var raw struct {
		StartAt        string
		QueryLanguage  string
		TimeoutSeconds float64
		States         map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(def, &raw); err != nil {
		return nil, fmt.Errorf("aslexec: definition: %w", err)
	}
	if raw.QueryLanguage != "JSONata" {
		return nil, fmt.Errorf("aslexec: QueryLanguage %q: only JSONata machines are implemented", raw.QueryLanguage)
	}
	m := &machine{StartAt: raw.StartAt, States: map[string]*state{}, TimeoutSeconds: raw.TimeoutSeconds}
	names := make([]string, 0, len(raw.States))
	for n := range raw.States {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		st, err := parseState(name, raw.States[name])
		if err != nil {
			return nil, err
		}
		m.States[name] = st
	}
	if m.States[m.StartAt] == nil {
		return nil, fmt.Errorf("aslexec: StartAt %q is not a state", m.StartAt)
	}
	for _, st := range m.States {
		targets := []string{st.Next, st.Default}
		for _, c := range st.Catch {
			targets = append(targets, c.Next)
		}
		for _, c := range st.Choices {
			targets = append(targets, c.Next)
		}
		for _, t := range targets {
			if t != "" && m.States[t] == nil {
				return nil, fmt.Errorf("aslexec: state %s: transition to missing state %q", st.Name, t)
			}
		}
	}
	return m, nil
}

func parseState(name string, f map[string]json.RawMessage) (*state, error) {
	st := &state{Name: name}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("aslexec: state %s: %s", name, fmt.Sprintf(format, args...))
	}
	if err := decode(f, "Type", &st.Type); err != nil || st.Type == "" {
		return nil, bad("no Type")
	}
	ok, known := allowed[st.Type]
	if !known {
		return nil, bad("type %s is not implemented (only %s)", st.Type, "Pass, Task, Choice, Wait, Succeed, Fail")
	}
	var ql string
	_ = decode(f, "QueryLanguage", &ql)
	if ql != "" && ql != "JSONata" {
		return nil, bad("QueryLanguage %s is not implemented", ql)
	}
	for k := range f {
		switch k {
		case "Type", "Comment", "QueryLanguage":
			continue
		}
		found := false
		for _, a := range ok {
			found = found || a == k
		}
		if !found {
			return nil, bad("field %s is not implemented for a %s state", k, st.Type)
		}
	}
	errs := []error{
		decode(f, "Next", &st.Next), decode(f, "End", &st.End),
		decode(f, "Arguments", &st.Arguments), decode(f, "Assign", &st.Assign),
		decode(f, "Resource", &st.Resource), decode(f, "TimeoutSeconds", &st.TimeoutSeconds),
		decode(f, "HeartbeatSeconds", &st.HeartbeatSeconds),
		decode(f, "Default", &st.Default), decode(f, "Seconds", &st.Seconds),
		decode(f, "Timestamp", &st.Timestamp), decode(f, "Error", &st.Error), decode(f, "Cause", &st.Cause),
		decode(f, "Output", &st.Output),
	}
	_, st.HasOutput = f["Output"]
	var retry []map[string]json.RawMessage
	errs = append(errs, decode(f, "Retry", &retry))
	for _, r := range retry {
		rt := retrier{IntervalSeconds: 1, MaxAttempts: 3, BackoffRate: 2, JitterStrategy: "NONE"}
		errs = append(errs, decode(r, "ErrorEquals", &rt.ErrorEquals), decode(r, "IntervalSeconds", &rt.IntervalSeconds),
			decode(r, "MaxAttempts", &rt.MaxAttempts), decode(r, "BackoffRate", &rt.BackoffRate),
			decode(r, "MaxDelaySeconds", &rt.MaxDelaySeconds), decode(r, "JitterStrategy", &rt.JitterStrategy))
		if len(rt.ErrorEquals) == 0 {
			return nil, bad("a retrier without ErrorEquals")
		}
		st.Retry = append(st.Retry, rt)
	}
	var catch []map[string]json.RawMessage
	errs = append(errs, decode(f, "Catch", &catch))
	for _, c := range catch {
		var ct catcher
		errs = append(append(errs, decode(c, "ErrorEquals", &ct.ErrorEquals)), decodeExit(c, &ct.exit)...)
		if len(ct.ErrorEquals) == 0 || ct.Next == "" {
			return nil, bad("a catcher needs ErrorEquals and Next")
		}
		st.Catch = append(st.Catch, ct)
	}
	var choices []map[string]json.RawMessage
	errs = append(errs, decode(f, "Choices", &choices))
	for _, c := range choices {
		var cr choiceRule
		errs = append(append(errs, decode(c, "Condition", &cr.Condition)), decodeExit(c, &cr.exit)...)
		if cr.Condition == nil || cr.Next == "" {
			return nil, bad("a choice rule needs Condition and Next (JSONata)")
		}
		st.Choices = append(st.Choices, cr)
	}
	for _, err := range errs {
		if err != nil {
			return nil, bad("%v", err)
		}
	}
	switch st.Type {
	case "Task":
		if st.Resource == "" {
			return nil, bad("no Resource")
		}
	case "Choice":
		if len(st.Choices) == 0 {
			return nil, bad("no Choices")
		}
	case "Wait":
		if (st.Seconds == nil) == (st.Timestamp == nil) {
			return nil, bad("want exactly one of Seconds and Timestamp")
		}
	}
	switch st.Type {
	case "Pass", "Task", "Wait":
		if (st.Next == "") == !st.End {
			return nil, bad("want exactly one of Next and End")
		}
	}
	return st, nil
}

func decode(f map[string]json.RawMessage, key string, out any) error {
	raw, ok := f[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: %v", key, err)
	}
	return nil
}

// matches reports whether a retrier's or catcher's ErrorEquals matches the
// error name, as Step Functions does: "States.ALL" matches every error but
// States.Runtime and States.DataLimitExceeded; "States.TaskFailed" matches
// every error but States.Timeout (and those two).
func matches(errorEquals []string, name string) bool {
	uncatchable := name == "States.Runtime" || name == "States.DataLimitExceeded"
	for _, e := range errorEquals {
		switch {
		case e == name:
			return true
		case e == "States.ALL" && !uncatchable:
			return true
		case e == "States.TaskFailed" && !uncatchable && name != "States.Timeout" && !strings.HasPrefix(name, "States.Query"):
			return true
		}
	}
	return false
}
