package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// Judging expiry. etcd's leader expires a lease on its own clock, to the
// millisecond: from then on it refuses to refresh it. But it deletes the
// lease (and the keys on it) only when its revocation loop next runs,
// every 500 ms, and it reports a lease's remaining time in whole seconds,
// rounded down. So a lease key that exists may belong to an expired lease.
// The store reports a lease held only when etcd says it has at least a
// second left; while it says 0 (under a second left, or expired and not
// yet deleted) the store asks again every pollInterval, until the holder
// renews (at least a second left again) or the lease is gone.
//
// An answer can also come from a member that is no longer the leader:
// etcd forwards a follower's TimeToLive to the member the follower takes
// for leader, and a leader that has just stepped down (a member cut off by
// a partition came back with a higher term, and this follower has not
// heard of it yet) keeps every lease "forever" until a new leader takes
// office, and answers so: a TTL of 9223372036 s. That says nothing of when
// the lease ends (R7 found "held" answered that way for a lease whose TTL
// had run out), so the store asks again, as for 0, until the new leader
// answers.
const (
	pollInterval = 25 * time.Millisecond
	// pollLimit bounds that wait. An etcd lease has at most a second left
	// when the wait starts and is deleted at most about 0.5 s after it
	// expires, and a cluster elects a new leader within a few election
	// timeouts, so this is reached only if etcd stalls; the call then
	// fails (errNoLeaseAnswer).
	pollLimit = 5 * time.Second
	// maxPromoteExtension: a new leader gives every lease its TTL plus an
	// election timeout (at most 50 s, etcd's bound on
	// --election-timeout). A remaining time longer than the lease's TTL by
	// more than that comes from a member that is not the leader.
	maxPromoteExtension = 50
)

// attemptTimeout bounds one TimeToLive request: a follower that takes a
// cut-off member for leader forwards the request there and waits for up
// to etcd's request timeout (7 s), while the same follower answers a new
// request from the new leader at once (the red team of 6a86695: calls
// stuck 6-8 s behind one request while the member answered others).
const attemptTimeout = time.Second

// errNoLeaseAnswer: for pollLimit, no TimeToLive answer told whether a
// lease is alive; it says what came instead.
func errNoLeaseAnswer(timedOut, notLeader, underSecond int) error {
	return fmt.Errorf("for %s no answer told whether the holder's etcd lease is alive: %d requests got no answer within %s, %d answers came from a member that is not the leader, %d said it had under a second left but etcd had not revoked it",
		pollLimit, timedOut, attemptTimeout, notLeader, underSecond)
}

// fromLeader reports whether a TimeToLive answer came from the leader's
// lessor (see above).
func fromLeader(resp *clientv3.LeaseTimeToLiveResponse) bool {
	return resp.TTL <= resp.GrantedTTL+maxPromoteExtension
}

// judge tells how long the etcd lease id has left. When the store knows
// that the lease lives more than another second (aliveUntil: it made or
// renewed the grant, or asked etcd recently), it answers without asking
// etcd, with the time it knows of, at most ttl (the record's TTL).
// Otherwise it asks etcd: it returns alive with an estimate of the
// remaining time (the whole seconds etcd reports plus half a second, at
// most the lease's granted TTL), or !alive when the lease is gone, or an
// error when no answer from the leader's lessor says either within
// pollLimit.
func (s *Store) judge(ctx context.Context, id clientv3.LeaseID, ttl time.Duration) (remaining time.Duration, alive bool, err error) {
	if until, ok := s.spares.aliveUntil(id); ok {
		if rem := time.Until(until); rem > time.Second+pollInterval {
			return min(rem, ttl), true, nil
		}
	}
	start := time.Now()
	var timedOut, notLeader, underSecond int
	for {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		resp, err := s.cli.TimeToLive(actx, id)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && time.Since(sent) >= attemptTimeout:
			timedOut++ // ask again (below)
		case err != nil:
			return 0, false, s.fail(ctx, "lease time to live", err)
		default:
			if s.ttlHook != nil {
				s.ttlHook(resp)
			}
			switch {
			case resp.TTL < 0:
				return 0, false, nil
			case !fromLeader(resp):
				notLeader++
			case resp.TTL >= 1:
				s.spares.saw(id, sent.Add(time.Duration(resp.TTL)*time.Second*99/100))
				return min(time.Duration(resp.TTL)*time.Second+time.Second/2, time.Duration(resp.GrantedTTL)*time.Second), true, nil
			default:
				underSecond++
			}
		}
		if time.Since(start) > pollLimit {
			return 0, false, s.fail(ctx, "lease time to live", errNoLeaseAnswer(timedOut, notLeader, underSecond))
		}
		if err := backoff.Sleep(ctx, pollInterval); err != nil {
			return 0, false, err
		}
	}
}

