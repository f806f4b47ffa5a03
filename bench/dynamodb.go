package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold/dynamodb"
)

// dynamoLockers returns the raw DynamoDB pair (the reference: a conditional
// PutItem that takes a free or expired lock and an owner-checked DeleteItem,
// with the store's own SDK client, on items of the store's table under
// bench/ names) and leasehold's DynamoDB store.
func dynamoLockers(ctx context.Context, url string) ([]locker, error) {
	st, err := dynamodb.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	atEnd(func() { st.Close() })
	cli, table := st.Client(), st.Table()
	rawTry := func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
		k := map[string]types.AttributeValue{"LockKey": &types.AttributeValueMemberS{Value: "bench/raw-ddb/" + key}}
		owner := &types.AttributeValueMemberS{Value: freshKey("owner")}
		now := time.Now()
		_, err := cli.PutItem(ctx, &ddb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				"LockKey": k["LockKey"], "Owner": owner,
				"ExpiresAtMs": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(10*time.Second).UnixMilli(), 10)},
			},
			ConditionExpression:       aws.String("attribute_not_exists(LockKey) OR ExpiresAtMs < :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}},
		})
		var failed *types.ConditionalCheckFailedException
		if errors.As(err, &failed) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return func(ctx context.Context) error {
			_, err := cli.DeleteItem(ctx, &ddb.DeleteItemInput{
				TableName: aws.String(table), Key: k,
				ConditionExpression:       aws.String("#o = :me"),
				ExpressionAttributeNames:  map[string]string{"#o": "Owner"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":me": owner},
			})
			return err
		}, true, nil
	}
	ref := locker{name: "raw DynamoDB conditional PutItem + DeleteItem (1 ms polling)", try: rawTry, wait: pollWait(rawTry, time.Millisecond)}
	ours, err := leaseholdLockers(ctx, "DynamoDB", url)
	if err != nil {
		return nil, fmt.Errorf("leasehold on DynamoDB: %w", err)
	}
	return append([]locker{ref}, ours...), nil
}
