package stepfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sfn"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/aslexec"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// R17 rows for issue 25 items 3 and 5 (the other items' sfn rows are the
// TestR17* scenarios of defects_test.go).

// waitRow is an R17 row of a hold that a Wait state's Timestamp ends
// (issue 25 item 3): Step Functions drops a Timestamp's fraction of a
// second (the executor does too), so a hold whose deadline is not a whole
// second must be rounded up, not cut. The row measures, on the executor's
// clock, when the Wait state ended and when another holder got the lock,
// against the hold's deadline computed from the execution's history as the
// machine computes it (the entries' times cut to milliseconds, as
// $states.context gives them).
type waitRow struct {
	t     *testing.T
	s     *scenario
	hold  string // the machine's hold: "HoldAfterTimeout", ...
	fault string
	ops   int
	mu    sync.Mutex
	bad   []string
	notes []string
}

func newWaitRow(t *testing.T, s *scenario, hold, fault string) *waitRow {
	return &waitRow{t: t, s: s, hold: hold, fault: fault}
}

func (w *waitRow) violation(format string, args ...any) {
	w.t.Helper()
	msg := fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.bad = append(w.bad, msg)
	w.mu.Unlock()
	w.t.Errorf("sfn(wait-timestamps) %s: %s", w.hold, msg)
}

// notBefore checks that what happened at at, not before the hold's
// deadline.
func (w *waitRow) notBefore(what string, at, deadline time.Time) {
	w.t.Helper()
	d := at.Sub(deadline)
	if at.IsZero() {
		w.violation("%s: not found in the history", what)
		return
	}
	if d < 0 {
		w.violation("%s %s before the hold's deadline %s", what, (-d).Round(time.Millisecond), deadline.UTC().Format("15:04:05.000"))
	}
	rel := "after"
	if d < 0 {
		d, rel = -d, "before"
	}
	w.notes = append(w.notes, fmt.Sprintf("%s %s %s the deadline (%s)", what, d.Round(time.Millisecond), rel, deadline.UTC().Format("15:04:05.000")))
}

// report checks the scenario's critical sections (the work, and the next
// holder's) for overlaps and token order and writes the row.
func (w *waitRow) report(evs []verify.Event, n int) {
	w.t.Helper()
	res := verify.Check(&verify.History{Events: evs}, verify.CheckOptions{NoLinearizability: true})
	disorder, _ := tokenOrder(evs)
	violations := len(w.bad) + res.Overlaps + disorder
	if len(evs) != n {
		violations++ // scenario.check has failed the test already
	}
	checker := "ok"
	if violations > 0 {
		checker = "violations"
	}
	note := fmt.Sprintf("%s; %d critical sections, %d overlaps, %d tokens out of order", strings.Join(w.notes, "; "), len(evs), res.Overlaps, disorder)
	if len(w.bad) > 0 {
		note += "; first violation: " + w.bad[0]
	}
	verify.Report(w.t, verify.Row{Suite: "R17", Store: "sfn(wait-timestamps) " + w.hold, Ops: w.ops + len(evs), Faults: 1,
		Violations: violations, Checker: checker, Note: note})
}

