package dynamodb

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
)

// The requests, as documented in docs/stores/dynamodb.md. Owner, Token
// and Data are DynamoDB reserved words and go through placeholders (#o, #k,
// #d); the other attributes are named directly, as in the state machines
// of package sfn. Times are epoch milliseconds on the writer's clock; :cut
// is now - max clock skew. ExpiresAt (TTL clean-up) is written only by a
// store with WithTTLCleanup: the ...Clean variants add it.
const (
	// acquire: a fresh grant of a free, released or expired (for longer
	// than the skew) lease; the token goes up by one.
	acquireUpdate = "SET #o = :o, RequestId = :r, #d = :d, TtlMs = :ttl, ExpiresAtMs = :exp, Held = :t, AcquiredAtMs = :now ADD #k :one"
	acquireCond   = "attribute_not_exists(LockKey) OR Held = :f OR ExpiresAtMs < :cut"

	// refresh: a retried acquire (same owner and request id) of its own
	// live grant keeps the token and gets a fresh expiry.
	refreshUpdate = "SET #d = :d, TtlMs = :ttl, ExpiresAtMs = :exp"
	refreshCond   = "#o = :o AND RequestId = :r AND #k = :k AND Held = :t AND ExpiresAtMs >= :now"

	renewUpdate = "SET TtlMs = :ttl, ExpiresAtMs = :exp"
	renewCond   = "#o = :o AND #k = :k AND Held = :t AND ExpiresAtMs >= :now"

	// release matches the latest grant, held or already released, so that
	// a repeated release succeeds. It records its call's id in Rel0 ..
	// Rel9, by the token's last decimal digit (relAttr), so that the SDK's
	// resend of the same call that finds a later grant can tell it ended
	// its own (Store.Release).
	releaseUpdate = "SET Held = :f, ExpiresAtMs = :zero, "
	releaseCond   = "#o = :o AND #k = :k"

	cleanSet = ", ExpiresAt = :clean"

	listFilter = "begins_with(LockKey, :prefix)"
)

// placeholders maps each #name to its attribute. No placeholder is a prefix
// of another, so namesFor can find them with strings.Contains.
var placeholders = map[string]string{"#o": AttrOwner, "#k": AttrToken, "#d": AttrData}

// namesFor returns the ExpressionAttributeNames that exprs use (DynamoDB
// rejects unused ones). The maps are built once and only read afterwards.
func namesFor(exprs ...string) map[string]string { return namesIn(placeholders, exprs...) }

// namesIn returns the placeholders (#name to attribute) that exprs use.
func namesIn(placeholders map[string]string, exprs ...string) map[string]string {
	all := strings.Join(exprs, " ")
	out := map[string]string{}
	for ph, attr := range placeholders {
		if strings.Contains(all, ph) {
			out[ph] = attr
		}
	}
	return out
}

var (
	acquireNames = namesFor(acquireUpdate, acquireCond)
	refreshNames = namesFor(refreshUpdate, refreshCond)
	renewNames   = namesFor(renewUpdate, renewCond)
	releaseNames = namesFor(releaseUpdate, releaseCond)
)

// request is the expression part of one conditional UpdateItem.
type request struct {
	update, cond string
	names        map[string]string
	values       map[string]types.AttributeValue
}

// input builds the UpdateItemInput for the item of name, adding ExpiresAt
// = cleanAt when the store does TTL clean-up.
// relAttr is the attribute where a release of token records its call's
// id: one of ten, by the token's last decimal digit, so that it is
// overwritten only by the release of a later token ending in the same digit.
func relAttr(token uint64) string { return "Rel" + strconv.FormatUint(token%10, 10) }

func (s *Store) input(name string, r request, cleanAt int64) *ddb.UpdateItemInput {
	if s.ttlCleanup {
		r.update = strings.Replace(r.update, " ADD ", cleanSet+" ADD ", 1)
		if !strings.Contains(r.update, cleanSet) {
			r.update += cleanSet
		}
		r.values[":clean"] = num(cleanAt)
	}
	return &ddb.UpdateItemInput{
		TableName: aws.String(s.table), Key: key(name),
		UpdateExpression: aws.String(r.update), ConditionExpression: aws.String(r.cond),
		ExpressionAttributeNames: r.names, ExpressionAttributeValues: r.values,
	}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func unum(v uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(v, 10)}
}
func boolean(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }
func bin(v []byte) types.AttributeValue {
	if v == nil {
		v = []byte{}
	}
	return &types.AttributeValueMemberB{Value: v}
}

