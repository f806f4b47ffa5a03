package stores

import (
	"context"
	"net/url"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
)

// DynamoDB tables, opened by dynamodb.Open:
//
//	dynamodb://TABLE[?region=eu-west-1&endpoint=http://127.0.0.1:8000&max_clock_skew=1s&consistent=true&create=true&ttl_cleanup=false]
//
// Credentials come from the AWS SDK's default chain. "leasehold store
// init" runs dynamodb.Init, which creates the table (and, with
// ttl_cleanup=true, enables TTL clean-up where the endpoint supports it).
func init() {
	Register("dynamodb", func(ctx context.Context, u *url.URL) (leasehold.Store, error) {
		s, err := dynamodb.Open(ctx, u.String())
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	})
	RegisterInit("dynamodb", func(ctx context.Context, u *url.URL) error {
		return dynamodb.Init(ctx, u.String())
	})
}
