package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
)

// Records (leasehold.RecordStore) share the lease table. A record is an
// item whose LockKey is RecordKeyPrefix + the record's key; lease names
// cannot contain the control character that starts it, so the two never
// meet, and the lease operations (List included) pass over record items.
//
// Attributes of a record item:
//
//	Value    B  the value, unless it is a counter
//	Counter  N  the value, when it is the canonical decimal form of an int64
//	            ("42", "-7"; not "+7" or "007"), so that AddCounter is one
//	            UpdateItem with ADD; GetRecord returns it as that decimal
//	Version  N  1 for the first write of the key, +1 for every write after
//
// A deleted record leaves a tombstone: the item keeps its Version (one more
// than the record's last) and loses Value and Counter. That is what keeps
// versions increasing across a delete and a re-creation. Tombstones are
// small and, as lease items, never deleted by the store; with
// WithTTLCleanup a tombstone gets ExpiresAt (CleanupMargin after the
// delete), so DynamoDB's TTL clean-up may remove it, after which the key's
// versions start again at 1. Every write of a live record removes
// ExpiresAt.
//
// Every operation reads and writes with strong consistency; each single-key
// operation is one conditional request (plus a read to report the version
// found after a failed condition, since the store cannot count on
// ReturnValuesOnConditionCheckFailure). Txn uses TransactWriteItems, which
// dynalite lacks: there it returns leasehold.ErrTxnUnsupported.
var _ leasehold.RecordStore = (*Store)(nil)

// RecordKeyPrefix starts the LockKey of every record item: the control
// character RS (0x1E), which no lease name contains, then "record/".
const RecordKeyPrefix = "\x1erecord/"

// Attributes of a record item (see above).
const (
	AttrRecordValue   = "Value"
	AttrRecordCounter = "Counter"
	AttrRecordVersion = "Version"
)

// maxRecordRounds bounds the rounds of a record operation whose item
// changed between its conditional write and the read that followed.
const maxRecordRounds = 50

// writeOnce is the per-request option of every single-item record write.
// The SDK retries a request after a 5xx answer, a broken connection or a
// reply that fails its checksum, by default; for a conditional write that
// may already have been applied, the retry then fails its condition (a
// false conflict) or, for an ADD, adds twice. writeOnce keeps the SDK's
// retries (and its backoff) only for errors by which DynamoDB refused the
// request without applying it — throttling — and for connections that
// were never made; any other failure is returned as an error: the outcome
// of that write is unknown. Reads keep the SDK's retries, and
// TransactWriteItems is idempotent by its client request token.
func writeOnce(o *ddb.Options) {
	if r, ok := o.Retryer.(aws.RetryerV2); ok {
		o.Retryer = notAppliedRetryer{r}
	} else {
		o.Retryer = notAppliedRetryer{retry.NewStandard()}
	}
}

type notAppliedRetryer struct{ aws.RetryerV2 }

func (r notAppliedRetryer) IsErrorRetryable(err error) bool {
	return notApplied(err) && r.RetryerV2.IsErrorRetryable(err)
}

// notApplied reports an error that proves the request was not applied.
func notApplied(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		_, throttled := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]
		return throttled
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// recPlaceholders name the record attributes in expressions (Value is a
// DynamoDB reserved word).
var recPlaceholders = map[string]string{"#v": AttrRecordValue, "#c": AttrRecordCounter, "#n": AttrRecordVersion}

func recNames(exprs ...string) map[string]string { return namesIn(recPlaceholders, exprs...) }

// The expressions. A record is live when it has Value or Counter.
const (
	recLive     = "(attribute_exists(#v) OR attribute_exists(#c))"
	recAbsent   = "attribute_not_exists(#v) AND attribute_not_exists(#c)"
	recIsExpect = "#n = :e AND " + recLive

	// Writes that give the key the next version (if_not_exists: the first
	// write, or the first after a tombstone was cleaned up).
	recSetValue   = "SET #v = :v, #n = if_not_exists(#n, :zero) + :one REMOVE #c, ExpiresAt"
	recSetCounter = "SET #c = :c, #n = if_not_exists(#n, :zero) + :one REMOVE #v, ExpiresAt"
	recAdd        = "ADD #c :d, #n :one REMOVE ExpiresAt"
	recDelete     = "SET #n = #n + :one REMOVE #v, #c"
	recDeleteTTL  = "SET #n = #n + :one, ExpiresAt = :clean REMOVE #v, #c"

	// Txn writes, which set a version computed from the one read.
	recTxnValue      = "SET #v = :v, #n = :new REMOVE #c, ExpiresAt"
	recTxnCounter    = "SET #c = :c, #n = :new REMOVE #v, ExpiresAt"
	recTxnDelete     = "SET #n = :new REMOVE #v, #c"
	recTxnDeleteTTL  = "SET #n = :new, ExpiresAt = :clean REMOVE #v, #c"
	recUnchanged     = "#n = :raw"
	recNeverWritten  = "attribute_not_exists(#n)"
	recAddNotValue   = "attribute_not_exists(#v)"
	recAddCounterMax = "(attribute_not_exists(#c) OR #c <= :lim)"
	recAddCounterMin = "(attribute_not_exists(#c) OR #c >= :lim)"
)

func recordKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrKey: str(RecordKeyPrefix + key)}
}

// recItem is a decoded record item.
type recItem struct {
	present bool   // the item exists (a record or a tombstone)
	live    bool   // it is a record, not a tombstone
	value   []byte // the value (a counter's decimal)
	raw     uint64 // the stored Version (a tombstone's too)
}

// version is the record's version: 0 when absent or deleted.
func (r recItem) version() uint64 {
	if !r.live {
		return 0
	}
	return r.raw
}

var errBadRecord = errors.New("dynamodb: malformed record item")

func decodeRecord(key string, item map[string]types.AttributeValue) (recItem, error) {
	var r recItem
	if len(item) == 0 {
		return r, nil
	}
	r.present = true
	bad := func(why string) (recItem, error) {
		return recItem{}, fmt.Errorf("%w: record %q: %s", errBadRecord, key, why)
	}
	switch v := item[AttrRecordVersion].(type) {
	case nil:
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseUint(v.Value, 10, 64)
		if err != nil {
			return bad(AttrRecordVersion + " is not an unsigned integer")
		}
		r.raw = n
	default:
		return bad(AttrRecordVersion + " is not a number")
	}
	switch v := item[AttrRecordValue].(type) {
	case nil:
	case *types.AttributeValueMemberB:
		r.live, r.value = true, append([]byte{}, v.Value...)
	default:
		return bad(AttrRecordValue + " is not binary")
	}
	switch v := item[AttrRecordCounter].(type) {
	case nil:
	case *types.AttributeValueMemberN:
		if r.live {
			return bad("it has both " + AttrRecordValue + " and " + AttrRecordCounter)
		}
		r.live, r.value = true, []byte(v.Value)
	default:
		return bad(AttrRecordCounter + " is not a number")
	}
	if r.live && r.raw == 0 {
		return bad("it has no " + AttrRecordVersion)
	}
	return r, nil
}

// canonicalCounter reports whether value is the canonical decimal form of
// an int64, which the store keeps in Counter.
func canonicalCounter(value []byte) (string, bool) {
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != string(value) {
		return "", false
	}
	return string(value), true
}

