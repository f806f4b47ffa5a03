package storetest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = int64(time.Millisecond)

func op(client int, in opInput, out opOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: out.Return}
}

func acq(owner, reqID string, ttl, call int64) opInput {
	return opInput{Kind: opAcquire, Owner: owner, RequestID: reqID, TTL: ttl, Call: call}
}

func wait(owner, reqID string, ttl, call int64) opInput {
	return opInput{Kind: opWait, Owner: owner, RequestID: reqID, TTL: ttl, Call: call}
}

func renew(owner string, token uint64, ttl, call int64) opInput {
	return opInput{Kind: opRenew, Owner: owner, Token: token, TTL: ttl, Call: call}
}

func rel(owner string, token uint64, call int64) opInput {
	return opInput{Kind: opRelease, Owner: owner, Token: token, Call: call}
}

// TestMarkQueued: a refusal naming a queue head is marked only if a wait
// of that owner overlapped it.
func TestMarkQueued(t *testing.T) {
	ops := []porcupine.Operation{
		op(1, wait("b", "r1", 100*ms, 0), opOutput{Return: 40 * ms}),
		op(2, acq("c", "r2", 100*ms, 10*ms), opOutput{HolderOwner: "b", Return: 11 * ms}),
		op(2, acq("c", "r3", 100*ms, 50*ms), opOutput{HolderOwner: "b", Return: 51 * ms}),
		op(2, acq("c", "r4", 100*ms, 60*ms), opOutput{HolderOwner: "a", Token: 3, Return: 61 * ms}),
	}
	markQueued(ops)
	for k, want := range []bool{false, true, false, false} {
		if got := ops[k].Output.(opOutput).Queued; got != want {
			t.Errorf("op %d: Queued = %v, want %v", k, got, want)
		}
	}
}

