package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

// usable reports a done context or a closed store before any round trip.
func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	return nil
}

// TryAcquire implements leasehold.Store. While the store holds back after
// a restart of Redis it returns a *leasehold.HeldError whose Owner is
// HoldbackOwner (FailoverHoldbackOwner after a promotion). A new grant's token is at least the server's clock in
// microseconds at the name's first grant (see docs/stores/redis.md).
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.usable(ctx); err != nil {
		return leasehold.Record{}, err
	}
	if req.RequestID == "" {
		// go-redis sends the script again when the connection breaks
		// before its reply; if Redis ran the first send, the second finds
		// the caller's own grant. A request id of this call's own lets it
		// get that grant back instead of reporting the caller as the holder.
		req.RequestID = "store-" + randid.Hex(12)
	}
	keys := s.nameKeys(req.Name)
	// The call's own id: go-redis sends the script again when the
	// connection breaks before its reply, and a send after the call's own
	// grant has ended must not be answered as a refusal (acquire.lua's 6).
	cid := randid.Hex(8)
	var e epoch
	var res []any
	for attempt := 0; ; attempt++ {
		var err error
		if e, err = s.epoch(ctx); err != nil {
			return leasehold.Record{}, err
		}
		cmd := s.runAcked(ctx, lua.acquire, keys, s.epochArgs(e, req.Name,
			req.Owner, req.RequestID, string(req.Data), int64(req.TTL), cid)...)
		res, err = cmd.Slice()
		if ue := (*UnreplicatedError)(nil); errors.As(err, &ue) {
			return leasehold.Record{}, s.dropUnreplicated(ctx, "acquire", req, cmd.Val(), ue)
		}
		if err != nil {
			return leasehold.Record{}, s.translate(ctx, "acquire", err)
		}
		if code, _ := toInt(res[0]); code != 4 {
			break
		}
		// The marker is not the one checked: lost in a restart, or
		// rewritten by a client that noticed one.
		s.invalidateEpoch()
		if attempt == 2 {
			return leasehold.Record{}, errors.New("redis acquire: the restart marker keeps changing")
		}
	}
	code, _ := toInt(res[0])
	switch {
	case (code == 0 || code == 3) && len(res) == 4:
		token, acq, now := grantReply(res)
		if s.ep.dials.Load() != e.dials {
			if err := s.confirm(ctx, req, token, now); err != nil {
				return leasehold.Record{}, err
			}
		}
		return grantRecord(req, token, acq), nil
	case code == 1 && len(res) == 6:
		token, _ := strconv.ParseUint(fmt.Sprint(res[2]), 10, 64)
		if req.RequestID != "" && fmt.Sprint(res[1]) == req.Owner && fmt.Sprint(res[5]) == req.RequestID {
			// This request's own grant, made by an earlier attempt (go-redis
			// resending the script after a connection error, or the
			// caller's retry) before a restart was noticed: below the floor,
			// so it is not handed back, but it is no one else's either. A
			// HeldError would be a definite refusal of a call that did
			// take effect: report the outcome as unknown.
			return leasehold.Record{}, fmt.Errorf("redis acquire %q: this request's own grant (token %d) from before a restart of Redis was noticed is below the token floor and is not handed back; it expires after its TTL", req.Name, token)
		}
		pttl, _ := toInt(res[3])
		acq, _ := toInt(res[4])
		return leasehold.Record{}, &leasehold.HeldError{
			Name: req.Name, Owner: fmt.Sprint(res[1]), Token: token,
			Remaining: max(time.Duration(pttl)*time.Millisecond, 0), Acquired: time.UnixMicro(acq),
		}
	case code == 5 && len(res) == 3:
		// Free, but a waiter queued earlier is due first and could not
		// be handed the lease yet.
		rem, _ := toInt(res[2])
		return leasehold.Record{}, &leasehold.HeldError{
			Name: req.Name, Owner: fmt.Sprint(res[1]), Remaining: time.Duration(rem) * time.Millisecond,
		}
	case code == 6 && len(res) == 1:
		// Not a refusal: the call took effect, and others may have seen
		// the lease held by the caller.
		return leasehold.Record{}, fmt.Errorf("redis acquire %q: a send of this call whose reply was lost was granted the lease, and that grant has ended since (go-redis sent the call again after its connection broke); the outcome is unknown: try again", req.Name)
	case code == 2 && len(res) == 2:
		rem, _ := toInt(res[1])
		return leasehold.Record{}, &leasehold.HeldError{
			Name: req.Name, Owner: s.holdbackOwner(), Remaining: time.Duration(rem) * time.Millisecond,
		}
	}
	return leasehold.Record{}, fmt.Errorf("redis acquire: unexpected reply %v", res)
}

