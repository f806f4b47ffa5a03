package workflowbench

import (
	"fmt"
	"strings"
)

// Faults lists what must hold in any run, whatever the timings, and did
// not: leasehold's strategies (not the baselines, which may lie or apply
// twice: that is what they are) lose and duplicate nothing and meet no
// error; adaptive applies every advance and, in approve, one application
// per round with every other caller told who applied it.
func (res *Result) Faults() []string {
	var out []string
	for _, r := range res.Rows {
		if r.Baseline {
			continue
		}
		at := fmt.Sprintf("%s %s on %s", r.Workload, r.System, r.Engine)
		if r.Check != "ok" {
			out = append(out, at+": "+r.Check)
		}
		if n := r.Counts[kError]; n != 0 {
			out = append(out, fmt.Sprintf("%s: %d errors", at, n))
		}
		if !strings.HasPrefix(r.System, "adaptive") {
			continue
		}
		switch r.Workload {
		case "advance":
			if r.Applied() != r.Intended {
				out = append(out, fmt.Sprintf("%s: applied %d of %d", at, r.Applied(), r.Intended))
			}
		case "approve":
			if r.Applied() != r.Rounds || r.Told != r.Intended-r.Rounds {
				out = append(out, fmt.Sprintf("%s: %d applied in %d rounds, %d told who (want %d)", at, r.Applied(), r.Rounds, r.Told, r.Intended-r.Rounds))
			}
		}
	}
	return out
}

// Baselines counts the baselines that ran (made at least one call).
func (res *Result) Baselines() int {
	seen := map[string]bool{}
	for _, r := range res.Rows {
		if r.Baseline && r.Calls > 0 {
			seen[r.System] = true
		}
	}
	return len(seen)
}
