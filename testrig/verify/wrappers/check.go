package wrappers

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Record is one line of the heartbeat log (see MaybeCommand).
type Record struct {
	Kind  byte   // 'S' start, 'B' beat, 'E' exit
	Role  string // "child" or "grandchild"
	Pid   int
	Sup   string // the supervisor, EnvSupervisor
	Lease string // the lease name (a permit's own name for --permits)
	Token uint64
	T     int64 // verify.Mono
}

// ParseLog reads a heartbeat log. It returns the records and the number of
// lines it could not parse (a line cut short; none is expected).
func ParseLog(r io.Reader) ([]Record, int, error) {
	var recs []Record
	bad := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		rec, ok := parseRecord(sc.Text())
		if !ok {
			bad++
			continue
		}
		recs = append(recs, rec)
	}
	return recs, bad, sc.Err()
}

func parseRecord(line string) (Record, bool) {
	f := strings.Fields(line)
	if len(f) != 7 || len(f[0]) != 1 || !strings.Contains("SBE", f[0]) {
		return Record{}, false
	}
	pid, err1 := strconv.Atoi(f[2])
	tok, err2 := strconv.ParseUint(f[5], 10, 64)
	t, err3 := strconv.ParseInt(f[6], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Record{}, false
	}
	return Record{Kind: f[0][0], Role: f[1], Pid: pid, Sup: f[3], Lease: f[4], Token: tok, T: t}, true
}

// Tree is one command's process tree: every process that ran under one
// grant (a lease name and its token). Its lifetime is [First, Last]: from
// its first record to its last, of any of its processes.
type Tree struct {
	Lease       string
	Token       uint64
	Sup         string
	First, Last int64
	Procs       int // processes seen
	// end is Last, or the force-release's call time for a tree excused by
	// a force (its lifetime after the force does not count as holding).
	end int64
}

func (t *Tree) String() string {
	return fmt.Sprintf("%s token %d (supervisor %s, %d processes, alive %d..%d)", t.Lease, t.Token, t.Sup, t.Procs, t.First, t.Last)
}