// TestModelVerdicts checks the model on hand-written histories whose
// verdict is known, so that a model that accepts everything cannot pass.
func TestModelVerdicts(t *testing.T) {
	ttl := 100 * ms
	// a is granted token 1 at once; b's wait, from 2ms, ends by its
	// context at 40ms; a releases at 20-30ms.
	aGranted := op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms})
	bWaitEnded := op(1, wait("b", "r2", ttl, 2*ms), opOutput{Return: 40 * ms})
	aReleases := op(0, rel("a", 1, 20*ms), opOutput{OK: true, Return: 30 * ms})
	cases := []struct {
		name  string
		legal bool
		ops   []porcupine.Operation
	}{
		{"grant, then held", true, []porcupine.Operation{
			aGranted,
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 1, Return: 11 * ms}),
		}},
		{"two grants while alive", false, []porcupine.Operation{
			aGranted,
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{OK: true, Token: 2, Return: 11 * ms}),
		}},
		{"takeover after expiry", true, []porcupine.Operation{
			aGranted,
			op(1, acq("b", "r2", ttl, 120*ms), opOutput{OK: true, Token: 2, Return: 121 * ms}),
		}},
		{"held long after expiry", false, []porcupine.Operation{
			aGranted,
			op(1, acq("b", "r2", ttl, 300*ms), opOutput{HolderOwner: "a", Token: 1, Return: 301 * ms}),
		}},
		{"token reused", false, []porcupine.Operation{
			aGranted,
			op(0, rel("a", 1, 2*ms), opOutput{OK: true, Return: 3 * ms}),
			op(1, acq("b", "r2", ttl, 4*ms), opOutput{OK: true, Token: 1, Return: 5 * ms}),
		}},
		{"release by another owner", false, []porcupine.Operation{
			aGranted,
			op(1, rel("b", 1, 2*ms), opOutput{OK: true, Return: 3 * ms}),
		}},
		{"retried acquire gets its grant back", true, []porcupine.Operation{
			aGranted,
			op(0, acq("a", "r1", ttl, 2*ms), opOutput{OK: true, Token: 1, Return: 3 * ms}),
		}},
		{"renew after takeover", false, []porcupine.Operation{
			aGranted,
			op(1, acq("b", "r2", ttl, 120*ms), opOutput{OK: true, Token: 2, Return: 121 * ms}),
			op(0, opInput{Kind: opRenew, Owner: "a", Token: 1, TTL: ttl, Call: 130 * ms}, opOutput{OK: true, Return: 131 * ms}),
		}},
		{"concurrent grant and held: either order", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 10 * ms}),
			op(1, acq("b", "r2", ttl, 1*ms), opOutput{HolderOwner: "a", Token: 1, Return: 9 * ms}),
		}},
		{"indeterminate acquire may have taken effect", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{Unknown: true, Return: 1 << 62}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 1, Return: 11 * ms}),
		}},
		// CI run 62 (TestTargetsRestart/dynamodb, dynalite killed): an
		// acquire left without an answer had been applied; the caller's
		// retry with the same request id got that grant back, its token
		// learnt only then.
		{"retry gets back the grant of an indeterminate acquire", true, []porcupine.Operation{
			aGranted,
			op(0, rel("a", 1, 2*ms), opOutput{OK: true, Return: 3 * ms}),
			op(0, acq("a", "r3", ttl, 4*ms), opOutput{Unknown: true, Return: 1 << 62}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 2, Return: 11 * ms}),
			op(0, acq("a", "r3", ttl, 20*ms), opOutput{OK: true, Token: 2, Return: 21 * ms}),
		}},
		{"retry with another request id gets an indeterminate acquire's grant", false, []porcupine.Operation{
			aGranted,
			op(0, rel("a", 1, 2*ms), opOutput{OK: true, Return: 3 * ms}),
			op(0, acq("a", "r3", ttl, 4*ms), opOutput{Unknown: true, Return: 1 << 62}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 2, Return: 11 * ms}),
			op(0, acq("a", "r4", ttl, 20*ms), opOutput{OK: true, Token: 2, Return: 21 * ms}),
		}},
		{"retry of an indeterminate acquire with a token below it", false, []porcupine.Operation{
			aGranted,
			op(0, rel("a", 1, 2*ms), opOutput{OK: true, Return: 3 * ms}),
			op(0, acq("a", "r3", ttl, 4*ms), opOutput{Unknown: true, Return: 1 << 62}),
			op(0, acq("a", "r3", ttl, 20*ms), opOutput{OK: true, Token: 1, Return: 21 * ms}),
		}},
		{"wait granted at the release", true, []porcupine.Operation{
			aGranted,
			op(1, wait("b", "r2", ttl, 2*ms), opOutput{OK: true, Token: 2, Return: 31 * ms}),
			aReleases,
		}},
		{"wait granted while held", false, []porcupine.Operation{
			aGranted,
			op(1, wait("b", "r2", ttl, 2*ms), opOutput{OK: true, Token: 2, Return: 31 * ms}),
		}},
		{"wait granted after the holder expired", true, []porcupine.Operation{
			aGranted,
			op(1, wait("b", "r2", ttl, 2*ms), opOutput{OK: true, Token: 2, Return: 110 * ms}),
		}},
		{"wait ended, its grant released, tokens go on", true, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 40*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 50*ms), opOutput{OK: true, Token: 3, Return: 51 * ms}),
		}},
		{"wait ended but its grant stayed", false, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 40*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 50*ms), opOutput{HolderOwner: "b", Token: 2, Return: 51 * ms}),
		}},
		{"a wait that ended was seen holding its raced grant", true, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 40*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 32*ms), opOutput{HolderOwner: "b", Token: 2, Return: 33 * ms}),
			op(2, acq("c", "r4", ttl, 34*ms), opOutput{OK: true, Token: 3, Return: 35 * ms}),
		}},
		{"a wait's raced grant seen after the wait returned", false, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 40*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 2, Return: 46 * ms}),
		}},
		{"a wait's raced grant seen within the store's cleanup time", true, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 60*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 2, Return: 46 * ms}),
			op(2, acq("c", "r4", ttl, 61*ms), opOutput{OK: true, Token: 3, Return: 62 * ms}),
		}},
		{"a raced grant made after the wait returned, within the cleanup time", true, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 1040*ms),
			op(0, rel("a", 1, 41*ms), opOutput{OK: true, Return: 42 * ms}),
			op(2, acq("c", "r3", ttl, 50*ms), opOutput{HolderOwner: "b", Token: 2, Return: 51 * ms}),
		}},
		{"a raced grant made after the wait returned, no cleanup time", false, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 40*ms),
			op(0, rel("a", 1, 41*ms), opOutput{OK: true, Return: 42 * ms}),
			op(2, acq("c", "r3", ttl, 50*ms), opOutput{HolderOwner: "b", Token: 2, Return: 51 * ms}),
		}},
		{"a raced grant released by its owner, who learned its token", true, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 1040*ms),
			op(0, rel("a", 1, 41*ms), opOutput{OK: true, Return: 42 * ms}),
			op(1, acq("b", "r3", ttl, 50*ms), opOutput{HolderOwner: "b", Token: 7, Return: 51 * ms}),
			op(1, rel("b", 7, 52*ms), opOutput{OK: true, Return: 53 * ms}),
			op(2, acq("c", "r4", ttl, 54*ms), opOutput{OK: true, Token: 8, Return: 55 * ms}),
		}},
		{"a wait's raced grant seen after the store's cleanup time", false, []porcupine.Operation{
			aGranted,
			bWaitEnded, racedOp(bWaitEnded, 60*ms),
			aReleases,
			op(2, acq("c", "r3", ttl, 65*ms), opOutput{HolderOwner: "b", Token: 2, Return: 66 * ms}),
		}},
		{"free lease refused for a waiting head", true, []porcupine.Operation{
			op(1, wait("b", "r2", ttl, 0), opOutput{Return: 40 * ms}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Queued: true, Return: 11 * ms}),
		}},
		{"free lease refused for nobody waiting", false, []porcupine.Operation{
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Return: 11 * ms}),
		}},
		// etcd conformance under heavy load: a wait was handed the lease,
		// others saw it held, then the wait failed with an error (not its
		// context) and its give-up released the grant long before its TTL.
		{"a failed wait's grant seen, then freed by its give-up", true, []porcupine.Operation{
			op(1, wait("b", "r2", ttl, 0), opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Token: 5, Return: 11 * ms}),
			op(2, acq("c", "r4", ttl, 20*ms), opOutput{OK: true, Token: 6, Return: 21 * ms}),
		}},
		{"a granted holder's lease taken while alive, beside a failed wait", false, []porcupine.Operation{
			aGranted,
			op(1, wait("b", "r2", ttl, 2*ms), opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{OK: true, Token: 2, Return: 11 * ms}),
		}},
		// CI run 52, R7 on etcd: an acquire without an answer was granted,
		// seen held, and ended by the store (endUnheard revokes its etcd
		// lease) well within its TTL.
		{"an unanswered acquire (etcd) seen, then freed by the store", true, []porcupine.Operation{
			op(1, opInput{Kind: opUnheard, Owner: "b", RequestID: "r2", TTL: ttl, Call: 0}, opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Token: 5, Return: 11 * ms}),
			op(2, acq("c", "r4", ttl, 20*ms), opOutput{OK: true, Token: 6, Return: 21 * ms}),
		}},
		{"the same with a plain indeterminate acquire", false, []porcupine.Operation{
			op(1, acq("b", "r2", ttl, 0), opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Token: 5, Return: 11 * ms}),
			op(2, acq("c", "r4", ttl, 20*ms), opOutput{OK: true, Token: 6, Return: 21 * ms}),
		}},
		{"an unanswered acquire (etcd) seen held while a granted holder's lease lived", false, []porcupine.Operation{
			aGranted,
			op(1, opInput{Kind: opUnheard, Owner: "b", RequestID: "r2", TTL: ttl, Call: 2 * ms}, opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Token: 2, Return: 11 * ms}),
		}},
		{"an unanswered acquire (etcd) does not free a granted holder's lease", false, []porcupine.Operation{
			aGranted,
			op(1, opInput{Kind: opUnheard, Owner: "b", RequestID: "r2", TTL: ttl, Call: 2 * ms}, opOutput{Unknown: true, Return: 1 << 62}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{OK: true, Token: 3, Return: 11 * ms}),
		}},
		// R18 redis-sentinel (lag-kill): a's grant was lost in a promotion;
		// b's acquire on the promoted replica, made on facts from before
		// it (the marker came with the replica), reused a's token and was
		// undone by the store's check after it; c saw it held meanwhile.
		{"an undone grant seen while the lost holder may be live", true, []porcupine.Operation{
			aGranted,
			op(9, opInput{Kind: opLose, Call: 2 * ms}, opOutput{Return: 30 * ms}),
			op(1, opInput{Kind: opUndone, Owner: "b", RequestID: "r2", TTL: ttl, Call: 10 * ms}, opOutput{Return: 40 * ms}),
			op(2, acq("c", "r3", ttl, 15*ms), opOutput{HolderOwner: "b", Token: 1, Return: 35 * ms}),
		}},
		{"an undone grant seen after its return", false, []porcupine.Operation{
			aGranted,
			op(9, opInput{Kind: opLose, Call: 2 * ms}, opOutput{Return: 30 * ms}),
			op(1, opInput{Kind: opUndone, Owner: "b", RequestID: "r2", TTL: ttl, Call: 10 * ms}, opOutput{Return: 40 * ms}),
			op(2, acq("c", "r3", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 1, Return: 46 * ms}),
		}},
		{"an undone grant does not free the live holder's lease", false, []porcupine.Operation{
			aGranted,
			op(1, opInput{Kind: opUndone, Owner: "b", RequestID: "r2", TTL: ttl, Call: 10 * ms}, opOutput{Return: 40 * ms}),
			op(2, acq("c", "r3", ttl, 45*ms), opOutput{OK: true, Token: 9, Return: 46 * ms}),
		}},
		// CI run of stop 37 (R18 redis-sentinel, lag-kill): the promoted
		// replica had the grant and its fence but not the renewal made on
		// the old primary during the failover.
		{"a promotion lost a renewal, kept the grant", true, []porcupine.Operation{
			aGranted,
			op(9, opInput{Kind: opLose, Call: 10 * ms}, opOutput{Return: 50 * ms}),
			op(0, renew("a", 1, ttl, 20*ms), opOutput{OK: true, Return: 21 * ms}),
			op(0, renew("a", 1, ttl, 110*ms), opOutput{Return: 111 * ms}),
			op(0, rel("a", 1, 112*ms), opOutput{OK: true, Return: 113 * ms}),
		}},
		{"a renewal refused while alive, no engine restart", false, []porcupine.Operation{
			aGranted,
			op(0, renew("a", 1, ttl, 20*ms), opOutput{OK: true, Return: 21 * ms}),
			op(0, renew("a", 1, ttl, 110*ms), opOutput{Return: 111 * ms}),
		}},
		{"a promotion lost a renewal: no grant before the renewed end", false, []porcupine.Operation{
			aGranted,
			op(9, opInput{Kind: opLose, Call: 10 * ms}, opOutput{Return: 50 * ms}),
			op(0, renew("a", 1, ttl, 20*ms), opOutput{OK: true, Return: 21 * ms}),
			op(0, renew("a", 1, ttl, 110*ms), opOutput{Return: 111 * ms}),
			op(1, acq("b", "r2", ttl, 112*ms), opOutput{OK: true, Token: 2, Return: 113 * ms}),
		}},
		{"a promotion lost a renewal: a grant after the renewed end", true, []porcupine.Operation{
			aGranted,
			op(9, opInput{Kind: opLose, Call: 10 * ms}, opOutput{Return: 50 * ms}),
			op(0, renew("a", 1, ttl, 20*ms), opOutput{OK: true, Return: 21 * ms}),
			op(0, renew("a", 1, ttl, 110*ms), opOutput{Return: 111 * ms}),
			op(1, acq("b", "r2", ttl, 125*ms), opOutput{OK: true, Token: 2, Return: 126 * ms}),
		}},
		{"held lease refused naming a waiter, not the holder", false, []porcupine.Operation{
			aGranted,
			op(1, wait("b", "r2", ttl, 2*ms), opOutput{Return: 40 * ms}),
			op(2, acq("c", "r3", ttl, 10*ms), opOutput{HolderOwner: "b", Queued: true, Return: 11 * ms}),
		}},
	}
	for _, c := range cases {
		markQueued(c.ops)
		got := porcupine.CheckOperations(LeaseModel(), c.ops)
		if got != c.legal {
			t.Errorf("%s: checker says legal=%v, want %v", c.name, got, c.legal)
		}
	}
}

