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
		s, err := dynamodb.Open(ctx, rawURL)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	})
	RegisterInit("dynamodb", dynamodb.Init)
}
