// Package sfn writes AWS Step Functions state machines (JSONata query
// language) that run a task while holding a leasehold lock kept in a
// DynamoDB table with the layout of the dynamodb store, so that state
// machines, Go programs and "leasehold run --store dynamodb://..." exclude
// each other on the same lock.
//
// The generated machine:
//
//	Init ─► Acquire ──ok──► Task ──ok──► Release ──► (output of Task)
//	          │ held          │ any error      │ lease lost
//	          ▼               ▼                ▼
//	      WaitForLock    ReleaseAfterFailure  LeaseLost (Fail)
//	          │               │
//	      CanRetry? ──no──► LockNotAcquired (Fail)   TaskFailed (Fail, the task's own error)
//
// Acquire is one conditional UpdateItem: it succeeds when the lock item is
// absent, released, expired (ExpiresAtMs older than now minus the clock
// skew), or already held by this execution (a retried or redriven acquire),
// and it adds 1 to the lock's fencing token. Waiting is randomized and
// bounded (MaxAttempts), far below the 25,000-event history limit of a
// Standard workflow. The task runs with a timeout shorter than the lease,
// so a running task never outlives its lock; an execution that dies leaves
// a lock that expires after the TTL.
package sfn

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Config describes the machine to write.
type Config struct {
	Table string // DynamoDB table (the dynamodb store's layout)
	Lock  string // lock name: the LockKey of the item
	// Exactly one of LambdaARN and Task: the work to run under the lock.
	LambdaARN string
	Task      json.RawMessage // a Task state (JSON object); Next/End/Catch are set here
	// TTL is the lease time. The task's TimeoutSeconds is set to TTL minus
	// Margin (unless the task sets a smaller one). Default 1h.
	TTL time.Duration
	// Margin is what the task's timeout leaves before the lease expires, for
	// the release. Default 1m (or TTL/10 when that is less).
	Margin time.Duration
	// MaxClockSkew is subtracted from now when judging expiry, as the Go
	// store does. Default 1s.
	MaxClockSkew time.Duration
	// MaxAttempts bounds the acquire attempts. Default 200.
	MaxAttempts int
	// MaxDelay caps one randomized wait between attempts. Default 30s.
	MaxDelay time.Duration
	Comment  string
}

// Limits of the generator.
const (
	maxAttemptsLimit = 2000 // × ~8 history events per attempt stays far below 25,000
	minTTL           = 10 * time.Second
	maxTTL           = 365 * 24 * time.Hour
)

var (
	tableRE  = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)
	lambdaRE = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:[a-zA-Z0-9-_]+(:[a-zA-Z0-9-_$]+)?$`)
)

func (c *Config) defaults() {
	if c.TTL == 0 {
		c.TTL = time.Hour
	}
	if c.Margin == 0 {
		c.Margin = min(time.Minute, c.TTL/10)
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 200
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 30 * time.Second
	}
}

// Validate reports the first problem with c, as an error naming the field.
func (c *Config) Validate() error {
	c.defaults()
	switch {
	case !tableRE.MatchString(c.Table):
		return fmt.Errorf("table %q: want 3-255 characters of a-z, A-Z, 0-9, _ . -", c.Table)
	case c.Lock == "" || len(c.Lock) > 256 || strings.ContainsAny(c.Lock, "\x00\n\r\t"):
		return fmt.Errorf("lock %q: want 1-256 bytes without control characters", c.Lock)
	case (c.LambdaARN == "") == (len(c.Task) == 0):
		return fmt.Errorf("give exactly one of a Lambda ARN and a Task state")
	case c.LambdaARN != "" && !lambdaRE.MatchString(c.LambdaARN):
		return fmt.Errorf("lambda ARN %q is not a Lambda function ARN", c.LambdaARN)
	case c.TTL < minTTL || c.TTL > maxTTL:
		return fmt.Errorf("ttl %s: want between %s and %s", c.TTL, minTTL, maxTTL)
	case c.Margin <= 0 || c.Margin >= c.TTL-time.Second:
		return fmt.Errorf("margin %s: want more than 0 and less than the TTL minus 1s", c.Margin)
	case c.MaxClockSkew < 0 || c.MaxClockSkew > time.Hour:
		return fmt.Errorf("max clock skew %s: want between 0 and 1h", c.MaxClockSkew)
	case c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsLimit:
		return fmt.Errorf("max attempts %d: want between 1 and %d (the history limit)", c.MaxAttempts, maxAttemptsLimit)
	case c.MaxDelay < time.Second || c.MaxDelay > time.Hour:
		return fmt.Errorf("max delay %s: want between 1s and 1h", c.MaxDelay)
	}
	if len(c.Task) > 0 {
		var st map[string]any
		if err := json.Unmarshal(c.Task, &st); err != nil {
			return fmt.Errorf("task state: %v", err)
		}
		if st["Type"] != "Task" {
			return fmt.Errorf("task state: \"Type\" must be \"Task\", got %v", st["Type"])
		}
		if _, ok := st["Resource"].(string); !ok {
			return fmt.Errorf("task state: missing \"Resource\"")
		}
		if _, ok := st["Catch"]; ok {
			return fmt.Errorf("task state: remove \"Catch\": the machine catches every error to release the lock, then fails with the task's error")
		}
		if ql, ok := st["QueryLanguage"]; ok && ql != "JSONata" {
			return fmt.Errorf("task state: QueryLanguage %v: the machine uses JSONata; write the state in JSONata", ql)
		}
	}
	return nil
}