// TestPrepareDropsUnseenRacedGrants: a raced operation stays only if the
// history names its owner holding a token it was never granted.
func TestPrepareDropsUnseenRacedGrants(t *testing.T) {
	ttl := 100 * ms
	w := op(1, wait("b", "r2", ttl, 2*ms), opOutput{Return: 40 * ms})
	base := []porcupine.Operation{
		op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
		w, racedOp(w, 1040*ms),
		op(1, wait("b", "r3", ttl, 50*ms), opOutput{OK: true, Token: 4, Return: 60 * ms}),
	}
	count := func(ops []porcupine.Operation) (n int) {
		for _, op := range ops {
			if op.Input.(opInput).Kind == opRaced {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name  string
		extra porcupine.Operation
		kept  int
	}{
		{"b's own grant named", op(2, acq("c", "r4", ttl, 61*ms), opOutput{HolderOwner: "b", Token: 4, Return: 62 * ms}), 0},
		{"a token b was never granted named", op(2, acq("c", "r4", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 2, Return: 46 * ms}), 1},
		{"b releases a token it was never granted", op(1, rel("b", 2, 45*ms), opOutput{OK: true, Return: 46 * ms}), 1},
	} {
		ops := append(append([]porcupine.Operation(nil), base...), c.extra)
		if got := count(prepareLeaseOps(ops)); got != c.kept {
			t.Errorf("%s: %d raced operations kept, want %d", c.name, got, c.kept)
		}
	}
}

// TestPrepareKeepsRacedGrantsThatSupersede: a raced grant made after its
// wait returned (a lease server frees it once it learns the waiter left)
// supersedes the holder's grant, and the holder's release of it is then
// refused. The raced operation must reach the checker: a refused release
// of the latest grant is illegal otherwise. Histories as a RESP lease
// server produced them.
func TestPrepareKeepsRacedGrantsThatSupersede(t *testing.T) {
	ttl := 80 * ms
	for _, c := range []struct {
		name   string
		waiter string // owner of the wait ended by its context
	}{
		{"the holder's own wait", "a"},
		{"another owner's wait", "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// a holds token 1 until about 81ms; the wait gives up at
			// 80.9ms, the expiry at 81ms grants the lease to it and the
			// server frees that grant at 81.5ms; a's release at 90ms is
			// refused.
			w := op(1, wait(c.waiter, "r2", 30*ms, 40*ms), opOutput{Return: 80*ms + 900_000})
			ops := []porcupine.Operation{
				op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
				w, racedOp(w, w.Return+1000*ms),
				op(0, rel("a", 1, 90*ms), opOutput{Return: 91 * ms}),
				op(2, acq("c", "r3", ttl, 95*ms), opOutput{OK: true, Token: 5, Return: 96 * ms}),
			}
			prepared := prepareLeaseOps(append([]porcupine.Operation(nil), ops...))
			if len(prepared) != len(ops) {
				t.Fatalf("%d operations kept of %d: the raced grant that superseded a's was dropped", len(prepared), len(ops))
			}
			if res := porcupine.CheckOperations(LeaseModel(), prepared); !res {
				t.Fatal("history with the raced grant judged not linearizable")
			}
		})
	}
	// Without a wait to explain it, the refused release stays illegal.
	ops := []porcupine.Operation{
		op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
		op(0, rel("a", 1, 90*ms), opOutput{Return: 91 * ms}),
	}
	if porcupine.CheckOperations(LeaseModel(), prepareLeaseOps(ops)) {
		t.Error("a refused release of the latest grant judged linearizable")
	}
	// A raced operation that ended before the grant it would supersede
	// cannot explain the refusal and is still dropped.
	w := op(1, wait("b", "r2", 30*ms, 0), opOutput{Return: 10 * ms})
	ops = []porcupine.Operation{
		w, racedOp(w, w.Return+5*ms),
		op(0, acq("a", "r1", ttl, 20*ms), opOutput{OK: true, Token: 3, Return: 21 * ms}),
		op(0, rel("a", 3, 200*ms), opOutput{Return: 201 * ms}),
	}
	if got := len(prepareLeaseOps(ops)); got != len(ops)-1 {
		t.Errorf("%d operations kept of %d, want the raced one dropped", got, len(ops))
	}
}

// TestMarkQueuedAfterRacedWait: a refusal naming a waiter whose wait ended
// by its context is marked while that wait's raced span (the store's
// cleanup time) lasts: a lease server keeps a remote waiter queued until
// it learns the waiter left. After that span it is not.
func TestMarkQueuedAfterRacedWait(t *testing.T) {
	w := op(1, wait("b", "r1", 100*ms, 0), opOutput{Return: 40 * ms})
	ops := []porcupine.Operation{
		w, racedOp(w, 1040*ms),
		op(2, acq("c", "r2", 100*ms, 50*ms), opOutput{HolderOwner: "b", Return: 51 * ms}),
		op(2, acq("c", "r3", 100*ms, 1100*ms), opOutput{HolderOwner: "b", Return: 1101 * ms}),
	}
	markQueued(ops)
	for k, want := range map[int]bool{2: true, 3: false} {
		if got := ops[k].Output.(opOutput).Queued; got != want {
			t.Errorf("op %d: Queued = %v, want %v", k, got, want)
		}
	}
}

// TestRacedWaitGrantedAgain: a wait ended by its context may leave two
// grants to its owner that nobody is told of: the one that raced with the
// end, and one its give-up makes anew when the raced grant expired between
// the give-up's read and its acquire by request id (both freed by the
// bound). From a CI run (remote proxy over the memory store, loaded
// machine): c's wait ended; b was refused by c/1, a got token 2, d was
// refused by c/3. A third unexplained grant, or one seen after the bound,
// is still illegal.
func TestRacedWaitGrantedAgain(t *testing.T) {
	ttl := 30 * ms
	w := op(0, wait("c", "r1", ttl, 0), opOutput{Return: 23 * ms})
	history := func(raced []porcupine.Operation, extra ...porcupine.Operation) []porcupine.Operation {
		ops := []porcupine.Operation{
			w,
			op(1, acq("b", "r2", ttl, 0), opOutput{HolderOwner: "c", Token: 1, Return: 60 * ms}),
			op(2, acq("a", "r3", ttl, 0), opOutput{OK: true, Token: 2, Return: 90 * ms}),
			op(1, acq("b", "r4", ttl, 95*ms), opOutput{HolderOwner: "a", Token: 2, Return: 100 * ms}),
			op(3, acq("d", "r5", ttl, 130*ms), opOutput{HolderOwner: "c", Token: 3, Return: 170 * ms}),
			op(1, acq("b", "r6", ttl, 180*ms), opOutput{OK: true, Token: 4, Return: 240 * ms}),
		}
		return append(append(ops, raced...), extra...)
	}
	bound := w.Return + 1000*ms
	for _, c := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"one raced grant", history([]porcupine.Operation{racedOp(w, bound)}), false},
		{"raced grant and the give-up's", history(racedOps(w, bound)), true},
		{"a third grant to c", history(racedOps(w, bound),
			op(1, acq("b", "r7", ttl, 250*ms), opOutput{HolderOwner: "c", Token: 5, Return: 251 * ms})), false},
		{"c seen holding after the bound", history(racedOps(w, 60*ms)), false},
	} {
		ops := prepareLeaseOps(append([]porcupine.Operation(nil), c.ops...))
		if got := porcupine.CheckOperations(LeaseModel(), ops); got != c.legal {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.legal)
		}
	}
}

