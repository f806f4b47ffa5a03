package workflowbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// advance runs the advance workload on s.
func advance(ctx context.Context, cfg *Config, s *system) (Row, error) {
	n := cfg.Workers * cfg.PerWorker
	wl := fmt.Sprintf("adv%s", runID)
	inst := instanceName(s)
	if err := s.create(ctx, wl, inst, "0"); err != nil {
		return Row{}, err
	}
	row := Row{System: s.name, Engine: s.engine, Workload: "advance", Baseline: s.baseline, Intended: n}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var fatal error
	for w := range cfg.Workers {
		wg.Go(func() {
			<-start
			for j := range cfg.PerWorker {
				req := fmt.Sprintf("w%d-%d", w, j)
				actor := fmt.Sprintf("worker-%d", w)
				t0 := time.Now()
				tctx, cancel := context.WithTimeout(ctx, cfg.TransitionTimeout)
				state, err := s.read(tctx, wl, inst)
				calls := 0
				var r reply
				for err == nil {
					cur, cerr := strconv.Atoi(state)
					if cerr != nil {
						err = fmt.Errorf("state %q is not a number", state)
						break
					}
					if cur >= n {
						r = reply{kind: kExhausted, err: errors.New("the instance reached the last state")}
						break
					}
					calls++
					r = s.call(tctx, wl, w, inst, strconv.Itoa(cur), strconv.Itoa(cur+1), actor, req)
					if (r.kind == kAlreadyDone || r.kind == kWrongState) && r.state != "" && tctx.Err() == nil {
						state = r.state // moved on: ask again from where it is
						continue
					}
					if tctx.Err() != nil && r.kind != kApplied {
						r = reply{kind: kExhausted, err: tctx.Err()}
					}
					break
				}
				cancel()
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if fatal == nil {
						fatal = err
					}
					r.kind = kError
				}
				row.Counts[r.kind]++
				row.Calls += calls
				lat = append(lat, d)
				if r.kind == kError && r.err != nil && row.Check == "" {
					row.Check = "first error: " + r.err.Error()
				}
				mu.Unlock()
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	row.Elapsed = time.Since(t0)
	slices.Sort(lat)
	row.Latency = lat
	errNote := row.Check
	row.Check = verify(ctx, s, wl, inst, row.Counts[kApplied], strconv.Itoa(row.Counts[kApplied]))
	if errNote != "" {
		row.Check += "; " + errNote
	}
	return row, nil
}

// approve runs the approve workload on s.
func approve(ctx context.Context, cfg *Config, s *system) (Row, error) {
	wl := fmt.Sprintf("appr%s", runID)
	row := Row{System: s.name, Engine: s.engine, Workload: "approve", Baseline: s.baseline, Intended: cfg.Rounds * cfg.Workers, Rounds: cfg.Rounds}
	lat := make([]time.Duration, 0, row.Intended)
	var problems []string
	for round := range cfg.Rounds {
		inst := fmt.Sprintf("%s-r%d", instanceName(s), round)
		if err := s.create(ctx, wl, inst, "PENDING"); err != nil {
			return Row{}, err
		}
		replies := make([]reply, cfg.Workers)
		durs := make([]time.Duration, cfg.Workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range cfg.Workers {
			wg.Go(func() {
				<-start
				tctx, cancel := context.WithTimeout(ctx, cfg.TransitionTimeout)
				defer cancel()
				t0 := time.Now()
				replies[w] = s.call(tctx, wl, w, inst, "PENDING", "APPROVED", fmt.Sprintf("admin-%d", w), fmt.Sprintf("approve-%d-%d", round, w))
				durs[w] = time.Since(t0)
			})
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		row.Elapsed += time.Since(t0)
		lat = append(lat, durs...)
		row.Calls += cfg.Workers
		winner, applied := "", 0
		for w, r := range replies {
			row.Counts[r.kind]++
			if r.kind == kApplied {
				applied++
				winner = fmt.Sprintf("approve-%d-%d", round, w)
			}
			if r.kind == kError && len(problems) < 3 {
				problems = append(problems, fmt.Sprintf("round %d: %v", round, r.err))
			}
		}
		for _, r := range replies {
			if r.kind == kAlreadyDone && r.by == winner && applied == 1 {
				row.Told++
			}
		}
		if c := verify(ctx, s, wl, inst, applied, map[bool]string{true: "APPROVED", false: "PENDING"}[applied > 0]); c != "ok" {
			problems = append(problems, fmt.Sprintf("round %d: %s", round, c))
		} else if applied != 1 {
			problems = append(problems, fmt.Sprintf("round %d: %d applications", round, applied))
		}
	}
	slices.Sort(lat)
	row.Latency = lat
	row.Check = "ok"
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], fmt.Sprintf("and %d more", len(problems)-3))
		}
		row.Check = strings.Join(problems, "; ")
	}
	return row, nil
}

// verify compares the instance with what its callers were told.
func verify(ctx context.Context, s *system, wl, inst string, applied int, wantState string) string {
	state, version, hist, err := s.check(ctx, wl, inst)
	if err != nil {
		return "check failed: " + err.Error()
	}
	var bad []string
	if version != uint64(applied) {
		bad = append(bad, fmt.Sprintf("version %d but %d applied", version, applied))
	}
	if state != wantState {
		bad = append(bad, fmt.Sprintf("state %s but %d applied", state, applied))
	}
	if s.history && hist != applied {
		bad = append(bad, fmt.Sprintf("%d history entries but %d applied", hist, applied))
	}
	if len(bad) == 0 {
		return "ok"
	}
	return strings.Join(bad, ", ")
}

func instanceName(s *system) string {
	r := strings.NewReplacer(" ", "-", ":", "", "(", "", ")", "", "×", "x", ",", "", "/", "-")
	return r.Replace(s.engine + "-" + s.name)
}
