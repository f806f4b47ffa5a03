package etcd

import (
	"context"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify/partition"
)

// foreverTTL is what a member whose lessor is not the leader's reports as
// a lease's remaining time: every lease is kept "forever" there.
const foreverTTL = int64(time.Duration(1<<63-1) / time.Second)

// TestJudgeDemotedLeader: a 3-member cluster in network namespaces; a
// follower is cut off from the other two for 4 s and comes back with a
// higher raft term, which makes the leader step down at its first
// heartbeat. The other follower does not hear of it until a new leader is
// elected, and meanwhile forwards TimeToLive to the old leader, which
// answers that every lease has 9223372036 s left. A store attached to that
// follower asks about a lease meanwhile; it must not count the lease alive
// on such an answer (R7 on etcd found "held" answered so for a lease whose
// TTL had run out).
// judgeCluster starts a 3-member cluster in network namespaces and a
// store attached to one follower only, o (through a forwarder into the
// client namespace); l is the leader, f the other follower, and leader
// waits until the members agree on one.
func judgeCluster(t *testing.T) (nw *partition.Net, cl *partition.Cluster, s *Store, l, f, o int, leader func() int) {
	if miss := partition.Missing(); miss != "" {
		enginetest.Unavailable(t, "network namespaces", "the test builds network namespaces and nftables rules, which need root, ip (iproute2) and nft (nftables); missing here: "+miss)
	}
	bin := os.Getenv("LEASEHOLD_TEST_ETCD_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("etcd"); err != nil {
			enginetest.Missing(t, "etcd", "$LEASEHOLD_TEST_ETCD_BIN is empty and etcd is not in PATH")
		}
	}
	nw = partition.NewNet(t, 3, 1)
	cl = partition.StartEtcd(t, nw, bin, "c0")
	leader = func() int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			l, err := cl.Leader()
			if err == nil {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("no leader: %v", err)
			}
		}
	}
	l = leader()
	f, o = (l+1)%3, (l+2)%3

	// The store reaches member o only, through a forwarder into the
	// client namespace.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go partition.ForwardVia(ln, cl.Endpoints()[o], partition.DialIn(nw.Clients[0].NS))
	s = openStore(t, "etcd://"+ln.Addr().String())

	return nw, cl, s, l, f, o, leader
}

func TestJudgeDemotedLeader(t *testing.T) {
	nw, _, s, _, f, _, leader := judgeCluster(t)
	var mu sync.Mutex
	var answers []int64 // the TTLs judge was told in the current call
	forever := 0
	s.ttlHook = func(r *clientv3.LeaseTimeToLiveResponse) {
		mu.Lock()
		defer mu.Unlock()
		answers = append(answers, r.TTL)
		if r.TTL == foreverTTL {
			forever++
		}
	}
	ctx := context.Background()
	g, err := s.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}

	var cut [][2]string
	for j := range nw.Members {
		if j != f {
			cut = append(cut, [2]string{nw.Members[f].Name, nw.Members[j].Name})
		}
	}
	calls, alive := 0, 0
	for round := 1; round <= 4 && forever == 0; round++ {
		if err := nw.Partition(cut...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		if err := nw.Heal(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			// Ask etcd each time, not what the store learned before.
			s.spares.mu.Lock()
			delete(s.spares.seen, g.ID)
			s.spares.mu.Unlock()
			mu.Lock()
			answers = answers[:0]
			mu.Unlock()
			jctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			rem, ok, err := s.judge(jctx, g.ID, 30*time.Second)
			cancel()
			calls++
			if err != nil {
				continue // no leader long enough; an error is a fair answer
			}
			if !ok {
				t.Fatalf("round %d: judge says the lease is gone; it has 30 s", round)
			}
			alive++
			mu.Lock()
			last := answers[len(answers)-1]
			mu.Unlock()
			if last == foreverTTL {
				t.Fatalf("round %d: judge counted the lease alive (%s left) on a TimeToLive answer of %d s, which only a member that is not the leader gives", round, rem, last)
			}
			if until, _ := s.spares.aliveUntil(g.ID); time.Until(until) > time.Duration(30+maxPromoteExtension)*time.Second {
				t.Fatalf("round %d: the store takes the lease to be alive until %s", round, until)
			}
		}
		leader()
		t.Logf("round %d: %d judge calls, %d alive, %d answers of %d s", round, calls, alive, forever, foreverTTL)
	}
	if forever == 0 {
		t.Fatalf("4 rounds of cutting off a follower and healing: no TimeToLive answer from a leader that stepped down reached the store; the test tested nothing")
	}
}