// TestPrepareKeepsSecondRacedGrantOnlyWhenNeeded: the give-up's grant
// beside a wait (racedOps) reaches the checker only when two grants nobody
// was told of are seen: kept always, it made the checker run out of time
// on one history of 200 in three of five runs of the remote conformance
// suite on a loaded machine.
func TestPrepareKeepsSecondRacedGrantOnlyWhenNeeded(t *testing.T) {
	ttl := 100 * ms
	w := op(1, wait("b", "r2", ttl, 2*ms), opOutput{Return: 40 * ms})
	base := append([]porcupine.Operation{op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}), w}, racedOps(w, 1040*ms)...)
	for _, c := range []struct {
		name  string
		extra []porcupine.Operation
		kept  int
	}{
		{"nothing seen", nil, 0},
		{"one unexplained token", []porcupine.Operation{op(2, acq("c", "r4", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 2, Return: 46 * ms})}, 1},
		{"two unexplained tokens", []porcupine.Operation{
			op(2, acq("c", "r4", ttl, 45*ms), opOutput{HolderOwner: "b", Token: 2, Return: 46 * ms}),
			op(2, acq("c", "r5", ttl, 300*ms), opOutput{HolderOwner: "b", Token: 4, Return: 301 * ms}),
		}, 2},
	} {
		ops := append(append([]porcupine.Operation(nil), base...), c.extra...)
		n := 0
		for _, op := range prepareLeaseOps(ops) {
			if op.Input.(opInput).Kind == opRaced {
				n++
			}
		}
		if n != c.kept {
			t.Errorf("%s: %d raced operations kept, want %d", c.name, n, c.kept)
		}
	}
}

