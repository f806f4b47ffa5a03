package dynamodb_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rawClient returns a DynamoDB client for the endpoint and region of a
// dynamodb:// URL, with extra client options.
func rawClient(t testing.TB, rawURL string, opts ...func(*ddb.Options)) *ddb.Client {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	region := u.Query().Get("region")
	if region == "" {
		region = "us-east-1"
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(region))
	if err != nil {
		t.Fatal(err)
	}
	return ddb.NewFromConfig(cfg, append([]func(*ddb.Options){func(o *ddb.Options) {
		if e := u.Query().Get("endpoint"); e != "" {
			o.BaseEndpoint = aws.String(e)
		}
	}}, opts...)...)
}

// tableOf returns the table name of a dynamodb:// URL.
func tableOf(t testing.TB, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// tableExists asks the endpoint whether table exists.
func tableExists(t testing.TB, c *ddb.Client, table string) bool {
	t.Helper()
	_, err := c.DescribeTable(bg(t), &ddb.DescribeTableInput{TableName: aws.String(table)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return false
	}
	if err != nil {
		t.Fatalf("DescribeTable(%s): %v", table, err)
	}
	return true
}

// rawItem reads an item of a lease table as stored.
func rawItem(t testing.TB, c *ddb.Client, table, name string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(bg(t), &ddb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"LockKey": &types.AttributeValueMemberS{Value: name}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attrS(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

func req(name, owner string, ttl time.Duration) leasehold.AcquireRequest {
	return leasehold.AcquireRequest{Name: name, Owner: owner, TTL: ttl}
}

// offsetClock is the real clock moved by off: a writer whose wall clock is
// wrong by off.
type offsetClock struct{ off time.Duration }

func (c offsetClock) Now() time.Time                       { return time.Now().Add(c.off) }
func (c offsetClock) Boot() time.Duration                  { return clock.Real().Boot() }
func (c offsetClock) NewTimer(d time.Duration) clock.Timer { return clock.Real().NewTimer(d) }