// readRecord reads a record item with a consistent GetItem.
func (s *Store) readRecord(ctx context.Context, key string) (recItem, error) {
	out, err := s.client.GetItem(ctx, &ddb.GetItemInput{
		TableName: aws.String(s.table), Key: recordKey(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return recItem{}, s.fail(ctx, err)
	}
	return decodeRecord(key, out.Item)
}

// GetRecord implements leasehold.RecordStore with one consistent GetItem.
func (s *Store) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	if err := s.check(ctx); err != nil {
		return leasehold.Versioned{}, err
	}
	r, err := s.readRecord(ctx, key)
	if err != nil {
		return leasehold.Versioned{}, err
	}
	if !r.live {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	return leasehold.Versioned{Key: key, Value: r.value, Version: r.raw}, nil
}

// versionOut reads the Version that an UpdateItem returned (UPDATED_NEW).
func versionOut(key string, attrs map[string]types.AttributeValue) (uint64, error) {
	r, err := decodeRecord(key, map[string]types.AttributeValue{AttrRecordVersion: attrs[AttrRecordVersion]})
	if err != nil || r.raw == 0 {
		return 0, fmt.Errorf("%w: record %q: no %s in the reply", errBadRecord, key, AttrRecordVersion)
	}
	return r.raw, nil
}

// PutRecord implements leasehold.RecordStore with one conditional
// UpdateItem. After a failed condition it reads the item to report the
// version found (and writes again if the read shows the condition holding
// by then: the item changed in between).
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	vals := map[string]types.AttributeValue{":zero": num(0), ":one": num(1)}
	update := recSetValue
	if c, ok := canonicalCounter(value); ok {
		update = recSetCounter
		vals[":c"] = &types.AttributeValueMemberN{Value: c}
	} else {
		vals[":v"] = bin(value)
	}
	cond := recAbsent
	if expect != 0 {
		cond = recIsExpect
		vals[":e"] = unum(expect)
	}
	in := recordUpdate(s.table, key, update, cond, vals)
	in.ReturnValues = types.ReturnValueUpdatedNew
	for round := 0; ; round++ {
		out, r, err := s.updateRecord(ctx, in, key)
		switch {
		case err != nil:
			return 0, err
		case out != nil:
			return versionOut(key, out.Attributes)
		case r.version() != expect:
			return 0, &leasehold.ConflictError{Key: key, Expected: expect, Actual: r.version()}
		case round == maxRecordRounds:
			return 0, fmt.Errorf("dynamodb: record %q changed under %d writes in a row; try again", key, round+1)
		}
	}
}

// recordUpdate is an UpdateItem of the record key: update if cond holds.
func recordUpdate(table, key, update, cond string, vals map[string]types.AttributeValue) *ddb.UpdateItemInput {
	return &ddb.UpdateItemInput{
		TableName: aws.String(table), Key: recordKey(key),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: recNames(update, cond), ExpressionAttributeValues: vals,
	}
}

// updateRecord runs the conditional update in of the record key. If its
// condition fails it reads the record instead: out is nil, and r is the
// record found.
func (s *Store) updateRecord(ctx context.Context, in *ddb.UpdateItemInput, key string) (out *ddb.UpdateItemOutput, r recItem, err error) {
	out, err = s.client.UpdateItem(ctx, in, writeOnce)
	if err == nil {
		return out, recItem{}, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, recItem{}, s.fail(ctx, err)
	}
	r, err = s.readRecord(ctx, key)
	return nil, r, err
}

// DeleteRecord implements leasehold.RecordStore with one conditional
// UpdateItem that leaves a tombstone (or, with expect 0, one read).
func (s *Store) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	update, vals := recDelete, map[string]types.AttributeValue{":one": num(1), ":e": unum(expect)}
	if s.ttlCleanup {
		update = recDeleteTTL
		vals[":clean"] = num(cleanupAt(s.clock.Now().UnixMilli()))
	}
	in := recordUpdate(s.table, key, update, recIsExpect, vals)
	for round := 0; ; round++ {
		if expect != 0 {
			_, err := s.client.UpdateItem(ctx, in, writeOnce)
			if err == nil {
				return nil
			}
			var ccf *types.ConditionalCheckFailedException
			if !errors.As(err, &ccf) {
				return s.fail(ctx, err)
			}
		}
		r, err := s.readRecord(ctx, key)
		switch {
		case err != nil:
			return err
		case !r.live:
			return leasehold.ErrNotFound
		case r.version() != expect:
			return &leasehold.ConflictError{Key: key, Expected: expect, Actual: r.version()}
		case round == maxRecordRounds:
			return fmt.Errorf("dynamodb: record %q changed under %d deletes in a row; try again", key, round+1)
		}
	}
}

// AddCounter implements leasehold.RecordStore with one UpdateItem (ADD
// Counter) conditioned on the record not holding a non-counter Value and
// on the sum staying within int64. If that condition fails, a read tells
// why: not a counter or overflow (an *leasehold.InvalidError), or a value
// written in a non-canonical form such as "+7", which is then rewritten
// with the sum by a write conditioned on its version.
func (s *Store) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	if err := s.check(ctx); err != nil {
		return 0, 0, err
	}
	vals := map[string]types.AttributeValue{":d": num(delta), ":one": num(1)}
	cond := recAddNotValue
	switch {
	case delta > 0:
		cond += " AND " + recAddCounterMax
		vals[":lim"] = num(math.MaxInt64 - delta)
	case delta < 0:
		cond += " AND " + recAddCounterMin
		vals[":lim"] = num(math.MinInt64 - delta)
	}
	in := recordUpdate(s.table, key, recAdd, cond, vals)
	in.ReturnValues = types.ReturnValueUpdatedNew
	for round := 0; ; round++ {
		out, r, err := s.updateRecord(ctx, in, key)
		if err != nil {
			return 0, 0, err
		}
		if out != nil {
			return counterOut(key, out.Attributes)
		}
		if r.live {
			n, err := storekit.ParseCounter(key, r.value)
			if err != nil {
				return 0, 0, err
			}
			sum, err := storekit.AddInt64(key, n, delta)
			if err != nil {
				return 0, 0, err
			}
			if _, ok := canonicalCounter(r.value); !ok {
				// A counter in Value ("+7"): write the sum at the next version.
				v, err := s.rewriteCounter(ctx, key, sum, r.raw)
				if err == nil {
					return sum, v, nil
				}
				if !errors.Is(err, errChanged) {
					return 0, 0, err
				}
			}
		}
		if round == maxRecordRounds {
			return 0, 0, fmt.Errorf("dynamodb: counter %q changed under %d adds in a row; try again", key, round+1)
		}
	}
}

