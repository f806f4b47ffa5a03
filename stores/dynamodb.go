package stores

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
)

// dynamodb://TABLE opens the DynamoDB store (see package dynamodb for the
// URL parameters); "leasehold store init" creates the table.
func init() {
	Register("dynamodb", func(ctx context.Context, rawURL string) (leasehold.Store, error) {
		return asStore(dynamodb.Open(ctx, rawURL))
	})
	RegisterInit("dynamodb", dynamodb.Init)
}
