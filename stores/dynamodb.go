package stores

import (
	"github.com/leasehold/leasehold/dynamodb"
)

// dynamodb://TABLE opens the DynamoDB store (see package dynamodb for the
// URL parameters); "leasehold store init" creates the table.
func init() {
	Register("dynamodb", opener(dynamodb.Open))
	RegisterInit("dynamodb", dynamodb.Init)
}