// TestJudgeStoppedLeader: the leader of a 3-member cluster is stopped
// (SIGSTOP) for 8 s. A store attached to a follower asks about a lease at
// once: the follower still takes the stopped member for leader and sends
// the request on to it, where it waits. The followers elect a new leader
// within a few election timeouts, and the follower answers new requests
// from it; the store must ask again rather than wait for the first (the
// red team of 6a86695 found calls stuck 6-8 s behind one request, and the
// 5 s error coming after up to 7.8 s).
func TestJudgeStoppedLeader(t *testing.T) {
	_, cl, s, l, _, _, leader := judgeCluster(t)
	ctx := context.Background()
	g, err := s.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Signal(l, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	const stop = 12 * time.Second
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := cl.Signal(l, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer resume()
	// A prober asks the same member every 100 ms, each request cut at
	// 500 ms: when it first gets the new leader's answer, the member
	// answers fresh requests.
	answered := make(chan time.Duration, 1)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		for pctx.Err() == nil {
			rctx, cancel := context.WithTimeout(pctx, 500*time.Millisecond)
			resp, err := s.cli.TimeToLive(rctx, g.ID)
			cancel()
			if err == nil && resp.TTL >= 1 && fromLeader(resp) {
				answered <- time.Since(stopped)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	rem, ok, err := s.judge(jctx, g.ID, 30*time.Second)
	cancel()
	took := time.Since(stopped)
	resume()
	t.Logf("judge: %s left, alive %v, err %v, after %s", rem, ok, err, took.Round(time.Millisecond))
	if err != nil || !ok {
		t.Fatalf("judge of a 30 s lease with the leader stopped: alive %v, err %v after %s; want alive from the new leader", ok, err, took.Round(time.Millisecond))
	}
	var first time.Duration
	select {
	case first = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatalf("the prober got no answer from the new leader through the member")
	}
	t.Logf("the member first answered a fresh request %s after the stop", first.Round(time.Millisecond))
	if took > first+3*time.Second {
		t.Fatalf("judge returned %s after the leader stopped, %s after the member answered fresh requests: it waited on the request sent on to the stopped leader", took.Round(time.Millisecond), (took - first).Round(time.Millisecond))
	}
	resume()
	leader()
}

// TestListRemainingAtReturn: a List waits for every lease's answer; the
// Remaining of a lease answered at once must not be the time it had left
// then, when another lease's answer took a second more (here: a lease in
// its last second, which the store asks about every 25 ms until etcd
// revokes it). The red team of 6a86695 saw a List of 6.8 s report 1.5 s
// left of a lease that had ended 5 s before it returned.
func TestListRemainingAtReturn(t *testing.T) {
	u := queueURL(t)
	s, other := openStore(t, u), openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// "a": granted by s, which knows its lease's time without asking.
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "a", Owner: "o1", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// "b": granted by another store, 2 s, never renewed: s must ask etcd,
	// which says 0 in its last second until it revokes it.
	if _, err := other.TryAcquire(ctx, leasehold.AcquireRequest{Name: "b", Owner: "o2", TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for tries := 0; ; tries++ {
		g, err := other.cli.Get(ctx, other.leaseKey("b"), clientv3.WithRange(grantEnd(other.leaseKey("b"))))
		if err != nil {
			t.Fatal(err)
		}
		cg, _, held := grantOf(g.Kvs)
		if !held {
			t.Fatalf("b ended before its last second was seen")
		}
		r, err := other.cli.TimeToLive(ctx, clientv3.LeaseID(cg.kv.Lease))
		if err != nil {
			t.Fatal(err)
		}
		if r.TTL == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	recs, err := s.List(ctx, "")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var listed *leasehold.Record
	for i := range recs {
		if recs[i].Name == "a" {
			listed = &recs[i]
		}
	}
	if listed == nil {
		t.Fatalf("List %v: no a", recs)
	}
	t.Logf("List took %s; a: %s left by List, %s by the Get after it", took.Round(time.Millisecond), listed.Remaining.Round(time.Millisecond), got.Remaining.Round(time.Millisecond))
	if took < 200*time.Millisecond {
		t.Fatalf("List took %s: b's last second was not waited out; the test tested nothing", took)
	}
	if listed.Remaining > got.Remaining+50*time.Millisecond {
		t.Fatalf("List said a had %s left, the Get right after it %s: List counted a's time from its answer, %s before it returned", listed.Remaining, got.Remaining, took)
	}
}

// TestListRechecksEndedLease: a List whose last answer comes seconds after
// its first (here the answer about "b" is held back 3 s in the store,
// as a loaded machine or a stalled member does) must not return a lease
// that ended meanwhile: "a" (2 s, never renewed) was answered at once with
// 1.5 s left, and had ended and been revoked by the time the List
// returned. The red team's re-check of 5f0a92b saw Lists of 2-5 s on a
// loaded machine return such leases with 0 left.
func TestListRechecksEndedLease(t *testing.T) {
	u := queueURL(t)
	s, other := openStore(t, u), openStore(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := other.TryAcquire(ctx, leasehold.AcquireRequest{Name: "b", Owner: "o2", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease := func(name string) clientv3.LeaseID {
		g, err := other.cli.Get(ctx, other.leaseKey(name), clientv3.WithRange(grantEnd(other.leaseKey(name))))
		if err != nil {
			t.Fatal(err)
		}
		cg, _, held := grantOf(g.Kvs)
		if !held {
			t.Fatalf("%s not held", name)
		}
		return clientv3.LeaseID(cg.kv.Lease)
	}
	bLease := lease("b")
	var held sync.Once
	s.ttlHook = func(r *clientv3.LeaseTimeToLiveResponse) {
		if clientv3.LeaseID(r.ID) == bLease {
			held.Do(func() { time.Sleep(3 * time.Second) })
		}
	}
	a, err := other.TryAcquire(ctx, leasehold.AcquireRequest{Name: "a", Owner: "o1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	recs, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(granted)
	names := map[string]leasehold.Record{}
	for _, r := range recs {
		names[r.Name] = r
	}
	t.Logf("List returned %d records %s after a's grant (token %d; b's %d)", len(recs), took.Round(time.Millisecond), a.Token, b.Token)
	if took < 3*time.Second {
		t.Fatalf("List took %s: the answer about b was not held back", took)
	}
	if _, ok := names["b"]; !ok {
		t.Errorf("List lost b, held for 30 s: %v", recs)
	}
	if r, ok := names["a"]; ok {
		t.Fatalf("List returned a (%s left) %s after its 2 s grant, never renewed: it had ended", r.Remaining, took.Round(time.Millisecond))
	}
}
