package wrappers

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// beats returns the records of a process that beat every 5 time units
// from..to.
func beats(role string, pid int, lease string, token uint64, from, to int64) []Record {
	var out []Record
	for t := from; t <= to; t += 5 {
		out = append(out, Record{Kind: 'B', Role: role, Pid: pid, Sup: "s", Lease: lease, Token: token, T: t})
	}
	return out
}

// tree returns a child beating from..childTo and a grandchild from+1..grandTo.
func tree(lease string, token uint64, from, childTo, grandTo int64) []Record {
	pid := int(token) * 10
	return append(beats("child", pid, lease, token, from, childTo), beats("grandchild", pid+1, lease, token, from+1, grandTo)...)
}

func TestCheckSequentialTrees(t *testing.T) {
	var recs []Record
	recs = append(recs, tree("a", 1, 0, 100, 98)...)
	recs = append(recs, tree("a", 2, 110, 300, 290)...)
	recs = append(recs, tree("b", 1, 50, 200, 200)...) // another name: no overlap
	res := Check(recs, CheckOptions{})
	if len(res.Trees) != 3 || res.Violations() != 0 {
		t.Fatalf("want 3 trees and no violation, got %d trees, overlaps %v, late %v", len(res.Trees), res.Overlaps, res.Late)
	}
	if res.Trees[0].Procs != 2 {
		t.Fatalf("want 2 processes in the first tree, got %d", res.Trees[0].Procs)
	}
}

func TestCheckSurvivingGrandchild(t *testing.T) {
	var recs []Record
	// The child of token 1 died at 100; its grandchild beat on to 500.
	recs = append(recs, tree("a", 1, 0, 100, 500)...)
	recs = append(recs, tree("a", 2, 300, 600, 600)...)
	recs = append(recs, tree("a", 3, 700, 800, 800)...)
	res := Check(recs, CheckOptions{})
	if len(res.Overlaps) != 1 {
		t.Fatalf("want 1 overlap, got %v", res.Overlaps)
	}
	o := res.Overlaps[0]
	if o.Trees[0].Token != 1 || o.Trees[1].Token != 2 || o.From != 300 || o.To != 496 {
		t.Fatalf("want tokens 1 and 2 overlapping 300..496 (the grandchild's last beat), got %s (%d..%d)", o, o.From, o.To)
	}
	if !strings.Contains(o.String(), "token 1") {
		t.Fatalf("the overlap does not name its trees: %s", o)
	}
}

func TestCheckOneBeatOverlapCaught(t *testing.T) {
	// Tree 2's first beat is the same instant as tree 1's last: alive at once.
	recs := append(tree("a", 1, 0, 100, 100), tree("a", 2, 100, 200, 200)...)
	if res := Check(recs, CheckOptions{}); len(res.Overlaps) != 1 {
		t.Fatalf("want 1 overlap, got %v", res.Overlaps)
	}
}

func TestCheckForceRelease(t *testing.T) {
	ttl := 1000 * time.Nanosecond
	var recs []Record
	recs = append(recs, tree("a", 1, 0, 400, 400)...) // forced at 100..110, stopped at 400
	recs = append(recs, tree("a", 2, 150, 600, 600)...)
	recs = append(recs, tree("a", 3, 700, 2000, 2000)...) // forced at 800..810, alive past 1810
	recs = append(recs, tree("a", 4, 900, 950, 950)...)
	forces := []Force{{Lease: "a", Token: 1, Call: 100, Return: 110}, {Lease: "a", Token: 3, Call: 800, Return: 810}}
	res := Check(recs, CheckOptions{TTL: ttl, Forces: forces})
	if res.Excused != 1 {
		t.Fatalf("want the overlap of tokens 1 and 2 excused, got %d excused, overlaps %v", res.Excused, res.Overlaps)
	}
	if len(res.Late) != 1 || res.Late[0].Token != 3 {
		t.Fatalf("want token 3 late, got %v", res.Late)
	}
	if len(res.Overlaps) != 1 || res.Overlaps[0].Trees[1].Token != 4 {
		t.Fatalf("want the late tree 3 overlapping tree 4, got %v", res.Overlaps)
	}
	if res.Violations() != 2 {
		t.Fatalf("want 2 violations, got %d", res.Violations())
	}
	if res.AfterForce != 290 {
		t.Fatalf("want tree 1 alive 290 after the force's answer, got %s", res.AfterForce)
	}
	// An overlap that began before the force is not excused by it.
	recs = append(tree("b", 1, 0, 400, 400), tree("b", 2, 50, 600, 600)...)
	res = Check(recs, CheckOptions{TTL: ttl, Forces: []Force{{Lease: "b", Token: 1, Call: 100, Return: 110}}})
	if len(res.Overlaps) != 1 {
		t.Fatalf("an overlap before the force: want 1, got %v", res.Overlaps)
	}
}

