package stores

import (
	"context"
	"errors"
	"net/url"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
)

// dynamodb://TABLE opens the DynamoDB store (see package dynamodb for the
// URL parameters); "leasehold store init" creates the table, OpenExisting
// never does (as with create=false).
func init() {
	Register("dynamodb", opener(dynamodb.Open))
	RegisterInit("dynamodb", dynamodb.Init)
	RegisterExisting("dynamodb", openDynamoDBExisting)
}

func openDynamoDBExisting(ctx context.Context, rawURL string) (leasehold.Store, error) {
	s, err := dynamodb.Open(ctx, rawURL, dynamodb.WithCreateTable(false))
	if errors.Is(err, dynamodb.ErrNoTable) {
		table := "?"
		if u, perr := url.Parse(rawURL); perr == nil {
			table = u.Host
		}
		return nil, &NoStoreError{Engine: "DynamoDB", Table: table}
	}
	return asStore(s, err)
}
