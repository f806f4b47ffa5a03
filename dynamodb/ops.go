package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

// maxAcquireRounds bounds the rounds of one TryAcquire in which the item
// changed between its conditional write and the read that followed.
const maxAcquireRounds = 10

// TryAcquire implements leasehold.Store.
//
// It sends one conditional UpdateItem that grants the lease if it is free,
// released, or expired for longer than the max clock skew. If that
// condition fails it reads the item (consistently) and then:
//
//   - the lease is live (ExpiresAtMs >= now) and was granted to the same
//     owner and request id: a second conditional UpdateItem refreshes its
//     expiry and the same token is returned. An acquire without a request
//     id gets one of its own, so that the SDK's resend of a write whose
//     reply was lost (a broken connection, a 5xx) finds the grant the first
//     send made instead of reporting the caller as the holder;
//   - the lease is live for someone else: a *leasehold.HeldError;
//   - the lease expired less than max clock skew ago: TryAcquire waits
//     until the skew has passed (or ctx ends) and tries again, since the
//     holder's clock may still count it as held;
//   - the lease became free in between: it tries again.
//
// TTLs are kept to whole milliseconds (the fraction is dropped).
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	ttlMs := int64(req.TTL / time.Millisecond)
	data := slices.Clone(req.Data)
	if req.RequestID == "" {
		// The SDK sends a write again when its reply was lost (a broken
		// connection, a 5xx); if the first send was applied, the second
		// fails its condition on the caller's own grant. A request id of
		// this call's own lets the retry find that grant and return it.
		req.RequestID = "store-" + randid.Hex(12)
	}
	for round := 0; ; round++ {
		if err := s.check(ctx); err != nil {
			return leasehold.Record{}, err
		}
		nowMs := s.clock.Now().UnixMilli()
		in := s.input(req.Name, request{acquireUpdate, acquireCond, acquireNames, map[string]types.AttributeValue{
			":o": str(req.Owner), ":r": str(req.RequestID), ":d": bin(data), ":ttl": num(ttlMs),
			":exp": num(nowMs + ttlMs), ":t": boolean(true), ":now": num(nowMs), ":one": num(1),
			":f": boolean(false), ":cut": num(nowMs - s.skewMs),
		}}, cleanupAt(nowMs+ttlMs))
		in.ReturnValues = types.ReturnValueUpdatedNew
		if s.oldValues {
			in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
		}
		out, err := s.client.UpdateItem(ctx, in)
		if err == nil {
			token, err := parseToken(out.Attributes[AttrToken])
			if err != nil {
				return leasehold.Record{}, err
			}
			return leasehold.Record{
				Name: req.Name, Owner: req.Owner, Token: token, Data: slices.Clone(data),
				TTL: time.Duration(ttlMs) * time.Millisecond, Remaining: time.Duration(ttlMs) * time.Millisecond,
				Acquired: time.UnixMilli(nowMs),
			}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return leasehold.Record{}, s.fail(ctx, err)
		}
		item := ccf.Item
		if len(item) == 0 {
			if item, err = s.getItem(ctx, req.Name, true); err != nil {
				return leasehold.Record{}, err
			}
		}
		now := s.clock.Now()
		if len(item) != 0 {
			r, err := decode(item)
			if err != nil {
				return leasehold.Record{}, err
			}
			switch nowMs := now.UnixMilli(); {
			case r.live(nowMs) && r.owner == req.Owner && r.requestID == req.RequestID:
				rec, err := s.refresh(ctx, req, r, data, ttlMs, nowMs)
				if !errors.Is(err, errChanged) {
					return rec, err
				}
			case r.live(nowMs):
				return leasehold.Record{}, r.heldError(now)
			case r.held && r.expMs+s.skewMs >= nowMs:
				// Expired by this clock, but a holder whose clock is behind
				// may count it as held for up to the skew: wait that out.
				if err := s.sleep(ctx, time.UnixMilli(r.expMs+s.skewMs+1).Sub(now)); err != nil {
					return leasehold.Record{}, err
				}
				continue
			}
		}
		// The item changed between the write and the read: try again.
		if round >= maxAcquireRounds {
			return leasehold.Record{}, fmt.Errorf("dynamodb: lease %q changed under %d acquire attempts in a row; try again", req.Name, round+1)
		}
	}
}

var errChanged = errors.New("dynamodb: item changed")

// refresh renews the live grant r of a retried acquire and returns it with
// the same token, or errChanged if the grant is no longer as read.
func (s *Store) refresh(ctx context.Context, req leasehold.AcquireRequest, r row, data []byte, ttlMs, nowMs int64) (leasehold.Record, error) {
	_, err := s.client.UpdateItem(ctx, s.input(req.Name, request{refreshUpdate, refreshCond, refreshNames, map[string]types.AttributeValue{
		":o": str(req.Owner), ":r": str(req.RequestID), ":k": unum(r.token), ":t": boolean(true),
		":now": num(nowMs), ":d": bin(data), ":ttl": num(ttlMs), ":exp": num(nowMs + ttlMs),
	}}, cleanupAt(nowMs+ttlMs)))
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return leasehold.Record{}, errChanged
	case err != nil:
		return leasehold.Record{}, s.fail(ctx, err)
	}
	return leasehold.Record{
		Name: req.Name, Owner: req.Owner, Token: r.token, Data: slices.Clone(data),
		TTL: time.Duration(ttlMs) * time.Millisecond, Remaining: time.Duration(ttlMs) * time.Millisecond,
		Acquired: time.UnixMilli(r.acqMs),
	}, nil
}

