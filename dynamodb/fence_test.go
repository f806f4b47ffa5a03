package dynamodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// createResourceTable makes a plain table (key "id") standing for the
// resource a lease protects.
func createResourceTable(t *testing.T, c *ddb.Client, table string) {
	t.Helper()
	ctx := bg(t)
	_, err := c.CreateTable(ctx, &ddb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(table)}) })
	for {
		out, err := c.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fencedPut writes balance to the account item with token's fence.
func fencedPut(ctx context.Context, c *ddb.Client, table string, token uint64, balance string) error {
	f := dynamodb.Fence("fence", token)
	names := map[string]string{"#b": "balance"}
	for k, v := range f.Names {
		names[k] = v
	}
	values := map[string]types.AttributeValue{":b": &types.AttributeValueMemberN{Value: balance}}
	for k, v := range f.Values {
		values[k] = v
	}
	_, err := c.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "acct-1"}},
		UpdateExpression:          aws.String("SET #b = :b, " + f.Set),
		ConditionExpression:       aws.String(f.Condition),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return f.Err(err)
}

// TestFencedWrite: a holder paused past its expiry writes with its old
// token after the new holder has written; DynamoDB refuses the stale write.
func TestFencedWrite(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t), "max_clock_skew", "5ms")
	s := open(t, u)
	defer s.Close()
	ctx, c := bg(t), s.Client()
	resources := tableOf(t, u) + "_res"
	createResourceTable(t, c, resources)

	a, err := s.TryAcquire(ctx, req("acct-1", "a", 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := fencedPut(ctx, c, resources, a.Token, "100"); err != nil {
		t.Fatalf("first write with token %d: %v", a.Token, err)
	}
	time.Sleep(100 * time.Millisecond) // a is "paused"; its lease expires
	b, err := s.TryAcquire(ctx, req("acct-1", "b", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := fencedPut(ctx, c, resources, b.Token, "200"); err != nil {
		t.Fatalf("new holder's write with token %d: %v", b.Token, err)
	}
	err = fencedPut(ctx, c, resources, a.Token, "50")
	if !errors.Is(err, dynamodb.ErrFenced) || !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("stale write with token %d: %v, want ErrFenced", a.Token, err)
	}
	if err := fencedPut(ctx, c, resources, b.Token, "250"); err != nil {
		t.Errorf("the holder's second write with the same token: %v", err)
	}
	out, err := c.GetItem(ctx, &ddb.GetItemInput{TableName: aws.String(resources), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "acct-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if attrN(out.Item, "balance") != "250" || attrN(out.Item, "fence") == "" {
		t.Errorf("resource after the writes: %v", out.Item)
	}
	if err := dynamodb.Fence("fence", 1).Err(nil); err != nil {
		t.Errorf("FenceExpr.Err(nil) = %v", err)
	}
}

func TestFencePanics(t *testing.T) {
	for _, tc := range []struct {
		attr  string
		token uint64
	}{{"", 1}, {"fence", 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Fence(%q, %d) did not panic", tc.attr, tc.token)
				}
			}()
			dynamodb.Fence(tc.attr, tc.token)
		}()
	}
}
