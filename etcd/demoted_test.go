package etcd

import (
	"context"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
func TestJudgeDemotedLeader(t *testing.T) {
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
	nw := partition.NewNet(t, 3, 1)
	cl := partition.StartEtcd(t, nw, bin, "c0")
	leader := func() int {
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
	l := leader()
	f, o := (l+1)%3, (l+2)%3

	// The store reaches member o only, through a forwarder into the
	// client namespace.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go partition.ForwardVia(ln, cl.Endpoints()[o], partition.DialIn(nw.Clients[0].NS))
	s := openStore(t, "etcd://"+ln.Addr().String())

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
