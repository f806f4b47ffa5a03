package stepfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// oracleClient does the fenced read-then-write of the verify oracle: what
// every protected task (a machine's Lambda, a "leasehold run" command)
// does in its critical section.
type oracleClient struct {
	base string
	http *http.Client
}

func newOracleClient(base string) *oracleClient {
	return &oracleClient{base: base, http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
}

// errStale is the oracle refusing a token lower than one it has seen.
var errStale = errors.New("oracle: stale token")

func (c *oracleClient) call(ctx context.Context, path, key, proc string, token uint64, read int64) (int64, error) {
	q := url.Values{"k": {key}, "p": {proc}, "tok": {strconv.FormatUint(token, 10)}, "pid": {strconv.Itoa(os.Getpid())}}
	if path == "/write" {
		q.Set("read", strconv.FormatInt(read, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var body struct{ Value int64 }
		err := json.NewDecoder(resp.Body).Decode(&body)
		return body.Value, err
	case http.StatusNoContent:
		return 0, nil
	case http.StatusConflict:
		return 0, errStale
	}
	b, _ := io.ReadAll(resp.Body)
	return 0, fmt.Errorf("oracle %s: %s: %s", path, resp.Status, b)
}

// increment reads key's counter with token, holds for hold (or until ctx
// ends: a Lambda killed at its own timeout), and writes the value read
// plus one unless ctx ended first. It reports whether the write was
// accepted.
func (c *oracleClient) increment(ctx context.Context, key, proc string, token uint64, hold time.Duration) (bool, error) {
	v, err := c.call(context.WithoutCancel(ctx), "/read", key, proc, token, 0)
	if err != nil {
		return false, err
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if _, err := c.call(context.WithoutCancel(ctx), "/write", key, proc, token, v); err != nil {
		return false, err
	}
	return true, nil
}

// payloadLease is what a generated machine passes its Lambda function
// about the lock: {"leasehold": {"lock", "owner", "token"}} in the
// payload.
type payloadLease struct {
	Lock  string
	Owner string
	Token uint64
}

func leaseOf(payload any) (payloadLease, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return payloadLease{}, err
	}
	var p struct {
		Leasehold struct {
			Lock  string  `json:"lock"`
			Owner string  `json:"owner"`
			Token float64 `json:"token"`
		} `json:"leasehold"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return payloadLease{}, err
	}
	if p.Leasehold.Lock == "" || p.Leasehold.Token < 1 {
		return payloadLease{}, fmt.Errorf("the payload has no leasehold lock and token: %s", b)
	}
	return payloadLease{Lock: p.Leasehold.Lock, Owner: p.Leasehold.Owner, Token: uint64(p.Leasehold.Token)}, nil
}
