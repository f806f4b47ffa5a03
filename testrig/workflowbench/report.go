package workflowbench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

func label(r Row) string {
	if r.Baseline {
		return r.System
	}
	return "leasehold " + r.System
}

func writeTable(out io.Writer, cfg *Config, wl string, rows []Row) {
	switch wl {
	case "advance":
		fmt.Fprintf(out, "### advance: %d workers × %d transitions n → n+1 on one instance\n\n", cfg.Workers, cfg.PerWorker)
		fmt.Fprintln(out, "| strategy | data on | applied/s | avg | p50 | p99 | success | applied | already-done | told success, not applied | wrong-state | exhausted | errors | calls | lost or double? |")
		fmt.Fprintln(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	case "approve":
		fmt.Fprintf(out, "### approve: %d rounds of %d workers asking PENDING → APPROVED of a fresh instance at once\n\n", cfg.Rounds, cfg.Workers)
		fmt.Fprintln(out, "| strategy | data on | avg | p50 | p99 | success | applied | already-done, told who | told success, not applied | wrong-state | exhausted | errors | one application per round? |")
		fmt.Fprintln(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	}
	for _, r := range rows {
		c := r.Counts
		switch wl {
		case "advance":
			fmt.Fprintf(out, "| %s | %s | %.0f | %s | %s | %s | %.1f %% | %d | %d | %d | %d | %d | %d | %d | %s |\n",
				label(r), r.Engine, r.AppliedPerSec(), fmtDur(r.Avg()), fmtDur(r.Pct(50)), fmtDur(r.Pct(99)), 100*r.Success(),
				c[kApplied], c[kAlreadyDone], c[kClaimed], c[kWrongState], c[kExhausted], c[kError], r.Calls, check(r.Check))
		case "approve":
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %.1f %% | %d | %d | %d | %d | %d | %d | %s |\n",
				label(r), r.Engine, fmtDur(r.Avg()), fmtDur(r.Pct(50)), fmtDur(r.Pct(99)), 100*r.Success(),
				c[kApplied], r.Told, c[kClaimed], c[kWrongState], c[kExhausted], c[kError], check(r.Check))
		}
	}
	fmt.Fprintln(out)
}

func check(s string) string {
	if s == "ok" {
		return "none"
	}
	return strings.ReplaceAll(s, "|", "/")
}

// Goal evaluates the experiment's goal on PostgreSQL: in advance, adaptive
// applies 100 % exactly once, with at least 3 × the applied/s of the best
// baseline (the document's strategy with the most applied/s, of the three
// as it describes them) and a p99 no worse than that baseline's; in
// approve, one application per round and every other caller told who.
func Goal(rows []Row) string {
	var b strings.Builder
	find := func(wl, system, engine string) (Row, bool) {
		for _, r := range rows {
			if r.Workload == wl && r.System == system && r.Engine == engine {
				return r, true
			}
		}
		return Row{}, false
	}
	if a, ok := find("advance", "adaptive", "postgres"); ok {
		var best Row
		found := false
		for _, r := range rows {
			if r.Workload == "advance" && r.Baseline && !strings.Contains(r.System, "as printed") && (!found || r.AppliedPerSec() > best.AppliedPerSec()) {
				best, found = r, true
			}
		}
		fmt.Fprintf(&b, "**Goal, advance (PostgreSQL)**: adaptive applied %d of %d (%.1f %%), check: %s; %.0f applied/s, p99 %s",
			a.Applied(), a.Intended, 100*a.Success(), check(a.Check), a.AppliedPerSec(), fmtDur(a.Pct(99)))
		if found {
			ratio := a.AppliedPerSec() / max(best.AppliedPerSec(), 1e-9)
			met := a.Applied() == a.Intended && a.Check == "ok" && ratio >= 3 && a.Pct(99) <= best.Pct(99)
			fmt.Fprintf(&b, "; best baseline %q: %.0f applied/s, p99 %s → %.1f × its applied/s, p99 %s its. **%s**.\n",
				best.System, best.AppliedPerSec(), fmtDur(best.Pct(99)), ratio,
				map[bool]string{true: "≤", false: ">"}[a.Pct(99) <= best.Pct(99)], map[bool]string{true: "Met", false: "Not met"}[met])
		} else {
			b.WriteString("; no baseline ran.\n")
		}
	}
	tailGoal(&b, rows, "redis")
	if a, ok := find("approve", "adaptive", "postgres"); ok {
		others := a.Intended - a.Counts[kApplied]
		met := a.Check == "ok" && a.Told == others && a.Counts[kError] == 0
		fmt.Fprintf(&b, "**Goal, approve (PostgreSQL)**: adaptive applied %d times in %d rounds (check: %s); %d of the %d other callers were told who applied, %d errors. **%s**.\n",
			a.Counts[kApplied], a.Rounds, check(a.Check), a.Told, others, a.Counts[kError], map[bool]string{true: "Met", false: "Not met"}[met])
	}
	return b.String()
}

// TailBound is the p99 every strategy of leasehold must stay under in
// advance (the tail goal).
const TailBound = time.Second

// tailGoal evaluates the tail goal on engine: in advance, every strategy
// of leasehold there applies every transition, loses and duplicates
// nothing, with a p99 under TailBound; and adaptive there has at least 5 ×
// the applied/s of the best baseline (of the three as the document
// describes them) of the same run.
func tailGoal(b *strings.Builder, rows []Row, engine string) {
	var ours []Row
	var best Row
	found := false
	for _, r := range rows {
		if r.Workload != "advance" {
			continue
		}
		if r.Baseline && !strings.Contains(r.System, "as printed") && (!found || r.AppliedPerSec() > best.AppliedPerSec()) {
			best, found = r, true
		}
		if !r.Baseline && r.Engine == engine {
			ours = append(ours, r)
		}
	}
	if len(ours) == 0 {
		return
	}
	met := true
	var over []string
	var adaptive *Row
	for i, r := range ours {
		if r.Applied() != r.Intended || r.Check != "ok" || r.Pct(99) >= TailBound {
			met = false
			over = append(over, fmt.Sprintf("%s (applied %d of %d, p99 %s, check: %s)", r.System, r.Applied(), r.Intended, fmtDur(r.Pct(99)), check(r.Check)))
		}
		if r.System == "adaptive" {
			adaptive = &ours[i]
		}
	}
	fmt.Fprintf(b, "**Goal, advance tails (%s)**: ", engine)
	if len(over) == 0 {
		fmt.Fprintf(b, "all %d strategies applied every transition, nothing lost or doubled, p99 < %s", len(ours), fmtDur(TailBound))
	} else {
		fmt.Fprintf(b, "not within the bound: %s", strings.Join(over, "; "))
	}
	switch {
	case adaptive == nil:
		met = false
		b.WriteString("; adaptive did not run")
	case !found:
		met = false
		b.WriteString("; no baseline ran")
	default:
		ratio := adaptive.AppliedPerSec() / max(best.AppliedPerSec(), 1e-9)
		fmt.Fprintf(b, "; adaptive %.0f applied/s, best baseline %q %.0f applied/s → %.1f ×", adaptive.AppliedPerSec(), best.System, best.AppliedPerSec(), ratio)
		met = met && ratio >= 5
	}
	fmt.Fprintf(b, ". **%s**.\n", map[bool]string{true: "Met", false: "Not met"}[met])
}
