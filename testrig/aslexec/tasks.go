package aslexec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	dynamoPrefix  = "arn:aws:states:::dynamodb:"
	lambdaInvoke  = "arn:aws:states:::lambda:invoke"
	lambdaARNPart = ":lambda:"
)

// dynamoOps are the optimized DynamoDB integrations: the resource's verb
// and the API action it calls.
var dynamoOps = map[string]string{
	"getItem": "GetItem", "putItem": "PutItem", "deleteItem": "DeleteItem", "updateItem": "UpdateItem",
}

// invoke runs one attempt of a Task resource with its evaluated Arguments.
func (e *Executor) invoke(call Call, resource string, args any) (any, error) {
	switch {
	case strings.HasPrefix(resource, dynamoPrefix):
		op, ok := dynamoOps[strings.TrimPrefix(resource, dynamoPrefix)]
		if !ok {
			return nil, &Failure{Name: "States.Runtime", Cause: "aslexec does not implement the resource " + resource}
		}
		return e.dynamo(op, args)
	case resource == lambdaInvoke:
		m, _ := args.(map[string]any)
		name, _ := m["FunctionName"].(string)
		if name == "" {
			return nil, &Failure{Name: "States.Runtime", Cause: "lambda:invoke without FunctionName"}
		}
		out, err := e.lambda(call, name, m["Payload"])
		if err != nil {
			return nil, err
		}
		return map[string]any{"ExecutedVersion": "$LATEST", "Payload": out, "StatusCode": 200.0}, nil
	case strings.HasPrefix(resource, "arn:") && strings.Contains(resource, lambdaARNPart) && strings.Contains(resource, ":function:"):
		return e.lambda(call, resource, args) // a bare Lambda ARN: the arguments are the payload
	}
	if f := e.opt.Resources[resource]; f != nil {
		v, err := f(e.base, call, args)
		if err != nil {
			return nil, err
		}
		return normalize(v)
	}
	return nil, &Failure{Name: "States.Runtime", Cause: "aslexec does not implement the resource " + resource}
}

// functionName returns the function name of an ARN or of a bare name,
// without a qualifier.
func functionName(s string) string {
	if i := strings.Index(s, ":function:"); i >= 0 {
		s = s[i+len(":function:"):]
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return s
}

// lambda invokes a registered function with its own timeout.
func (e *Executor) lambda(call Call, name string, payload any) (any, error) {
	l, ok := e.opt.Lambdas[functionName(name)]
	if !ok || l.Fn == nil {
		return nil, &Failure{Name: "Lambda.ResourceNotFoundException", Cause: "Function not found: " + name}
	}
	ctx, cancel := context.WithCancel(e.base)
	var killed atomic.Bool
	if l.Timeout > 0 {
		// The sandbox lives until the function's timeout, whenever Fn
		// returns; Close ends it too.
		t := e.clk.NewTimer(l.Timeout)
		go func() {
			select {
			case <-t.C():
				killed.Store(true)
			case <-ctx.Done():
				t.Stop()
			}
			cancel()
		}()
	} else {
		defer cancel()
	}
	type answer struct {
		v   any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := l.Fn(ctx, call, payload)
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		if killed.Load() { // it answered after its sandbox was gone: nothing reached the caller
			return nil, sandboxTimedOut(l.Timeout)
		}
		if a.err != nil {
			var f *Failure
			if errors.As(a.err, &f) {
				return nil, f
			}
			cause, _ := json.Marshal(map[string]any{"errorType": "Error", "errorMessage": a.err.Error(), "trace": []string{}})
			return nil, &Failure{Name: "Error", Cause: string(cause)}
		}
		return normalize(a.v)
	case <-ctx.Done():
		if killed.Load() {
			return nil, sandboxTimedOut(l.Timeout)
		}
		return nil, &Failure{Name: "Lambda.ServiceException", Cause: "the executor was closed"}
	}
}

func sandboxTimedOut(d time.Duration) error {
	cause, _ := json.Marshal(map[string]any{"errorType": "Sandbox.Timedout",
		"errorMessage": fmt.Sprintf("Task timed out after %.2f seconds", d.Seconds())})
	return &Failure{Name: "Sandbox.Timedout", Cause: string(cause)}
}

// dynamo sends one DynamoDB API request (the Arguments are its JSON body),
// signed with Signature Version 4 and fixed test credentials, and maps
// DynamoDB's errors to Step Functions' names: DynamoDB.<exception>.
func (e *Executor) dynamo(op string, args any) (any, error) {
	if e.opt.DynamoDB == "" {
		return nil, &Failure{Name: "DynamoDB.AmazonDynamoDBException", Cause: "aslexec: no DynamoDB endpoint configured"}
	}
	body, err := json.Marshal(args)
	if err != nil {
		return nil, &Failure{Name: "States.Runtime", Cause: err.Error()}
	}
	ctx, cancel := context.WithTimeout(e.base, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(e.opt.DynamoDB, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return nil, &Failure{Name: "States.Runtime", Cause: err.Error()}
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: "AKIDASLEXEC", SecretAccessKey: "aslexec"}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "dynamodb", e.opt.Region, time.Now()); err != nil {
		return nil, &Failure{Name: "States.Runtime", Cause: err.Error()}
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, &Failure{Name: "DynamoDB.AmazonDynamoDBException", Cause: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &Failure{Name: "DynamoDB.AmazonDynamoDBException", Cause: err.Error()}
	}
	if resp.StatusCode == http.StatusOK {
		var out any
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, &Failure{Name: "DynamoDB.AmazonDynamoDBException", Cause: "bad response: " + err.Error()}
		}
		return out, nil
	}
	var fault struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
		Msg     string `json:"Message"`
	}
	_ = json.Unmarshal(raw, &fault)
	name := fault.Type[strings.LastIndexByte(fault.Type, '#')+1:]
	if name == "" {
		name = "AmazonDynamoDBException"
	}
	msg := fault.Message + fault.Msg
	if msg == "" {
		msg = fmt.Sprintf("%s: %s", resp.Status, raw)
	}
	return nil, &Failure{Name: "DynamoDB." + name, Cause: msg}
}