// resolve turns a lease key into a Record if its lease is alive. When the
// lease turns out to be gone, it reads the key again (a retried acquire
// or a renewal with a new TTL may have moved it to another etcd lease).
func (s *Store) resolve(ctx context.Context, name string, g grant) (leasehold.Record, bool, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		kv := g.kv
		cur, err := decodeRecord(kv.Value)
		if err != nil {
			return leasehold.Record{}, false, err
		}
		rem, alive, err := s.judge(ctx, clientv3.LeaseID(kv.Lease), cur.ttl)
		if err != nil {
			return leasehold.Record{}, false, err
		}
		if alive {
			return leasehold.Record{
				Name: name, Owner: cur.owner, Token: uint64(g.token), Data: cur.data,
				TTL: cur.ttl, Remaining: rem, Acquired: cur.acquired,
			}, true, nil
		}
		lk := s.leaseKey(name)
		resp, err := s.cli.Get(ctx, lk, clientv3.WithRange(grantEnd(lk)))
		if err != nil {
			return leasehold.Record{}, false, s.fail(ctx, "get", err)
		}
		var held bool
		if g, _, held = grantOf(resp.Kvs); !held {
			return leasehold.Record{}, false, nil
		}
	}
	return leasehold.Record{}, false, nil
}

// Get implements leasehold.Store: one range read, and one TimeToLive for
// the remaining time (see judge for the last second of a lease).
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.begin(ctx); err != nil {
		return leasehold.Record{}, err
	}
	lk := s.leaseKey(name)
	resp, err := s.cli.Get(ctx, lk, clientv3.WithRange(grantEnd(lk)))
	if err != nil {
		return leasehold.Record{}, s.fail(ctx, "get", err)
	}
	g, _, held := grantOf(resp.Kvs)
	if !held {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	rec, ok, err := s.resolve(ctx, name, g)
	if err == nil && !ok {
		err = leasehold.ErrNotFound
	}
	return rec, err
}

// listParallel bounds the TimeToLive requests of one List in flight.
const listParallel = 16

// listRechecks bounds how often a List asks again about leases whose time
// ran out while it waited for other answers.
const listRechecks = 3

// List implements leasehold.Store: one range read over the lease keys
// under the prefix (sorted by name, as etcd sorts keys), then one
// TimeToLive per lease found, at most listParallel at a time; each
// record's Remaining is counted down to the return, and a lease whose
// time ran out meanwhile is asked about again (up to listRechecks times).
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.leaseKey(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, s.fail(ctx, "list", err)
	}
	var grants []grant
	for kvs := resp.Kvs; len(kvs) > 0; {
		g, n, held := grantOf(kvs)
		if held {
			grants = append(grants, g)
		}
		kvs = kvs[n:]
	}
	recs := make([]leasehold.Record, len(grants))
	live := make([]bool, len(grants))
	errs := make([]error, len(grants))
	judged := make([]time.Time, len(grants))
	sem := make(chan struct{}, listParallel)
	base := len(s.leaseKey(""))
	judge := func(which []int) {
		var wg sync.WaitGroup
		for _, i := range which {
			g := grants[i]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				recs[i], live[i], errs[i] = s.resolve(ctx, string(g.kv.Key[base:]), g)
				judged[i] = time.Now()
			}()
		}
		wg.Wait()
	}
	// left is a live record's Remaining as of now, not of the lease's own
	// answer: another name's answer may have taken seconds (the red team
	// of 6a86695: a List of 6.8 s reported 1.5 s left of a lease judged at
	// its start).
	left := func(i int) time.Duration { return recs[i].Remaining - time.Since(judged[i]) }
	all := make([]int, len(grants))
	for i := range all {
		all[i] = i
	}
	judge(all)
	// A lease whose time ran out meanwhile may have ended, or been renewed:
	// asked again, up to listRechecks times (the re-check of that red
	// team: Lists of 2-5 s on a loaded machine returned leases that had
	// ended, with 0 left; its third round: one more look left 54 of 161
	// such Lists with one, and live leases with 0 left).
	for range listRechecks {
		var again []int
		for i := range grants {
			if errs[i] == nil && live[i] && left(i) <= 0 {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		judge(again)
	}
	var out []leasehold.Record
	for i := range recs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if live[i] {
			recs[i].Remaining = max(0, left(i))
			out = append(out, recs[i])
		}
	}
	return out, nil
}