// TestPrepareHandedGrantExpired: a release hands the lease to a waiting
// owner, the grant expires before the waiter's next step collects it, and
// that step takes the free lease again with the next token; meanwhile
// another client was told the waiter held the first token. The PostgreSQL
// conformance suite recorded such a history under load (seen held as c2/4,
// the wait returned 5). Legal once prepared; the controls stay illegal.
func TestPrepareHandedGrantExpired(t *testing.T) {
	ttl := 100 * ms
	aGranted := op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms})
	aReleases := op(0, rel("a", 1, 20*ms), opOutput{OK: true, Return: 30 * ms})
	bWait := op(1, wait("b", "r2", ttl, 2*ms), opOutput{OK: true, Token: 3, Return: 200 * ms})
	cSeesB2 := op(2, acq("c", "r3", ttl, 50*ms), opOutput{HolderOwner: "b", Token: 2, Return: 51 * ms})
	cases := []struct {
		name  string
		legal bool
		ops   []porcupine.Operation
	}{
		{"handed, expired, taken again", true, []porcupine.Operation{aGranted, aReleases, bWait, cSeesB2}},
		{"no wait of b: b/2 is nobody's", false, []porcupine.Operation{aGranted, aReleases, cSeesB2}},
		{"handed grant overlapped by c", false, []porcupine.Operation{aGranted, aReleases, bWait, cSeesB2,
			op(2, acq("c", "r4", ttl, 60*ms), opOutput{OK: true, Token: 3, Return: 61 * ms})}},
		{"b seen holding 2 after its wait returned 3", false, []porcupine.Operation{aGranted, aReleases, bWait,
			op(2, acq("c", "r3", ttl, 210*ms), opOutput{HolderOwner: "b", Token: 2, Return: 211 * ms})}},
	}
	for _, c := range cases {
		ops := prepareLeaseOps(append([]porcupine.Operation(nil), c.ops...))
		if got := porcupine.CheckOperations(LeaseModel(), ops); got != c.legal {
			t.Errorf("%s: checker says legal=%v, want %v", c.name, got, c.legal)
		}
	}
	// Unprepared, the first history is illegal: the model alone has no
	// operation that gave b token 2.
	if porcupine.CheckOperations(LeaseModel(), []porcupine.Operation{aGranted, aReleases, bWait, cSeesB2}) {
		t.Error("unprepared history with b/2 seen held: checker says legal")
	}
}