func TestCheckPermits(t *testing.T) {
	var recs []Record
	recs = append(recs, tree("s/permit/0", 1, 0, 300, 300)...)
	recs = append(recs, tree("s/permit/1", 1, 10, 300, 300)...)
	recs = append(recs, tree("s/permit/0", 2, 400, 500, 500)...)
	opts := CheckOptions{Permits: map[string]int{"s": 2}}
	if res := Check(recs, opts); res.Violations() != 0 {
		t.Fatalf("2 of 2 permits: want no violation, got %v", res.Overlaps)
	}
	// Two permits' trees at once again, then a third tree while two are
	// alive: a second holder of permit 0, caught by the semaphore's bound
	// and by its permit's.
	recs = append(recs, tree("s/permit/1", 2, 450, 480, 480)...)
	recs = append(recs, tree("s/permit/0", 3, 200, 250, 250)...)
	res := Check(recs, opts)
	var sem, lease int
	for _, o := range res.Overlaps {
		if o.Lease == "s" {
			sem++
		} else {
			lease++
		}
	}
	if sem != 1 || lease != 1 {
		t.Fatalf("want 1 semaphore overlap and 1 permit overlap, got %d and %d: %v", sem, lease, res.Overlaps)
	}
}

func TestParseLog(t *testing.T) {
	log := "S child 12 run0.1 r13/run 7 100\nB child 12 run0.1 r13/run 7 105\nB grandchild 13 run0.1 r13/run 7 106\nE child 12 run0.1 r13/run 7 200\nB child 12 run0\n"
	recs, bad, err := ParseLog(strings.NewReader(log))
	if err != nil || bad != 1 || len(recs) != 4 {
		t.Fatalf("want 4 records and 1 bad line, got %d, %d, %v", len(recs), bad, err)
	}
	want := Record{Kind: 'B', Role: "grandchild", Pid: 13, Sup: "run0.1", Lease: "r13/run", Token: 7, T: 106}
	if recs[2] != want {
		t.Fatalf("got %+v, want %+v", recs[2], want)
	}
	spec := commandSpec{log: "x/beats.log", min: time.Second, max: 2 * time.Second, beat: 5 * time.Millisecond}
	got, err := parseSpec(spec.String())
	if err != nil || got != spec {
		t.Fatalf("spec round trip: got %+v, %v", got, err)
	}
	if _, err := parseSpec(fmt.Sprintf("a;1s;%s", "x")); err == nil {
		t.Fatal("want an error for a bad spec")
	}
}

func TestCheckFreeze(t *testing.T) {
	var recs []Record
	recs = append(recs, tree("f", 1, 0, 600, 600)...)     // frozen 100..500, gone 100 after the thaw
	recs = append(recs, tree("f", 2, 300, 800, 800)...)   // granted while 1 was frozen
	recs = append(recs, tree("f", 3, 900, 2000, 2000)...) // frozen 1000..1400, alive past 1400 + 200
	recs = append(recs, tree("f", 4, 1300, 1350, 1350)...)
	opts := CheckOptions{FreezeBound: 200, Freezes: []Freeze{{Lease: "f", Token: 1, Stop: 100, Thaw: 500}, {Lease: "f", Token: 3, Stop: 1000, Thaw: 1400}}}
	res := Check(recs, opts)
	if res.Thawed != 1 || res.Excused != 0 {
		t.Fatalf("want the overlap of trees 1 and 2 explained by the freeze, got thawed %d, excused %d, overlaps %v", res.Thawed, res.Excused, res.Overlaps)
	}
	if res.AfterThaw != 100 {
		t.Fatalf("want tree 1 alive 100 after its thaw, got %s", res.AfterThaw)
	}
	if len(res.Late) != 1 || res.Late[0].Token != 3 || len(res.Overlaps) != 1 || res.Overlaps[0].Trees[1].Token != 4 {
		t.Fatalf("want tree 3 late and overlapping tree 4, got late %v, overlaps %v", res.Late, res.Overlaps)
	}
}
