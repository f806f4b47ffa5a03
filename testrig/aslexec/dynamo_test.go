package aslexec

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// dynamoEndpoint returns the shared dynalite's endpoint, with a table of
// the store's layout for this package's tests.
func dynamoEndpoint(t *testing.T) (endpoint, table string) {
	t.Helper()
	u, err := url.Parse(enginetest.DynamoDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	endpoint, table = u.Query().Get("endpoint"), "aslexec_test"
	q := u.Query()
	u.Host = table
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamodb.Init(ctx, u.String()); err != nil {
		t.Fatalf("create the table: %v", err)
	}
	return endpoint, table
}

func TestDynamoDBTasks(t *testing.T) {
	endpoint, table := dynamoEndpoint(t)
	e := newExecutor(t, Options{DynamoDB: endpoint})
	key := fmt.Sprintf("aslexec-%d", time.Now().UnixNano())
	k := map[string]any{"LockKey": map[string]any{"S": key}}
	put := map[string]any{"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
		"Arguments": map[string]any{"TableName": table, "Item": map[string]any{"LockKey": map[string]any{"S": key}, "V": map[string]any{"N": "1"}},
			"ConditionExpression": "attribute_not_exists(LockKey)"}}
	putAgain := map[string]any{}
	for kk, v := range put {
		putAgain[kk] = v
	}
	put["Next"] = "Add"
	putAgain["Next"] = "Unreachable"
	putAgain["Catch"] = []any{map[string]any{"ErrorEquals": []string{"DynamoDB.ConditionalCheckFailedException"}, "Next": "Get",
		"Assign": map[string]any{"err": "{% $states.errorOutput.Error %}"}}}
	def := machineDef(t, "Put", map[string]any{
		"Put": put,
		"Add": map[string]any{"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem",
			"Arguments": map[string]any{"TableName": table, "Key": k, "UpdateExpression": "ADD V :n",
				"ExpressionAttributeValues": map[string]any{":n": map[string]any{"N": "{% $string(41) %}"}}, "ReturnValues": "UPDATED_NEW"},
			"Assign": map[string]any{"v": "{% $states.result.Attributes.V.N %}"}, "Next": "PutAgain"},
		"PutAgain":    putAgain,
		"Unreachable": map[string]any{"Type": "Fail", "Error": "Unreachable", "Cause": "the conditional put succeeded twice"},
		"Get": map[string]any{"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
			"Arguments": map[string]any{"TableName": table, "Key": k, "ConsistentRead": true},
			"Output":    "{% {'v': $v, 'err': $err, 'item': $states.result.Item.V.N} %}", "Next": "Delete"},
		"Delete": map[string]any{"Type": "Task", "Resource": "arn:aws:states:::dynamodb:deleteItem",
			"Arguments": map[string]any{"TableName": table, "Key": k}, "Output": "{% $states.input %}", "End": true},
	})
	_, r := run(t, e, def, "dynamo", nil)
	if r.Status != Succeeded {
		t.Fatalf("result %+v", r)
	}
	if got := fmt.Sprint(r.Output); got != "map[err:DynamoDB.ConditionalCheckFailedException item:42 v:42]" {
		t.Errorf("output %s", got)
	}

	// An error of the API itself: the table does not exist.
	def = machineDef(t, "Get", map[string]any{"Get": map[string]any{"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
		"Arguments": map[string]any{"TableName": "no_such_table", "Key": k}, "End": true}})
	_, r = run(t, e, def, "missing-table", nil)
	if r.Status != Failed || r.Error != "DynamoDB.ResourceNotFoundException" || r.Cause == "" {
		t.Errorf("result %+v, want DynamoDB.ResourceNotFoundException", r)
	}
}
