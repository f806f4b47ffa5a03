package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/workflow"
)

// workflowFile is the --workflows file: a list of definitions, each with
// the strategy to run it with.
type workflowFile struct {
	Workflows []struct {
		Name        string              `json:"name"`
		Initial     string              `json:"initial"`
		Transitions map[string][]string `json:"transitions"`
		Strategy    string              `json:"strategy"` // optimistic, pessimistic, lease, adaptive (default)
		// LockWait and LeaseTTL are Go durations ("5s"); empty: the
		// defaults of workflow.Config.
		LockWait string `json:"lock_wait"`
		LeaseTTL string `json:"lease_ttl"`
	} `json:"workflows"`
}

// loadWorkflows reads definitions and runs them on the server's own
// backend (its records and leases).
func loadWorkflows(path string, b server.Backend, reg prometheus.Registerer) (map[string]*workflow.Workflows, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f workflowFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st := server.StoreOf(b)
	rs, ok := st.(leasehold.RecordStore)
	if !ok {
		return nil, fmt.Errorf("this backend keeps no records")
	}
	out := map[string]*workflow.Workflows{}
	for _, d := range f.Workflows {
		if _, dup := out[d.Name]; dup {
			return nil, fmt.Errorf("%s: workflow %q defined twice", path, d.Name)
		}
		strategy := workflow.Strategy(d.Strategy)
		if strategy == "" {
			strategy = workflow.Adaptive
		}
		cfg := workflow.Config{Records: rs, Leases: st, Strategy: strategy, Registerer: reg}
		for _, dur := range []struct {
			field, v string
			to       *time.Duration
		}{{"lock_wait", d.LockWait, &cfg.LockWait}, {"lease_ttl", d.LeaseTTL, &cfg.LeaseTTL}} {
			if dur.v == "" {
				continue
			}
			v, err := time.ParseDuration(dur.v)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("%s: workflow %q: %s %q is not a positive duration (such as \"5s\")", path, d.Name, dur.field, dur.v)
			}
			*dur.to = v
		}
		w, err := workflow.New(workflow.Definition{Name: d.Name, Initial: d.Initial, Transitions: d.Transitions}, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: workflow %q: %w", path, d.Name, err)
		}
		out[d.Name] = w
	}
	return out, nil
}

// leaseInsteadOfPessimistic names the definitions (sorted) whose strategy
// is pessimistic but which are served as a lease: the backend takes no
// row locks (the in-process engine; a --store other than PostgreSQL).
func leaseInsteadOfPessimistic(flows map[string]*workflow.Workflows) []string {
	var out []string
	for name, w := range flows {
		if w.Strategy() == workflow.Pessimistic && w.Serves() != workflow.Pessimistic {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