// rewriteCounter writes sum into Counter if the record is still at
// version raw, and returns the new version, or errChanged.
func (s *Store) rewriteCounter(ctx context.Context, key string, sum int64, raw uint64) (uint64, error) {
	_, err := s.client.UpdateItem(ctx, recordUpdate(s.table, key, recTxnCounter, recUnchanged, map[string]types.AttributeValue{
		":c": num(sum), ":new": unum(raw + 1), ":raw": unum(raw),
	}), writeOnce)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return raw + 1, nil
	case errors.As(err, &ccf):
		return 0, errChanged
	}
	return 0, s.fail(ctx, err)
}

// counterOut reads the Counter and Version an add returned.
func counterOut(key string, attrs map[string]types.AttributeValue) (int64, uint64, error) {
	v, err := versionOut(key, attrs)
	if err != nil {
		return 0, 0, err
	}
	c, ok := attrs[AttrRecordCounter].(*types.AttributeValueMemberN)
	if !ok {
		return 0, 0, fmt.Errorf("%w: record %q: no %s in the reply", errBadRecord, key, AttrRecordCounter)
	}
	n, err := strconv.ParseInt(c.Value, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: record %q: %s = %q is not an int64", errBadRecord, key, AttrRecordCounter, c.Value)
	}
	return n, v, nil
}

// Txn implements leasehold.RecordStore with TransactWriteItems, which
// returns no values, so the versions it writes are computed beforehand:
//
//  1. One BatchGetItem (consistent) reads every key the transaction
//     conditions or writes. A condition the read fails is returned as a
//     *leasehold.ConflictError (the first in order), and an add to a
//     non-counter or an overflowing one as an *leasehold.InvalidError,
//     without writing.
//  2. TransactWriteItems then carries one item per key: an Update that sets
//     the value (an add's sum) or deletes it, with Version = the version
//     read + 1, or a ConditionCheck for a key only conditioned (or deleted
//     while absent); each conditioned on the item's Version being the one
//     read, that is, on the item not having changed since step 1. The
//     conditions of step 1 therefore still hold when the transaction
//     applies.
//  3. If an item changed meanwhile (the transaction is cancelled with
//     ConditionalCheckFailed) or another transaction was in progress on it
//     (TransactionConflict), Txn starts again from step 1, with jittered
//     backoff, at most 50 times.
//
// Two round trips when nothing interferes. Endpoints without
// TransactWriteItems (dynalite answers UnknownOperationException) give
// leasehold.ErrTxnUnsupported. TransactWriteItems limits a transaction to
// 4 MB in all, so 100 writes of 64 KiB values are refused as a whole.
func (s *Store) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := s.check(ctx); err != nil {
		return leasehold.TxnResult{}, err
	}
	if s.noTxn.Load() {
		return leasehold.TxnResult{}, leasehold.ErrTxnUnsupported
	}
	// The distinct keys, conditioned ones first, in order.
	var keys []string
	seen := map[string]bool{}
	for _, c := range txn.If {
		keys = append(keys, c.Key)
		seen[c.Key] = true
	}
	writes := map[string]leasehold.Write{}
	for _, w := range txn.Then {
		writes[w.Key] = w
		if !seen[w.Key] {
			keys = append(keys, w.Key)
			seen[w.Key] = true
		}
	}
	retry := backoff.NewFull(2*time.Millisecond, 200*time.Millisecond)
	for attempt := 1; ; attempt++ {
		read, err := s.readRecords(ctx, keys)
		if err != nil {
			return leasehold.TxnResult{}, err
		}
		for _, c := range txn.If {
			if v := read[c.Key].version(); v != c.Version {
				return leasehold.TxnResult{}, &leasehold.ConflictError{Key: c.Key, Expected: c.Version, Actual: v}
			}
		}
		items, versions, err := s.txnItems(txn, keys, writes, read)
		if err != nil {
			return leasehold.TxnResult{}, err
		}
		_, err = s.client.TransactWriteItems(ctx, &ddb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return leasehold.TxnResult{Versions: versions}, nil
		}
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException" {
			s.noTxn.Store(true)
			return leasehold.TxnResult{}, leasehold.ErrTxnUnsupported
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) || !retryableCancel(tce.CancellationReasons) {
			return leasehold.TxnResult{}, s.fail(ctx, err)
		}
		if attempt == maxRecordRounds {
			return leasehold.TxnResult{}, fmt.Errorf("dynamodb: the records of a transaction changed under %d attempts in a row; try again", attempt)
		}
		// Full jitter, after the first retry.
		if attempt > 1 {
			if err := s.sleep(ctx, retry.Next()); err != nil {
				return leasehold.TxnResult{}, err
			}
		}
	}
}