func key(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrKey: str(name)}
}

// cleanupAt is the ExpiresAt value (epoch seconds) of a lease that ends at
// endMs.
func cleanupAt(endMs int64) int64 { return endMs/1000 + int64(CleanupMargin/time.Second) }

// row is one decoded item.
type row struct {
	name, owner, requestID string
	token                  uint64
	data                   []byte
	ttlMs, expMs, acqMs    int64
	held                   bool
}

// live reports whether the lease is held and unexpired at nowMs by the
// writer's clock: through the millisecond ExpiresAtMs.
func (r *row) live(nowMs int64) bool { return r.held && r.expMs >= nowMs }

// record converts a live row, read at now, to a leasehold.Record.
func (r *row) record(now time.Time) leasehold.Record {
	return leasehold.Record{
		Name: r.name, Owner: r.owner, Token: r.token, Data: r.data,
		TTL: time.Duration(r.ttlMs) * time.Millisecond, Remaining: remaining(r.expMs, now),
		Acquired: time.UnixMilli(r.acqMs),
	}
}

func (r *row) heldError(now time.Time) *leasehold.HeldError {
	return &leasehold.HeldError{
		Name: r.name, Owner: r.owner, Token: r.token,
		Remaining: remaining(r.expMs, now), Acquired: time.UnixMilli(r.acqMs),
	}
}

func remaining(expMs int64, now time.Time) time.Duration {
	return max(time.UnixMilli(expMs).Sub(now), 0)
}

var errBadItem = errors.New("dynamodb: malformed lease item")

// decode reads an item of the lease layout. Attributes other writers may
// leave out (Data, RequestId, TtlMs, AcquiredAtMs, ExpiresAt) default to
// zero values; a present attribute of the wrong type is an error.
func decode(item map[string]types.AttributeValue) (row, error) {
	var r row
	var err error
	getS := func(attr string) string {
		switch v := item[attr].(type) {
		case nil:
		case *types.AttributeValueMemberS:
			return v.Value
		default:
			err = fmt.Errorf("%w: %s is not a string", errBadItem, attr)
		}
		return ""
	}
	getN := func(attr string) int64 {
		switch v := item[attr].(type) {
		case nil:
		case *types.AttributeValueMemberN:
			n, perr := strconv.ParseInt(v.Value, 10, 64)
			if perr != nil {
				err = fmt.Errorf("%w: %s = %q is not an integer", errBadItem, attr, v.Value)
			}
			return n
		default:
			err = fmt.Errorf("%w: %s is not a number", errBadItem, attr)
		}
		return 0
	}
	r.name = getS(AttrKey)
	r.owner = getS(AttrOwner)
	r.requestID = getS(AttrRequestID)
	r.ttlMs = getN(AttrTTLMs)
	r.expMs = getN(AttrExpiresAtMs)
	r.acqMs = getN(AttrAcquiredAtMs)
	if item[AttrToken] != nil { // absent: never granted
		var terr error
		if r.token, terr = parseToken(item[AttrToken]); terr != nil {
			err = terr
		}
	}
	switch v := item[AttrData].(type) {
	case nil:
	case *types.AttributeValueMemberB:
		if len(v.Value) > 0 {
			r.data = v.Value
		}
	default:
		err = fmt.Errorf("%w: %s is not binary", errBadItem, AttrData)
	}
	switch v := item[AttrHeld].(type) {
	case nil:
	case *types.AttributeValueMemberBOOL:
		r.held = v.Value
	default:
		err = fmt.Errorf("%w: %s is not a boolean", errBadItem, AttrHeld)
	}
	if err != nil {
		return r, fmt.Errorf("%w (lease %q)", err, r.name)
	}
	return r, nil
}

func parseToken(v types.AttributeValue) (uint64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%w: %s is missing or not a number", errBadItem, AttrToken)
	}
	t, err := strconv.ParseUint(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s = %q is not an unsigned integer", errBadItem, AttrToken, n.Value)
	}
	return t, nil
}
