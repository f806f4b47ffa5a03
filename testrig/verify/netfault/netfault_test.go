package netfault_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/netfault"
)

func TestMain(m *testing.M) { verify.Main(m) }

// grants returns, per key, the return times (Mono) of the acquires that
// were granted, in order.
func grants(h *verify.History) map[string][]int64 {
	calls := map[string]string{}
	out := map[string][]int64{}
	for _, ev := range h.Events {
		id := ev.Worker + "/" + strconv.FormatInt(ev.Seq, 10)
		switch {
		case ev.E == "call" && ev.Op == "acquire":
			calls[id] = ev.Key
		case ev.E == "ret" && ev.Op == "acquire" && ev.OK:
			if k, ok := calls[id]; ok {
				out[k] = append(out[k], ev.T)
			}
		}
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	return out
}

// firstAfter returns the first grant of key after t (Mono), or false.
func firstAfter(gs map[string][]int64, key string, t int64) (int64, bool) {
	ts := gs[key]
	i := sort.Search(len(ts), func(i int) bool { return ts[i] > t })
	if i == len(ts) {
		return 0, false
	}
	return ts[i], true
}

// recovery measures, after each fault healed, how long each key took to be
// granted again (within the quiet period before the next fault).
type recovery struct {
	pairs, within, none int           // (heal, key) pairs; granted within 2 × TTL; not granted before the next fault
	worst               time.Duration // longest wait for a grant after a heal
	last                time.Duration // longest wait over the keys after the last heal
}

func measure(gs map[string][]int64, keys []string, faults []netfault.Done, ttl time.Duration) recovery {
	var r recovery
	for _, f := range faults {
		for _, k := range keys {
			r.pairs++
			t, ok := firstAfter(gs, k, f.To)
			if !ok || (f.Next != 0 && t > f.Next) {
				r.none++
				continue
			}
			d := time.Duration(t - f.To)
			r.worst = max(r.worst, d)
			if d <= 2*ttl {
				r.within++
			}
		}
	}
	if len(faults) > 0 {
		heal := faults[len(faults)-1].To
		for _, k := range keys {
			if t, ok := firstAfter(gs, k, heal); ok {
				r.last = max(r.last, time.Duration(t-heal))
			}
		}
	}
	return r
}

// netStores are the stores with a network, by tier.
func netStores() []string {
	return verify.Size([]string{"redis", "server"}, verify.Networked())
}

// TestNetworkFaults is R6: the lock workload runs through a TCP proxy in
// front of the store while a seeded schedule injects latency (50–500 ms
// with jitter), blackholes (1–3 × TTL), connection resets and sliced
// streams, upstream and/or downstream, with quiet periods between. Pass:
// as R3 — the oracle finds 0 lost, duplicated or stale-accepted writes and
// 0 writes after the writer's deadline; porcupine finds every key
// linearizable (undecided fails); 0 token regressions; 0 overlapping
// critical sections — and every key is granted again after the last fault
// heals. That wait is measured against 2 × TTL and reported; the test only
// asserts a generous bound, as CI machines are noisy.
func TestNetworkFaults(t *testing.T) {
	for _, name := range verify.AllStores {
		t.Run(name, func(t *testing.T) {
			if name == "sqlite" {
				t.Skip("sqlite is embedded in its clients: there is no network to break")
			}
			if !slices.Contains(netStores(), name) {
				t.Skip("long tier only (LEASEHOLD_LONG=1)")
			}
			networkFaults(t, name)
		})
	}
}

func networkFaults(t *testing.T, name string) {
	tg := verify.StartTarget(t, name)
	px, err := netfault.NewProxy(tg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	// TTL 1 s: latency up to 500 ms each way still leaves a renewal time
	// to land most of the time. etcd's leases have whole-second TTLs with a
	// 2 s minimum, so there a 1 s lease would stay held 2 s: use 2 s.
	url, ttl, note := tg.Fit(tg.URLFor(px.Addr()), time.Second)
	if note != "" {
		note = "; " + note
	}
	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	// Enough keys that each key's history stays near 1,000 operations,
	// which porcupine decides quickly even with many indeterminate ones.
	keys := make([]string, verify.Size(3, 24))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	// WriteMargin TTL/2: a holder writes only with half its TTL to spare.
	// The oracle is reached directly (not through the proxy), but on a
	// loaded 2-core machine a write has been seen to arrive 350 ms after
	// the check that preceded it (TTL/4 margin, postgres, long tier).
	g := verify.StartWorkers(t, 4, verify.WorkerConfig{Store: url, Keys: keys, Clients: 2, TTL: ttl,
		Oracle: o.URL(), Hold: 50 * time.Millisecond, WriteMargin: ttl / 2, Seed: 606})

	began := time.Now()
	length := verify.Size(30*time.Second, 5*time.Minute)
	faults, err := px.Run(context.Background(), netfault.NewSchedule(ttl, 6), length)
	if err != nil {
		t.Fatalf("fault schedule: %v", err)
	}
	if len(faults) == 0 {
		t.Fatal("no fault was applied")
	}
	heal := faults[len(faults)-1].To
	// After the last fault heals, wait until every key has been granted
	// again (a generous bound: CI never fails on timing alone), and at
	// least 2 s, so that the history ends with clean operations.
	const bound = 90 * time.Second
	var gs map[string][]int64
	for wait := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		gs = grants(g.History())
		all := true
		for _, k := range keys {
			if _, ok := firstAfter(gs, k, heal); !ok {
				all = false
			}
		}
		if all && time.Since(wait) >= 2*time.Second {
			break
		}
		if time.Since(wait) > bound {
			t.Errorf("some key was not granted within %s after the last fault healed (store %s: %s; through the proxy: %s)",
				bound, tg.Addr, probe(tg.Addr), probe(px.Addr()))
			break
		}
	}
	g.Stop(2 * time.Minute)
	ran := time.Since(began)
	h := g.History()
	checkStart := time.Now()
	res := verify.Check(h, verify.CheckOptions{})
	or := o.Check()
	rec := measure(grants(h), keys, faults, ttl)
	kinds := map[string]int{}
	for _, f := range faults {
		kinds[f.Kind]++
	}
	for i, f := range faults {
		t.Logf("fault %d: %s", i, f)
	}
	t.Logf("history: %s (checked in %s)", res, time.Since(checkStart).Round(time.Millisecond))
	t.Logf("oracle: %+v", or)
	t.Logf("indeterminate operations by error:\n%s", unknownErrors(h))
	violations := res.Violations() + or.Violations()
	verify.Report(t, verify.Row{Suite: "R6", Store: name, Ops: res.Ops, Faults: px.Applied(),
		Violations: violations, Checker: res.Checker(),
		Note: fmt.Sprintf("%d faults in %s (latency %d, blackhole %d, reset %d, slicer %d), TTL %s; %d writes accepted, %d rejected; %d indeterminate ops; after the last heal every key granted within %s (2×TTL = %s); after every heal %d/%d (heal, key) pairs granted within 2×TTL, %d not before the next fault, longest wait %s%s",
			len(faults), ran.Round(time.Second), kinds["latency"], kinds["blackhole"], kinds["reset"], kinds["slicer"], ttl,
			or.Accepted, or.Rejected, res.Indeterminate, rec.last.Round(time.Millisecond), 2*ttl,
			rec.within, rec.pairs, rec.none, rec.worst.Round(time.Millisecond), note)})
	if violations > 0 || !res.Passed() || res.Checker() != "ok" {
		first := res.FirstBad
		if first == "" {
			first = or.First
		}
		t.Fatalf("%d violations, checker %s: %s\n%s\noracle: %+v\nworker logs:\n%s", violations, res.Checker(), first, res, or, tailLines(g.Logs(), 60))
	}
	if or.Accepted == 0 {
		t.Fatalf("no write was accepted\nworker logs:\n%s", tailLines(g.Logs(), 60))
	}
}

// unknownErrors summarises the errors of the indeterminate operations.
func unknownErrors(h *verify.History) string {
	n := map[string]int{}
	for _, ev := range h.Events {
		if ev.E == "ret" && ev.Unk {
			msg := ev.Msg
			if len(msg) > 160 {
				msg = msg[:160]
			}
			n[ev.Op+": "+msg]++
		}
	}
	type kv struct {
		k string
		v int
	}
	var list []kv
	for k, v := range n {
		list = append(list, kv{k, v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v })
	var b strings.Builder
	for i, e := range list {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more kinds\n", len(list)-i)
			break
		}
		fmt.Fprintf(&b, "  %5d %s\n", e.v, e.k)
	}
	return b.String()
}

// probe says whether addr accepts a TCP connection and answers a byte
// (a failed-recovery diagnostic: is the engine itself still there?).
func probe(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		return "write: " + err.Error()
	}
	b := make([]byte, 64)
	n, err := c.Read(b)
	if n == 0 {
		return fmt.Sprintf("connected, no answer (%v)", err)
	}
	return fmt.Sprintf("answered %q", b[:n])
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