// retryableCancel reports a cancelled transaction that may succeed if sent
// again after a fresh read: every reason is None, ConditionalCheckFailed
// (an item changed since it was read) or TransactionConflict.
func retryableCancel(reasons []types.CancellationReason) bool {
	retry := false
	for _, r := range reasons {
		switch aws.ToString(r.Code) {
		case "None", "":
		case "ConditionalCheckFailed", "TransactionConflict":
			retry = true
		default:
			return false
		}
	}
	return retry
}

// txnItems builds the TransactWriteItems of txn from the items read, and
// the versions it will write.
func (s *Store) txnItems(txn leasehold.Txn, keys []string, writes map[string]leasehold.Write, read map[string]recItem) ([]types.TransactWriteItem, map[string]uint64, error) {
	versions := make(map[string]uint64, len(writes))
	items := make([]types.TransactWriteItem, 0, len(keys))
	var clean types.AttributeValue
	if s.ttlCleanup {
		clean = num(cleanupAt(s.clock.Now().UnixMilli()))
	}
	for _, key := range keys {
		r := read[key]
		cond := recNeverWritten
		vals := map[string]types.AttributeValue{}
		if r.present {
			cond = recUnchanged
			vals[":raw"] = unum(r.raw)
		}
		w, written := writes[key]
		update := ""
		switch {
		case !written, w.Delete && !r.live:
			// Only a check: the key is conditioned, or deleted while absent.
		case w.Delete:
			update = recTxnDelete
			if clean != nil {
				update = recTxnDeleteTTL
				vals[":clean"] = clean
			}
			vals[":new"] = unum(r.raw + 1)
		default:
			value := w.Value
			if w.Value == nil && w.Add != 0 {
				var n int64
				if r.live {
					var err error
					if n, err = storekit.ParseCounter(key, r.value); err != nil {
						return nil, nil, err
					}
				}
				sum, err := storekit.AddInt64(key, n, w.Add)
				if err != nil {
					return nil, nil, err
				}
				value = []byte(strconv.FormatInt(sum, 10))
			}
			if c, ok := canonicalCounter(value); ok {
				update = recTxnCounter
				vals[":c"] = &types.AttributeValueMemberN{Value: c}
			} else {
				update = recTxnValue
				vals[":v"] = bin(value)
			}
			vals[":new"] = unum(r.raw + 1)
			versions[key] = r.raw + 1
		}
		if written && w.Delete {
			versions[key] = 0
		}
		if len(vals) == 0 {
			vals = nil
		}
		if update == "" {
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
				TableName: aws.String(s.table), Key: recordKey(key), ConditionExpression: aws.String(cond),
				ExpressionAttributeNames: recNames(cond), ExpressionAttributeValues: vals,
			}})
			continue
		}
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.table), Key: recordKey(key),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: recNames(update, cond), ExpressionAttributeValues: vals,
		}})
	}
	return items, versions, nil
}

// readRecords reads the record items of keys (at most 100) with a
// consistent BatchGetItem, repeating it for keys DynamoDB left
// unprocessed.
func (s *Store) readRecords(ctx context.Context, keys []string) (map[string]recItem, error) {
	out := make(map[string]recItem, len(keys))
	req := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		req[i] = recordKey(k)
	}
	retry := backoff.New(5*time.Millisecond, time.Second)
	for len(req) > 0 {
		resp, err := s.client.BatchGetItem(ctx, &ddb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.table: {Keys: req, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		for _, item := range resp.Responses[s.table] {
			k, ok := item[AttrKey].(*types.AttributeValueMemberS)
			if !ok || !strings.HasPrefix(k.Value, RecordKeyPrefix) {
				return nil, fmt.Errorf("%w: a batch read returned an item without a record key", errBadRecord)
			}
			key := strings.TrimPrefix(k.Value, RecordKeyPrefix)
			r, err := decodeRecord(key, item)
			if err != nil {
				return nil, err
			}
			out[key] = r
		}
		req = resp.UnprocessedKeys[s.table].Keys
		if len(req) > 0 {
			if err := s.sleep(ctx, retry.Next()); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
