package aslexec

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
)

//go:embed jsonata.js
var jsonataJS string

// EnvNodeModules names the node_modules directory (with the npm package
// jsonata) that New uses when Options.NodeModules is empty.
const EnvNodeModules = "LEASEHOLD_TEST_NODE_MODULES"

// ErrNoNode is returned by New when node or the jsonata package cannot be
// found; tests treat it as a missing engine.
var ErrNoNode = errors.New("aslexec: node and the npm package jsonata are needed")

// EvalError is a JSONata evaluation that failed: a Step Functions
// States.QueryEvaluationError.
type EvalError struct {
	Location string // the field, e.g. "Arguments.Payload"
	Message  string
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("JSONata evaluation of %s: %s", e.Location, e.Message)
}

// evaluator is one long-lived node process evaluating templates for every
// execution of an Executor: requests carry ids and are answered as they
// complete, so concurrent executions do not wait for each other.
type evaluator struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wmu   sync.Mutex // serialises request lines
	next  atomic.Int64
	mu    sync.Mutex
	wait  map[int64]chan evalAnswer
	err   error         // set once the process is gone
	gone  chan struct{} // closed when the reader ends
}

type evalAnswer struct {
	V   json.RawMessage `json:"v"`
	Err *struct {
		Loc string `json:"loc"`
		Msg string `json:"msg"`
	} `json:"err"`
	ID int64 `json:"id"`
}

func startEvaluator(modules string) (*evaluator, error) {
	if modules == "" {
		modules = os.Getenv(EnvNodeModules)
	}
	node, err := exec.LookPath("node")
	if modules == "" || err != nil {
		return nil, fmt.Errorf("%w (node in PATH, and $%s or Options.NodeModules)", ErrNoNode, EnvNodeModules)
	}
	if _, err := os.Stat(modules + "/jsonata"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNode, err)
	}
	cmd := exec.Command(node, "-e", jsonataJS)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("aslexec: start node: %w", err)
	}
	ev := &evaluator{cmd: cmd, stdin: stdin, wait: map[int64]chan evalAnswer{}, gone: make(chan struct{})}
	go ev.read(stdout)
	return ev, nil
}

func (ev *evaluator) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 64<<20)
	for sc.Scan() {
		var a evalAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			continue
		}
		ev.mu.Lock()
		ch := ev.wait[a.ID]
		delete(ev.wait, a.ID)
		ev.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	ev.mu.Lock()
	ev.err = fmt.Errorf("aslexec: the node evaluator exited")
	ev.mu.Unlock()
	close(ev.gone)
}

// eval evaluates tmpl (any JSON value; "{% %}" strings are expressions)
// with bindings (variables, and "states"), and decodes the value into out.
// loc names the field in errors.
func (ev *evaluator) eval(ctx context.Context, loc string, tmpl any, bindings map[string]any, out any) error {
	if !hasExpr(tmpl) { // nothing to evaluate: no round trip
		b, err := json.Marshal(tmpl)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, out)
	}
	id := ev.next.Add(1)
	line, err := json.Marshal(map[string]any{"id": id, "v": tmpl, "b": bindings, "loc": loc})
	if err != nil {
		return fmt.Errorf("aslexec: encode the bindings of %s: %w", loc, err)
	}
	ch := make(chan evalAnswer, 1)
	ev.mu.Lock()
	if ev.err != nil {
		ev.mu.Unlock()
		return ev.err
	}
	ev.wait[id] = ch
	ev.mu.Unlock()
	ev.wmu.Lock()
	_, err = ev.stdin.Write(append(line, '\n'))
	ev.wmu.Unlock()
	if err != nil {
		ev.forget(id)
		return fmt.Errorf("aslexec: send to node: %w", err)
	}
	select {
	case a := <-ch:
		if a.Err != nil {
			return &EvalError{Location: a.Err.Loc, Message: a.Err.Msg}
		}
		return json.Unmarshal(a.V, out)
	case <-ev.gone:
		return fmt.Errorf("aslexec: the node evaluator exited")
	case <-ctx.Done():
		ev.forget(id)
		return ctx.Err()
	}
}

func (ev *evaluator) forget(id int64) {
	ev.mu.Lock()
	delete(ev.wait, id)
	ev.mu.Unlock()
}

// close ends the node process and waits for it.
func (ev *evaluator) close() error {
	ev.stdin.Close()
	<-ev.gone
	return ev.cmd.Wait()
}

// hasExpr reports whether v holds a "{% %}" string anywhere.
func hasExpr(v any) bool {
	switch x := v.(type) {
	case string:
		return isExpr(x)
	case []any:
		for _, e := range x {
			if hasExpr(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasExpr(e) {
				return true
			}
		}
	}
	return false
}

func isExpr(s string) bool {
	return len(s) >= 4 && s[:2] == "{%" && s[len(s)-2:] == "%}"
}