// Renew implements leasehold.Store: one UpdateItem conditioned on owner,
// token, Held and ExpiresAtMs >= now by this store's clock, so a holder
// renewing after its own expiry is refused even if nobody took over.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	nowMs, ttlMs := s.clock.Now().UnixMilli(), int64(ttl/time.Millisecond)
	return s.update1(ctx, s.input(name, request{renewUpdate, renewCond, renewNames, map[string]types.AttributeValue{
		":o": str(owner), ":k": unum(token), ":t": boolean(true), ":now": num(nowMs),
		":ttl": num(ttlMs), ":exp": num(nowMs + ttlMs),
	}}, cleanupAt(nowMs+ttlMs)))
}

// Release implements leasehold.Store: one UpdateItem that marks the item
// free (Held = false, ExpiresAtMs = 0), conditioned on owner and token. The
// item and its token stay.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	rid := randid.Hex(8)
	err := s.update1(ctx, s.input(name, request{releaseUpdate + relAttr(token) + " = :rid", releaseCond, releaseNames, map[string]types.AttributeValue{
		":o": str(owner), ":k": unum(token), ":f": boolean(false), ":zero": num(0), ":rid": str(rid),
	}}, cleanupAt(s.clock.Now().UnixMilli())))
	if !errors.Is(err, leasehold.ErrNotHeld) {
		return err
	}
	return s.resentRelease(ctx, name, token, rid)
}

// resentRelease answers a release call whose condition failed: nil if
// this call released the token (its id is in the token's Rel attribute),
// else ErrNotHeld. The AWS SDK sends an UpdateItem again when its reply is
// lost (a broken connection, a 5xx); if the first send was applied and
// other clients took the lease before the resend, the resend's condition
// fails on a later grant, although the call ended its own (Redis answered
// the same way and failed R3 in CI run 72). A new call after a later grant
// is still ErrNotHeld, and so is a resend that comes after ten more grants
// were released (the token's attribute is then another call's). A failed
// read is returned as it is: the answer is then unknown.
func (s *Store) resentRelease(ctx context.Context, name string, token uint64, rid string) error {
	item, err := s.getItem(ctx, name, true)
	if err != nil {
		return err
	}
	if v, ok := item[relAttr(token)].(*types.AttributeValueMemberS); ok && v.Value == rid {
		return nil
	}
	return leasehold.ErrNotHeld
}

// update1 sends a conditional update; a failed condition means the caller
// does not hold the lease.
func (s *Store) update1(ctx context.Context, in *ddb.UpdateItemInput) error {
	_, err := s.client.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ccf):
		return leasehold.ErrNotHeld
	}
	return s.fail(ctx, err)
}

// Get implements leasehold.Store with one GetItem (consistent unless
// WithConsistentReads(false)). A lease is live through ExpiresAtMs on this
// store's clock.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	if err := s.check(ctx); err != nil {
		return leasehold.Record{}, err
	}
	item, err := s.getItem(ctx, name, s.consistent)
	if err != nil {
		return leasehold.Record{}, err
	}
	if len(item) == 0 {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	r, err := decode(item)
	if err != nil {
		return leasehold.Record{}, err
	}
	now := s.clock.Now()
	if !r.live(now.UnixMilli()) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	return r.record(now), nil
}

func (s *Store) getItem(ctx context.Context, name string, consistent bool) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &ddb.GetItemInput{
		TableName: aws.String(s.table), Key: key(name), ConsistentRead: aws.Bool(consistent),
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return out.Item, nil
}

// List implements leasehold.Store with a Scan of the whole table (filtered
// by begins_with(LockKey, prefix), consistent unless
// WithConsistentReads(false)), page by page. It reads every item of the
// table, so it is meant for operators, not for hot paths.
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	in := &ddb.ScanInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(s.consistent)}
	if prefix != "" {
		in.FilterExpression = aws.String(listFilter)
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":prefix": str(prefix)}
	}
	var out []leasehold.Record
	pages := ddb.NewScanPaginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		now := s.clock.Now()
		for _, item := range page.Items {
			r, err := decode(item)
			if err != nil {
				return nil, err
			}
			if r.live(now.UnixMilli()) && strings.HasPrefix(r.name, prefix) {
				out = append(out, r.record(now))
			}
		}
	}
	slices.SortFunc(out, func(a, b leasehold.Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fail translates an SDK error, naming the table when it is missing.
func (s *Store) fail(ctx context.Context, err error) error {
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) && ctx.Err() == nil {
		return fmt.Errorf("%w: %q (create it with Init, CreateTable or \"leasehold store init\")", ErrNoTable, s.table)
	}
	return translate(ctx, err)
}

// sleep waits d on the store's clock, or until ctx ends.
func (s *Store) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
