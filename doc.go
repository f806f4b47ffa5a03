// Package leasehold gives processes leases — exclusive, time-limited grants
// of a name — with fencing tokens, on a store they already run (an embedded
// SQLite file by default, PostgreSQL, Redis, DynamoDB, etcd, or the leasehold
// server). This is the safety model in short; [safety.md] has it per store.
//
// # Leases and fencing tokens
//
// A [Client] acquires a named lease from a [Store] for a TTL, granted only if
// the name is free, expired, or already granted to the same acquire request
// (a retry after a lost reply gets its own grant back). Every grant carries a
// token, [Lease.Token], strictly greater than the token of every earlier
// grant of that name in that store, across releases, expiry takeovers,
// crashes and restarts, under each store's assumptions (the in-memory store
// starts again at 1; a restored backup or a deleted row can rewind a
// counter). A lease does not stop a holder paused past its deadline from
// writing: pass the token to the resource you protect and have it refuse any
// token lower than the highest it has seen. The postgres, redis, dynamodb and
// etcd packages have helpers for such fenced writes.
//
// # When a holder stops holding
//
// Expiry is judged on the store's side, by one clock: PostgreSQL's now(),
// Redis's clock, etcd's native leases, the monotonic clock of the leasehold
// server's own engine, the host's boot-time clock for SQLite. DynamoDB has
// none: its items carry the writer's clock, and a lease is taken over only
// once it expired more than a max clock skew ago on the taker's clock. The holder judges
// conservatively on its own clock: with t0 read before the acquire or renew
// request is sent, it holds the lease until
//
//	t0 + TTL·(1−ρ) − ε
//
// where ρ bounds the rate error between its clock and the store's
// ([DefaultDriftRate], 1 %) and ε is a fixed margin ([DefaultDriftMargin],
// 5 ms); [WithDrift] sets both. The deadline is checked on the monotonic and
// the boot-time clock (a suspended holder knows), and a [Lease] renews itself
// at about a third of its TTL.
//
// # Loss is visible
//
// When the store refuses a renewal, or the deadline passes without a
// confirmed one (an unknown outcome counts as lost), the lease is lost:
// [Lease.Done] closes, [Lease.Err] matches [ErrLost], [Lease.Held] reports
// false, and contexts from [Lease.Context] are cancelled, as is the one
// [Client.Do] passes to its function. Stop writing then.
//
// # Release
//
// [Lease.Release] is checked by owner and token: it frees only this grant,
// and releasing twice is fine. Anyone else's release changes nothing (the
// store answers [ErrNotHeld]); releasing a lease that expired and was taken
// over changes nothing either and returns an error matching [ErrLost].
//
// # Example
//
//	client, err := leasehold.New(store, leasehold.WithOwner("worker-7"))
//	lease, err := client.Acquire(ctx, "reports/nightly", leasehold.TTL(30*time.Second))
//	if err != nil {
//		return err
//	}
//	defer lease.Release(context.WithoutCancel(ctx))
//	ctx, cancel := lease.Context(ctx) // cancelled when the lease is lost
//	defer cancel()
//	return report.Write(ctx, lease.Token(), data) // the resource checks the token
//
// [safety.md]: https://github.com/leasehold/leasehold/blob/main/docs/safety.md
package leasehold
