package dynamodb_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

var tableSeq atomic.Int64

// freshURL returns the shared test endpoint's URL naming a table of its own
// (created by the first Open), with extra query parameters, and deletes the
// table when the test ends.
func freshURL(t testing.TB, base string, params ...string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("lh_test_%d_%d", time.Now().UnixNano(), tableSeq.Add(1))
	q := u.Query()
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	u.RawQuery = q.Encode()
	t.Cleanup(func() { dropTable(t, u) })
	return u.String()
}

// dropTable deletes the table of u (DeleteTable is not part of the store).
func dropTable(t testing.TB, u *url.URL) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := dynamodb.Open(ctx, u.String(), dynamodb.WithCreateTable(false))
	if err != nil {
		return // never created
	}
	defer s.Close()
	if _, err := s.Client().DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(s.Table())}); err != nil {
		t.Logf("delete table %s: %v", s.Table(), err)
	}
}

func open(t testing.TB, rawURL string, opts ...dynamodb.Option) *dynamodb.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := dynamodb.Open(ctx, rawURL, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	return s
}

// TestConformance runs the whole conformance suite on the shared dynalite,
// each subtest on a fresh table: List is a Scan of the whole table, and the
// Semaphore recipe lists its permits on every attempt, so a table holding
// the hundreds of names of earlier subtests would make the 60ms-TTL
// semaphore test depend on the machine's load. Reopen opens a new Store on
// the same table. The clock-skew margin is 5ms: an expired lease is taken
// over 5ms late, which the suite's model allows.
func TestConformance(t *testing.T) {
	base := enginetest.DynamoDBURL(t)
	reopen := map[leasehold.Store]string{}
	var mu sync.Mutex
	openURL := func(t testing.TB, u string) leasehold.Store {
		s := open(t, u)
		mu.Lock()
		reopen[s] = u
		mu.Unlock()
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return openURL(t, freshURL(t, base, "max_clock_skew", "5ms")) },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			mu.Lock()
			u := reopen[s]
			mu.Unlock()
			s.Close()
			return openURL(t, u+"&create=false")
		},
	})
}

// TestLinearizableWideSkew checks the suite's randomized histories again
// with a clock-skew margin (25ms) close to the workload's TTLs (30ms and
// 80ms), so that many acquires find a lease in its margin and wait it out.
// A "held" answer in the margin would break the suite's model (the lease
// may no longer be alive there); waiting keeps every history linearizable.
func TestLinearizableWideSkew(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t), "max_clock_skew", "25ms")
	s := open(t, u)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := storetest.HistoryConfig{Prefix: "wide/"}
	if testing.Short() {
		cfg.Histories = 40
	}
	res := storetest.CheckHistories(ctx, s, cfg)
	t.Logf("linearizability with a 25ms margin: %s", res)
	if !res.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", res, res.FirstBad)
	}
	if res.Takeovers == 0 {
		t.Errorf("no expiry takeovers: the margin was never exercised")
	}
}
