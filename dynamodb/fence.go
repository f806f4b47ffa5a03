package dynamodb

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
)

// Fencing: a lease alone cannot stop a holder that was paused (GC, swap, a
// stopped VM) past its expiry from writing after someone else took the
// lease over. The item it writes can: it keeps the highest fencing token
// that has written it, and a write is applied only if its token is at least
// that high. A stale holder's token is lower than its successor's, so once
// the successor has written, the stale write is refused by DynamoDB.
//
// Use one lease name per protected resource: tokens of different names are
// unrelated.

// ErrFenced reports a fenced write that DynamoDB refused because the item
// was already written with a newer token. It matches leasehold.ErrLost with
// errors.Is, since a newer token means the lease was taken over.
var ErrFenced = fmt.Errorf("%w: fenced write refused: the item was written with a newer token", leasehold.ErrLost)

// FenceExpr holds the parts of a fenced write to an item of any table: put
// Condition into the ConditionExpression (AND it with your own condition,
// in parentheses), Set into the SET clause of the UpdateExpression, and
// Names and Values into the expression attribute maps. Its placeholders
// (#lh_fence, :lh_fence_token) do not collide with names of your own that
// do not start with "lh_fence".
type FenceExpr struct {
	Condition string                          // "attribute_not_exists(#lh_fence) OR #lh_fence <= :lh_fence_token"
	Set       string                          // "#lh_fence = :lh_fence_token"
	Names     map[string]string               // #lh_fence -> attr
	Values    map[string]types.AttributeValue // :lh_fence_token -> token (N)
}

// Fence returns the guard for a write carrying token to an item whose
// fencing attribute (a number) is attr. The write is applied if the
// item has no such attribute yet or holds a token no newer than this one,
// and it records token in attr. It panics if attr is empty or token is 0,
// which are programming errors (tokens start at 1).
func Fence(attr string, token uint64) FenceExpr {
	if attr == "" || token == 0 {
		panic(fmt.Sprintf("dynamodb.Fence(%q, %d): want an attribute name and a token >= 1", attr, token))
	}
	return FenceExpr{
		Condition: "attribute_not_exists(#lh_fence) OR #lh_fence <= :lh_fence_token",
		Set:       "#lh_fence = :lh_fence_token",
		Names:     map[string]string{"#lh_fence": attr},
		Values:    map[string]types.AttributeValue{":lh_fence_token": unum(token)},
	}
}

// Err returns ErrFenced if err is DynamoDB's conditional check failure of
// the write guarded by f, and err unchanged otherwise (nil stays nil). If
// the write had conditions of its own, a failure of those also comes back
// as ErrFenced.
func (f FenceExpr) Err(err error) error {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ErrFenced
	}
	return err
}