// confirm re-checks a grant made while a connection was dialled: if the
// check finds a restart whose hold-back or floor the script did not know,
// the grant is undone and reported as held back (an *UndoneError).
func (s *Store) confirm(ctx context.Context, req leasehold.AcquireRequest, token uint64, nowMs int64) error {
	e, err := s.epoch(ctx)
	if err == nil && nowMs >= e.holdUntil && int64(token) >= e.floor {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	rerr := s.Release(rctx, req.Name, req.Owner, token)
	cancel()
	if rerr != nil && !errors.Is(rerr, leasehold.ErrNotHeld) {
		// The grant may still stand (until its TTL): not a definite
		// refusal, so not a HeldError.
		return fmt.Errorf("redis acquire: a grant made across a reconnect could not be undone: %w", rerr)
	}
	undone := &UndoneError{Token: token, Released: rerr == nil}
	if err != nil {
		undone.Err = fmt.Errorf("redis acquire: a grant made across a reconnect could not be confirmed and was undone: %w", err)
	} else {
		undone.Err = &leasehold.HeldError{
			Name: req.Name, Owner: s.holdbackOwner(),
			Remaining: max(time.Duration(e.holdUntil-nowMs)*time.Millisecond, time.Millisecond),
		}
	}
	return undone
}

// UndoneError is the answer to an acquire whose grant the store made and
// then took back before returning: the grant's script ran on a connection
// dialled during the call, to a server that had restarted since the store
// last checked, so it was made without that restart's hold-back or token
// floor. For a moment the lease was held by the caller's owner under
// Token, and another caller may have seen it so; it was released again
// (Released false: it had already ended when the store released it).
//
// It unwraps to Err: a *leasehold.HeldError whose Owner is HoldbackOwner
// (or FailoverHoldbackOwner)
// (callers wait and try again, as for any hold-back), or the error of the
// check that could not confirm the grant.
type UndoneError struct {
	Token    uint64
	Released bool
	Err      error
}

func (e *UndoneError) Error() string {
	return fmt.Sprintf("%v (a grant of token %d made across a reconnect was undone)", e.Err, e.Token)
}

func (e *UndoneError) Unwrap() error { return e.Err }

// UndoneGrant returns the token of the grant that was undone and whether
// the store's release of it released it.
func (e *UndoneError) UndoneGrant() (token uint64, released bool) { return e.Token, e.Released }

// Renew implements leasehold.Store.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	lease, fence := s.keys(name)
	// The call's own id: a resend of this call by go-redis that finds the
	// lease ended since is not answered ErrNotHeld if the call had renewed
	// it (renew.lua's 2). Twelve hex digits, so that a field with four of
	// them (51 bytes) stays within Redis's default hash-max-listpack-value
	// (64): one longer field turns the whole fence into a hash table,
	// about 3.6 times the memory (the red team's re-check of 18dcbff).
	n, err := s.runAcked(ctx, lua.renew, []string{lease, fence}, owner, strconv.FormatUint(token, 10),
		int64(ttl), ttl.Milliseconds(), randid.Hex(6)).Int64()
	if err != nil {
		return s.translate(ctx, "renew", err)
	}
	switch n {
	case 1:
		return nil
	case 2:
		// Not ErrNotHeld, which says the call changed nothing: it did
		// extend the lease. The caller's next renewal is told it is lost.
		return fmt.Errorf("redis renew %q: a send of this call whose reply was lost renewed the lease, which has ended since (go-redis sent the call again after its connection broke)", name)
	}
	return leasehold.ErrNotHeld
}