// contend is another holder: a Go client of the dynamodb store on the
// scenario's table that tries to take the lock every 10 ms from now until
// it gets it (or ctx ends), and records its critical section (its grant
// to its release, 100 ms later) beside the machines'. The channel gets the
// time the grant was answered, on the wall clock.
func (w *waitRow) contend(ctx context.Context) <-chan time.Time {
	w.t.Helper()
	u, err := url.Parse(enginetest.DynamoDBURL(w.t))
	if err != nil {
		w.t.Fatal(err)
	}
	u.Host = w.s.table
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	st, err := stores.Open(octx, u.String())
	cancel()
	if err != nil {
		w.t.Fatal(err)
	}
	ch := make(chan time.Time, 1)
	w.s.works.Add(1)
	go func() {
		defer w.s.works.Done()
		defer st.Close()
		defer close(ch)
		req := leasehold.AcquireRequest{Name: w.s.lock, Owner: "r17-contender", TTL: 10 * time.Second}
		for ctx.Err() == nil {
			rec, err := st.TryAcquire(ctx, req)
			w.mu.Lock()
			w.ops++
			w.mu.Unlock()
			if err == nil {
				at, from := time.Now(), verify.Mono()
				time.Sleep(100 * time.Millisecond)
				_ = st.Release(context.Background(), w.s.lock, req.Owner, rec.Token)
				w.s.mu.Lock()
				w.s.evs = append(w.s.evs, verify.Event{E: "cs", Worker: "go", Proc: "contender", Owner: req.Owner, Key: w.s.lock,
					Token: rec.Token, From: from, To: verify.Mono()})
				w.s.mu.Unlock()
				ch <- at
				return
			}
			if !errors.Is(err, leasehold.ErrHeld) {
				w.t.Logf("contender: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return ch
}

// atFraction sleeps until the wall clock is f into a second: a hold's
// deadline then has a fraction of about f, which a Wait state that cuts
// it ends about f early (the defect shows whatever the fraction, but
// for less than the executor's own latency it would not be seen).
func atFraction(f time.Duration) {
	d := f - time.Duration(time.Now().Nanosecond())
	if d < 20*time.Millisecond {
		d += time.Second
	}
	time.Sleep(d)
}

// eventAt is the time of the last event of type typ in state st of x's
// history (zero if none).
func eventAt(x *aslexec.Execution, typ, st string) time.Time {
	var at time.Time
	for _, ev := range x.History() {
		if ev.Type == typ && ev.State == st {
			at = ev.At
		}
	}
	return at
}

// milli is t cut to the millisecond, as $states.context's EnteredTime.
func milli(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

// waitCase is a wait row's scenario: a --task machine (the task grace
// 1 s, the state's timeout given) and x, an execution of it whose task's
// work runs on for 10 s, cut at the grace after Step Functions abandoned
// it.
type waitCase struct {
	*waitRow
	c sfn.Config
	p sfn.Plan // Hold, Bound
	x *aslexec.Execution
}

// startWaitCase starts x (when the wall clock is at into a second, if at
// is not 0) and returns once its task's work runs.
func startWaitCase(t *testing.T, hold, fault string, timeout int, at time.Duration) *waitCase {
	t.Helper()
	s := newScenario(t, time.Second)
	wc := &waitCase{waitRow: newWaitRow(t, s, hold, fault), c: s.taskConfig(16*time.Second, timeout)}
	var err error
	if wc.p, err = wc.c.Plan(); err != nil {
		t.Fatal(err)
	}
	def := s.generate(wc.c)
	started := make(chan struct{})
	s.plan["x/r0"] = behaviour{hold: 10 * time.Second, started: started}
	if at > 0 {
		atFraction(at)
	}
	wc.x = s.start(def, "x")
	<-started
	wc.ops++
	return wc
}

// stop stops x half a second into a second, while its task's work runs.
func (wc *waitCase) stop() aslexec.Result {
	wc.t.Helper()
	atFraction(500 * time.Millisecond)
	if err := wc.x.Stop("R17.Stopped", "stopped while the task ran"); err != nil {
		wc.t.Fatal(err)
	}
	r := wc.s.wait(wc.x)
	if r.Status != aslexec.Aborted {
		wc.t.Fatalf("x: %+v, want ABORTED", r)
	}
	return r
}

// TestR17WaitHoldAfterTimeout (issue 25 item 3): a --task times out while
// its work goes on (for the task grace); the machine holds the lock in
// HoldAfterTimeout until min(task entered + bound, now + hold), which
// has a fraction of a second. The Wait state must not end before it, and
// a Go client trying every 10 ms must not get the lock before it or while
// the work runs.
func TestR17WaitHoldAfterTimeout(t *testing.T) {
	t.Parallel()
	wc := startWaitCase(t, sfn.StateHoldAfterTimeout, "task timeout", 1, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	granted := wc.contend(ctx)
	if r := wc.s.wait(wc.x); r.Status != aslexec.Failed || r.Error != "States.Timeout" {
		t.Errorf("x: %+v, want FAILED with States.Timeout", r)
	}
	deadline := milli(eventAt(wc.x, aslexec.EvStateEntered, sfn.StateTask)).Add(wc.p.Bound)
	if hold := milli(eventAt(wc.x, aslexec.EvStateEntered, sfn.StateHoldAfterTimeout)).Add(wc.p.Hold); hold.Before(deadline) {
		deadline = hold
	}
	wc.notBefore("the Wait state ended", eventAt(wc.x, aslexec.EvStateExited, sfn.StateHoldAfterTimeout), deadline)
	wc.notBefore("another holder got the lock", <-granted, deadline)
	wc.report(wc.s.check(2), 2)
}

// TestR17WaitRedriveHold (issue 25 item 3): an execution stopped while its
// --task work runs (the work goes on for the task grace) is redriven at
// once; RedriveHold waits until min(the lease's expiry, now + hold) before
// the execution acquires again and runs its task with a new token. The
// Wait state must not end before that deadline, and the new run's work
// must not overlap the first's.
func TestR17WaitRedriveHold(t *testing.T) {
	t.Parallel()
	wc := startWaitCase(t, sfn.StateRedriveHold, "stop, redrive", 5, 0)
	wc.stop()
	if err := wc.x.Redrive(); err != nil {
		t.Fatal(err)
	}
	if r := wc.s.wait(wc.x); r.Status != aslexec.Succeeded {
		t.Errorf("redriven x: %+v", r)
	}
	wc.ops++
	deadline := milli(eventAt(wc.x, aslexec.EvStateEntered, sfn.StateRedriveHold)).Add(wc.p.Hold)
	wc.notBefore("the Wait state ended", eventAt(wc.x, aslexec.EvStateExited, sfn.StateRedriveHold), deadline)
	wc.notBefore("the redriven run acquired again", eventAt(wc.x, aslexec.EvStateEntered, sfn.StateRedriven), deadline)
	wc.report(wc.s.check(2), 2)
}

// TestR17WaitCleanupHold (issue 25 item 3): an execution stopped while its
// --task work runs (the work goes on for the task grace); the cleanup
// machine, started with the status event as its EventBridge rule would,
// holds until stopDate + hold (stopDate in milliseconds) and then
// releases the lock. The Wait state must not end before that, and a Go
// client trying every 10 ms must not get the lock before it or while the
// work runs.
func TestR17WaitCleanupHold(t *testing.T) {
	t.Parallel()
	wc := startWaitCase(t, "cleanup "+sfn.CleanupStateHold, "stop, cleanup", 5, 0)
	cleanup, err := sfn.Cleanup(wc.c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := wc.stop()
	granted := wc.contend(ctx)
	ev := statusEvent(wc.x, r)
	cl, err := wc.s.ex.Start(cleanup, "cleanup", "cleanup-x", ev)
	if err != nil {
		t.Fatal(err)
	}
	if cr := wc.s.wait(cl); cr.Status != aslexec.Succeeded || cr.Output.(map[string]any)["released"] != true {
		t.Errorf("cleanup: %+v, want it to release the lock", cr)
	}
	wc.ops++
	deadline := time.UnixMilli(ev["detail"].(map[string]any)["stopDate"].(int64)).Add(wc.p.Hold)
	wc.notBefore("the Wait state ended", eventAt(cl, aslexec.EvStateExited, sfn.CleanupStateHold), deadline)
	wc.notBefore("another holder got the lock", <-granted, deadline)
	wc.report(wc.s.check(2), 2)
}

// TestR17Templates (issue 25 item 5): the CloudFormation template and the
// Terraform configuration, generated for many inputs — locks of up to 256
// bytes of characters that %q escapes (quotes, backslashes, format and
// private-use characters) or that take several bytes, table names up to
// 255 characters, Lambda ARNs up to thousands of characters — must each
// keep CloudFormation's limits (the template's Description at most 1,024
// bytes, the EventBridge rule's at most 512 characters), cut a shortened
// field only between whole characters and whole escapes (the lock's
// quoted text still a quoted string, its text a prefix of the lock), and
// carry the lock machine's LoggingConfiguration (logging_configuration),
// its log group, an alarm on Leasehold.LeaseLost, the parameters LogLevel,
// LogRetentionDays and AlarmTopicArn (log_level, log_retention_days,
// alarm_topic_arn), and CloudFormation's Metadata that makes cfn-lint skip
// E3601. No engine: the generator only.
func TestR17Templates(t *testing.T) {
	t.Parallel()
	var cfgs []sfn.Config
	for _, lock := range templateLocks() {
		for _, table := range []string{"t_x", strings.Repeat("T", 255), "lh." + strings.Repeat("a-b_", 60)} {
			for _, fn := range []string{"f", strings.Repeat("F", 140), strings.Repeat("g-", 1000)} {
				cfgs = append(cfgs, templateConfig(lock, table, fn))
			}
		}
	}
	rng := rand.New(rand.NewPCG(verify.Seed(t), 25))
	for range verify.Size(200, 5000) {
		cfgs = append(cfgs, templateConfig(randomLock(rng), randomRun(rng, "abcXYZ019_-.", 3+rng.IntN(253)), randomRun(rng, "abcXYZ019_-", 1+rng.IntN(3000))))
	}
	var bad []string
	kinds := map[string]int{} // violations by check
	violation := func(c sfn.Config, format string, args ...any) {
		kinds[verbs.ReplaceAllString(format, "_")]++
		msg := fmt.Sprintf("lock %d bytes, table %d, ARN %d: ", len(c.Lock), len(c.Table), len(c.LambdaARN)) + fmt.Sprintf(format, args...)
		if len(bad) < 5 {
			t.Error(msg)
		}
		bad = append(bad, msg)
	}
	ops, longest, longestRule := 0, 0, 0
	for _, c := range cfgs {
		if _, err := c.Plan(); err != nil {
			t.Fatalf("input %q: %v", c.Lock, err)
		}
		cf, err := sfn.CloudFormation(c)
		ops++
		if err != nil {
			violation(c, "CloudFormation: %v", err)
		} else {
			d, r := checkCloudFormation(c, cf, func(f string, a ...any) { violation(c, "CloudFormation: "+f, a...) })
			longest, longestRule = max(longest, d), max(longestRule, r)
		}
		tf, err := sfn.Terraform(c)
		ops++
		if err != nil {
			violation(c, "Terraform: %v", err)
		} else {
			longestRule = max(longestRule, checkTerraform(tf, func(f string, a ...any) { violation(c, "Terraform: "+f, a...) }))
		}
	}
	checker := "ok"
	if len(bad) > 0 {
		checker = "violations"
	}
	note := fmt.Sprintf("%d inputs, each a CloudFormation template and a Terraform configuration; the longest Description %d bytes (limit 1,024), the longest rule description %d characters (limit 512)",
		len(cfgs), longest, longestRule)
	if len(bad) > 0 {
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%q %d", k, n))
		}
		slices.Sort(ks)
		note += "; violations by check: " + strings.Join(ks, ", ") + "; first violation: " + bad[0]
	}
	verify.Report(t, verify.Row{Suite: "R17", Store: "sfn(templates)", Ops: ops, Faults: len(cfgs), Violations: len(bad), Checker: checker, Note: note})
}

// verbs are a format's verbs, left out of the note's kinds of violation.
var verbs = regexp.MustCompile(`%[a-z]`)

// templateConfig is a Lambda machine's configuration for the templates.
func templateConfig(lock, table, fn string) sfn.Config {
	return sfn.Config{Table: table, Lock: lock, LambdaARN: "arn:aws:lambda:us-east-1:123456789012:function:" + fn,
		LambdaTimeout: lambdaTimeout, TTL: ttl}
}

// templateRunes are characters of locks: ASCII, characters %q escapes
// (quote, backslash, zero-width space, soft hyphen, private use in the BMP
// and beyond), and printable ones of 2 to 4 bytes.
var templateRunes = []rune{'a', 'Z', '7', '/', ' ', '"', '\\', '\u200b', '\u00ad', '\ue000', '\U000f0000', 'é', '€', '😀'}

// templateLocks are locks at and near the limit of 256 bytes, each made of
// one kind of character, and mixed.
func templateLocks() []string {
	locks := []string{"x"}
	for _, r := range templateRunes {
		locks = append(locks, fill(string(r), 256))
	}
	locks = append(locks, fill("a\"\\\u200b\U000f0000é😀", 256), fill("\\\"", 255), fill("ab\U000f0000", 250))
	return locks
}

// fill repeats s, whole characters only, up to n bytes.
func fill(s string, n int) string {
	var b strings.Builder
	for b.Len() < n {
		for _, r := range s {
			if b.Len()+utf8.RuneLen(r) > n {
				return b.String()
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// randomLock is a lock of 1 to 256 bytes of templateRunes.
func randomLock(rng *rand.Rand) string {
	n := 1 + rng.IntN(256)
	var b strings.Builder
	for {
		r := templateRunes[rng.IntN(len(templateRunes))]
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "a"
	}
	return b.String()
}

// randomRun is n characters of alphabet.
func randomRun(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// descriptionOK checks a description: valid UTF-8 without the replacement
// character (what encoding/json writes for a string cut inside a
// character; no input has one) and within limit, counted by count.
func descriptionOK(what, d string, limit int, count func(string) int, bad func(string, ...any)) int {
	n := count(d)
	if n > limit {
		bad("%s is %d long, over its limit of %d", what, n, limit)
	}
	if !utf8.ValidString(d) || strings.ContainsRune(d, utf8.RuneError) {
		bad("%s is cut inside a character: %q", what, verify.Clip(d, 3))
	}
	return n
}

func bytesLen(s string) int { return len(s) }

// clippedOK checks a field of a description that may have been shortened:
// the whole value, or a prefix of it followed by an ellipsis.
func clippedOK(what, got, full string, bad func(string, ...any)) {
	if got == full {
		return
	}
	if p, ok := strings.CutSuffix(got, "…"); ok && strings.HasPrefix(full, p) {
		return
	}
	bad("%s %q is neither the value nor a prefix of it and an ellipsis", what, verify.Clip(got, 3))
}

// checkCloudFormation checks a CloudFormation template and returns its
// Description's bytes and its rule description's characters.
func checkCloudFormation(c sfn.Config, raw []byte, bad func(string, ...any)) (int, int) {
	var tmpl struct {
		Description string
		Parameters  map[string]json.RawMessage
		Resources   map[string]struct {
			Type       string
			Metadata   map[string]any
			Properties map[string]any
		}
	}
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		bad("not JSON: %v", err)
		return 0, 0
	}
	d := descriptionOK("the Description", tmpl.Description, 1024, bytesLen, bad)
	// "... runs ARN under the lock "LOCK" (DynamoDB table TABLE), ..."
	if _, rest, ok := strings.Cut(tmpl.Description, "runs "); !ok {
		bad("the Description does not name the function: %q", verify.Clip(tmpl.Description, 3))
	} else if arn, rest, ok := strings.Cut(rest, " under the lock "); !ok {
		bad("the Description does not name the lock: %q", verify.Clip(tmpl.Description, 3))
	} else {
		clippedOK("the function ARN", arn, c.LambdaARN, bad)
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			bad("the lock's quoted text is not a whole quoted string (cut inside an escape?): %q", verify.Clip(rest, 3))
		} else {
			lock, _ := strconv.Unquote(q)
			clippedOK("the lock", lock, c.Lock, bad)
			if table, ok := strings.CutPrefix(rest[len(q):], " (DynamoDB table "); !ok {
				bad("the Description does not name the table after the lock: %q", verify.Clip(rest[len(q):], 3))
			} else if table, _, ok = strings.Cut(table, ")"); ok {
				clippedOK("the table", table, c.Table, bad)
			}
		}
	}
	for _, p := range []string{"LogLevel", "LogRetentionDays", "AlarmTopicArn"} {
		if tmpl.Parameters[p] == nil {
			bad("no parameter %s", p)
		}
	}
	rule, logGroups, lostMetrics := 0, 0, map[string]bool{}
	var alarms []map[string]any
	for _, r := range tmpl.Resources {
		switch r.Type {
		case "AWS::Logs::LogGroup":
			logGroups++
		case "AWS::Logs::MetricFilter":
			if strings.Contains(fmt.Sprint(r.Properties["FilterPattern"]), `"Leasehold.LeaseLost"`) {
				ts, _ := r.Properties["MetricTransformations"].([]any)
				for _, tr := range ts {
					if m, ok := tr.(map[string]any); ok {
						lostMetrics[fmt.Sprint(m["MetricName"])] = true
					}
				}
			}
		case "AWS::CloudWatch::Alarm":
			alarms = append(alarms, r.Properties)
		case "AWS::Events::Rule":
			rule = descriptionOK("the rule's Description", fmt.Sprint(r.Properties["Description"]), 512, utf8.RuneCountInString, bad)
		}
	}
	if m, ok := tmpl.Resources[sfn.CFNMachine]; !ok {
		bad("no lock machine (%s)", sfn.CFNMachine)
	} else {
		if m.Properties["LoggingConfiguration"] == nil {
			bad("the lock machine has no LoggingConfiguration")
		}
		meta, _ := json.Marshal(m.Metadata)
		if !strings.Contains(string(meta), `"cfn-lint":{"config":{"ignore_checks":["E3601"]}}`) {
			bad("the lock machine's Metadata does not make cfn-lint skip E3601: %s", meta)
		}
	}
	if logGroups == 0 {
		bad("no log group")
	}
	if !alarmOn(alarms, "MetricName", lostMetrics) {
		bad("no alarm on a metric of Leasehold.LeaseLost (metrics %v)", lostMetrics)
	}
	return d, rule
}

// alarmOn reports whether one of alarms has field (its metric name) in
// metrics.
func alarmOn(alarms []map[string]any, field string, metrics map[string]bool) bool {
	for _, a := range alarms {
		if metrics[fmt.Sprint(a[field])] {
			return true
		}
	}
	return false
}

// checkTerraform checks a Terraform JSON configuration and returns its
// rule description's characters.
func checkTerraform(raw []byte, bad func(string, ...any)) int {
	var conf struct {
		Variable map[string]json.RawMessage
		Resource map[string]map[string]map[string]any
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		bad("not JSON: %v", err)
		return 0
	}
	for _, v := range []string{"log_level", "log_retention_days", "alarm_topic_arn"} {
		if conf.Variable[v] == nil {
			bad("no variable %s", v)
		}
	}
	if m := conf.Resource["aws_sfn_state_machine"]["lock"]; m == nil || m["logging_configuration"] == nil {
		bad("the lock machine (aws_sfn_state_machine.lock) has no logging_configuration")
	}
	if len(conf.Resource["aws_cloudwatch_log_group"]) == 0 {
		bad("no aws_cloudwatch_log_group")
	}
	lost := map[string]bool{}
	for _, f := range conf.Resource["aws_cloudwatch_log_metric_filter"] {
		if strings.Contains(fmt.Sprint(f["pattern"]), `"Leasehold.LeaseLost"`) {
			if m, ok := f["metric_transformation"].(map[string]any); ok {
				lost[fmt.Sprint(m["name"])] = true
			}
		}
	}
	var alarms []map[string]any
	for _, a := range conf.Resource["aws_cloudwatch_metric_alarm"] {
		alarms = append(alarms, a)
	}
	if !alarmOn(alarms, "metric_name", lost) {
		bad("no alarm on a metric of Leasehold.LeaseLost (metrics %v)", lost)
	}
	rule := 0
	for _, r := range conf.Resource["aws_cloudwatch_event_rule"] {
		rule = max(rule, descriptionOK("the rule's description", fmt.Sprint(r["description"]), 512, utf8.RuneCountInString, bad))
	}
	return rule
}