// Trees groups records into trees, ordered by their first record.
func Trees(recs []Record) []*Tree {
	byKey := map[string]*Tree{}
	pids := map[string]map[int]bool{}
	var out []*Tree
	for _, r := range recs {
		k := r.Lease + "#" + strconv.FormatUint(r.Token, 10)
		t := byKey[k]
		if t == nil {
			t = &Tree{Lease: r.Lease, Token: r.Token, Sup: r.Sup, First: r.T, Last: r.T}
			byKey[k], pids[k] = t, map[int]bool{}
			out = append(out, t)
		}
		t.First, t.Last = min(t.First, r.T), max(t.Last, r.T)
		if !pids[k][r.Pid] {
			pids[k][r.Pid] = true
			t.Procs++
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out
}

// Force is one force-release the harness made: the grant it ended, and
// when it was asked (Call) and answered (Return), on the verify.Mono clock.
type Force struct {
	Lease        string
	Token        uint64
	Call, Return int64
}

// CheckOptions tell Check the bounds and what the harness did.
type CheckOptions struct {
	// Permits maps a semaphore's name to its N: the leases NAME/permit/I
	// may be held by at most N trees at once (each permit by one). Every
	// other lease name may be held by one tree at a time.
	Permits map[string]int
	// TTL is the leases' TTL, the bound on a force-released tree's life
	// after the force (see Check).
	TTL    time.Duration
	Forces []Force
	// Freezes are the trees stopped together with their supervisor (see
	// Freeze); FreezeBound is how long after being continued each may
	// live.
	Freezes     []Freeze
	FreezeBound time.Duration
}

// Freeze is a tree stopped (SIGSTOP) together with its supervisor, at
// Stop, and continued at Thaw (verify.Mono): a fault leasehold cannot see,
// as no process of it runs meanwhile.
type Freeze struct {
	Lease      string
	Token      uint64
	Stop, Thaw int64
}

// Overlap is two trees of one lease alive at once, or (Group set) more
// trees of one semaphore alive at once than it has permits.
type Overlap struct {
	Lease    string // the lease name, or the semaphore's name
	Trees    []*Tree
	From, To int64 // the instants both (all) were alive
}

func (o Overlap) String() string {
	var s []string
	for _, t := range o.Trees {
		s = append(s, t.String())
	}
	return fmt.Sprintf("%s: %d trees alive at once for %s: %s", o.Lease, len(o.Trees),
		time.Duration(o.To-o.From), strings.Join(s, "; "))
}

// Result is what Check found.
type Result struct {
	Trees    []*Tree
	Overlaps []Overlap
	// Late are force-released trees that lived past the force's answer
	// plus one TTL: past their lease's local deadline.
	Late []*Tree
	// Excused counts the overlaps that a force-release explains: the
	// released tree was still alive after another grant, but stopped within
	// the bound.
	Excused int
	// AfterForce is the longest time a force-released tree that was not
	// late lived after the force was answered (0 if none did).
	AfterForce time.Duration
	// Thawed counts the overlaps a freeze explains, and AfterThaw is the
	// longest time a frozen tree lived after it was continued.
	Thawed    int
	AfterThaw time.Duration
}

// Violations is the number of overlaps and late trees.
func (r Result) Violations() int { return len(r.Overlaps) + len(r.Late) }

// Check counts the overlaps of the trees' lifetimes.
//
// Two trees of one lease overlap when their lifetimes intersect; a
// semaphore overlaps when more than N trees of its permits are alive at
// one instant. Lifetimes are measured by heartbeats: a process is known
// alive from its first record to its last, so an overlap shorter than one
// heartbeat period can go unseen, but never one with a process that goes
// on running (it keeps beating). No slack is allowed the other way.
//
// A force-release ends a grant while its holder still believes it holds
// the lease; the holder learns it at its next renewal (within TTL/3) and
// must stop its command by its lease's local deadline, at most one TTL
// after the force was answered. A force-released tree that stopped by
// then counts as holding only until the force was asked (an overlap after
// that is Excused); one that lived longer is Late, a violation. A frozen
// tree (Freeze) is treated alike: it counts as holding until it was
// stopped (an overlap after that is Thawed) if it was gone within
// FreezeBound of its thaw, else it is Late.
func Check(recs []Record, opts CheckOptions) Result {
	trees := Trees(recs)
	res := Result{Trees: trees}
	forced := map[string]Force{}
	for _, f := range opts.Forces {
		forced[f.Lease+"#"+strconv.FormatUint(f.Token, 10)] = f
	}
	frozen := map[string]Freeze{}
	for _, f := range opts.Freezes {
		frozen[f.Lease+"#"+strconv.FormatUint(f.Token, 10)] = f
	}
	var thawed []*Tree
	for _, t := range trees {
		t.end = t.Last
		f, ok := forced[t.Lease+"#"+strconv.FormatUint(t.Token, 10)]
		if z, iced := frozen[t.Lease+"#"+strconv.FormatUint(t.Token, 10)]; iced && !ok {
			if t.Last > z.Thaw+int64(opts.FreezeBound) {
				res.Late = append(res.Late, t)
				continue
			}
			t.end = min(t.Last, z.Stop)
			res.AfterThaw = max(res.AfterThaw, time.Duration(t.Last-z.Thaw))
			thawed = append(thawed, t)
			continue
		}
		if !ok {
			continue
		}
		if t.Last > f.Return+int64(opts.TTL) {
			res.Late = append(res.Late, t)
			continue
		}
		t.end = min(t.Last, f.Call)
		res.AfterForce = max(res.AfterForce, time.Duration(t.Last-f.Return))
	}
	byLease := map[string][]*Tree{}
	var leases []string
	for _, t := range trees {
		if byLease[t.Lease] == nil {
			leases = append(leases, t.Lease)
		}
		byLease[t.Lease] = append(byLease[t.Lease], t)
	}
	for _, l := range leases {
		ts := byLease[l]
		res.Overlaps = append(res.Overlaps, pairs(l, ts, func(t *Tree) int64 { return t.end })...)
		for _, o := range pairs(l, ts, func(t *Tree) int64 { return t.Last }) {
			a, b := o.Trees[0], o.Trees[1]
			if a.end >= b.First && b.end >= b.First {
				continue // an overlap in any case
			}
			if slices.Contains(thawed, a) || slices.Contains(thawed, b) {
				res.Thawed++
			} else {
				res.Excused++
			}
		}
	}
	for sem, n := range opts.Permits {
		var ts []*Tree
		for _, t := range trees {
			if strings.HasPrefix(t.Lease, sem+"/permit/") {
				ts = append(ts, t)
			}
		}
		res.Overlaps = append(res.Overlaps, excess(sem, n, ts)...)
	}
	return res
}

// pairs returns every pair of trees of one lease (ordered by First) whose
// lifetimes [First, end(t)] intersect.
func pairs(lease string, ts []*Tree, end func(*Tree) int64) []Overlap {
	var out []Overlap
	for j, b := range ts {
		if end(b) < b.First {
			continue // stopped before it began to count
		}
		for _, a := range ts[:j] {
			if end(a) >= a.First && end(a) >= b.First {
				out = append(out, Overlap{Lease: lease, Trees: []*Tree{a, b}, From: b.First, To: min(end(a), end(b))})
			}
		}
	}
	return out
}

// excess returns an overlap for each tree that began while n others of
// the semaphore were alive.
func excess(sem string, n int, ts []*Tree) []Overlap {
	var out []Overlap
	for j, b := range ts {
		if b.end < b.First {
			continue
		}
		alive := []*Tree{}
		for _, a := range ts[:j] {
			if a.end >= a.First && a.end >= b.First {
				alive = append(alive, a)
			}
		}
		if len(alive) >= n {
			to := b.end
			for _, a := range alive {
				to = min(to, a.end)
			}
			out = append(out, Overlap{Lease: sem, Trees: append(alive, b), From: b.First, To: to})
		}
	}
	return out
}
