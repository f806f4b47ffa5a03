package dynamodb_test

import (
	"context"
	"fmt"
	"log"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
)

// A fenced write to another table: the account item keeps the highest
// token that wrote it, and DynamoDB refuses a write with an older one.
func ExampleFence() {
	var token uint64 = 7 // from Lease.Token()
	f := dynamodb.Fence("fence", token)
	in := &ddb.UpdateItemInput{
		TableName:                 aws.String("accounts"),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "acct-1"}},
		UpdateExpression:          aws.String("SET #b = :b, " + f.Set),
		ConditionExpression:       aws.String(f.Condition),
		ExpressionAttributeNames:  map[string]string{"#b": "balance"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberN{Value: "100"}},
	}
	maps.Copy(in.ExpressionAttributeNames, f.Names)
	maps.Copy(in.ExpressionAttributeValues, f.Values)
	fmt.Println(*in.UpdateExpression)
	fmt.Println(*in.ConditionExpression)
	fmt.Println(in.ExpressionAttributeNames["#lh_fence"], in.ExpressionAttributeValues[":lh_fence_token"].(*types.AttributeValueMemberN).Value)
	// Send it with client.UpdateItem(ctx, in), and pass the error through
	// f.Err: ErrFenced means a newer holder has written.
	// Output:
	// SET #b = :b, #lh_fence = :lh_fence_token
	// attribute_not_exists(#lh_fence) OR #lh_fence <= :lh_fence_token
	// fence 7
}

// Open a store on a table (created if missing) and run a job under a lease.
func ExampleOpen() {
	ctx := context.Background()
	store, err := dynamodb.Open(ctx, "dynamodb://leasehold?region=eu-west-1&max_clock_skew=1s")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	client, err := leasehold.New(store, leasehold.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	err = client.Do(ctx, "nightly-import", func(ctx context.Context) error {
		l, _ := leasehold.LeaseFromContext(ctx)
		fmt.Println("running with fencing token", l.Token())
		return nil
	}, leasehold.TTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}