// Release implements leasehold.Store. A release that frees the lease hands
// it to the live head of the name's queue (AcquireWait), if any, in the
// same atomic step, and tells that waiter alone; otherwise it publishes the
// name on the store's channel only if a Watch registered interest in it.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	e, err := s.epoch(ctx)
	if err != nil {
		return err
	}
	// The call's own id: a resend of this call by go-redis that finds the
	// lease granted again since is told that the call ended its grant
	// (release.lua).
	n, err := s.runAcked(ctx, lua.release, s.nameKeys(name), s.epochArgs(e, name, owner, strconv.FormatUint(token, 10), randid.Hex(8))...).Int64()
	if err != nil {
		return s.translate(ctx, "release", err)
	}
	switch n {
	case 0:
		return leasehold.ErrNotHeld
	case 3:
		// Released; the marker was not the one checked, so no waiter was
		// handed the lease (the head was woken to take it itself).
		s.invalidateEpoch()
	}
	return nil
}

// Get implements leasehold.Store.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.usable(ctx); err != nil {
		return leasehold.Record{}, err
	}
	lease, _ := s.keys(name)
	res, err := s.run(ctx, lua.get, []string{lease}).Slice()
	if errors.Is(err, goredis.Nil) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	if err != nil {
		return leasehold.Record{}, s.translate(ctx, "get", err)
	}
	rec, ok := record(name, res)
	if !ok {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	return rec, nil
}

// record builds a Record from get.lua's reply; false if it is not live.
func record(name string, res []any) (leasehold.Record, bool) {
	if len(res) != 6 {
		return leasehold.Record{}, false
	}
	token, _ := strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
	ttl, _ := toInt(res[3])
	acq, _ := toInt(res[4])
	pttl, _ := toInt(res[5])
	if pttl <= 0 {
		return leasehold.Record{}, false
	}
	rec := leasehold.Record{
		Name: name, Owner: fmt.Sprint(res[0]), Token: token, TTL: time.Duration(ttl),
		Remaining: time.Duration(pttl) * time.Millisecond, Acquired: time.UnixMicro(acq),
	}
	if d, _ := res[2].(string); d != "" {
		rec.Data = []byte(d)
	}
	return rec, true
}

// listBatch is how many leases List reads per pipeline.
const listBatch = 256

// List implements leasehold.Store. It runs SCAN over the whole keyspace
// (on every master of a cluster) with a MATCH pattern for the prefix, then
// reads the matching leases in pipelines: O(keys in the database), meant
// for operators and tools, not for hot paths.
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	match := globReplacer.Replace(s.prefix) + "{" + globReplacer.Replace(tagReplacer.Replace(prefix)) + "*}"
	keys, err := s.scan(ctx, match)
	if err != nil {
		return nil, s.translate(ctx, "list", err)
	}
	var out []leasehold.Record
	for len(keys) > 0 {
		batch := keys[:min(len(keys), listBatch)]
		keys = keys[len(batch):]
		recs, err := s.readBatch(ctx, batch)
		if err != nil {
			return nil, s.translate(ctx, "list", err)
		}
		out = append(out, recs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) scan(ctx context.Context, match string) ([]string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	one := func(ctx context.Context, c goredis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range ks {
				seen[k] = true
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return one(ctx, c) })
	} else {
		err = one(ctx, s.rdb)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys, err
}

// readBatch reads leases with get in one pipeline, loading the library
// (or the script) first if the server does not have it.
func (s *Store) readBatch(ctx context.Context, keys []string) ([]leasehold.Record, error) {
	for attempt := 0; ; attempt++ {
		scripts, loads := s.fn.off.Load(), s.fn.loads.Load()
		cmds, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range keys {
				if scripts {
					p.EvalSha(ctx, lua.get.script.Hash(), []string{k})
				} else {
					p.FCallRO(ctx, lua.get.fn, []string{k})
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, goredis.Nil) {
			if attempt == 0 && scripts && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				if err := lua.get.script.Load(ctx, s.rdb).Err(); err != nil {
					return nil, err
				}
				continue
			}
			if attempt == 0 && !scripts {
				retry, lerr := s.recoverFunctions(ctx, err, loads)
				if lerr != nil {
					return nil, lerr
				}
				if retry {
					continue
				}
			}
			return nil, err
		}
		var out []leasehold.Record
		for i, c := range cmds {
			res, err := c.(*goredis.Cmd).Slice()
			if err != nil {
				continue // gone since the scan
			}
			if name, ok := s.nameOf(keys[i]); ok {
				if rec, ok := record(name, res); ok {
					out = append(out, rec)
				}
			}
		}
		return out, nil
	}
}
