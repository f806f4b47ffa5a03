package dynamodb_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// Run with the shared dynalite (source the engines' environment first):
//
//	go test -run '^$' -bench AcquireRelease -benchtime 2000x ./dynamodb/
//	go test -run '^$' -bench Handoff -benchtime 140x ./dynamodb/
//
// AcquireRelease reports the median and p99 of one acquire+release pair:
// "store" calls the Store, "client" goes through Client.TryAcquire and
// Lease.Release, and "raw" is the reference: a conditional PutItem
// (attribute_not_exists) and an owner-checked DeleteItem with the same SDK
// client on the same endpoint. Handoff reports, with 8 clients contending
// for one lease, the time from a holder's Release call until the next
// holder's Acquire returns, for several Client backoff settings.

func reportPercentiles(b *testing.B, lat []time.Duration, unit string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	div := map[string]float64{"µs": 1e3, "ms": 1e6}[unit]
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/div, "p50-"+unit)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/div, "p99-"+unit)
}

// BenchmarkAcquireRelease runs the three kinds of pair in turn within each
// iteration (rotating which goes first), so that all three see the same
// load of a shared machine; ns/op is the time of all three.
func BenchmarkAcquireRelease(b *testing.B) {
	u := freshURL(b, enginetest.DynamoDBURL(b), "max_clock_skew", "1s")
	s := open(b, u)
	defer s.Close()
	c, err := leasehold.New(s, leasehold.WithOwner("me"))
	if err != nil {
		b.Fatal(err)
	}
	ddbc, table := s.Client(), s.Table()
	rawKey := map[string]types.AttributeValue{"LockKey": &types.AttributeValueMemberS{Value: "bench/raw"}}
	me := &types.AttributeValueMemberS{Value: "me"}
	pairs := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"store", func(ctx context.Context) error {
			rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "bench/store", Owner: "me", TTL: 10 * time.Second})
			if err != nil {
				return err
			}
			return s.Release(ctx, "bench/store", "me", rec.Token)
		}},
		{"client", func(ctx context.Context) error {
			l, err := c.TryAcquire(ctx, "bench/client", leasehold.TTL(10*time.Second))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"raw", func(ctx context.Context) error {
			_, err := ddbc.PutItem(ctx, &ddb.PutItemInput{
				TableName: aws.String(table),
				Item: map[string]types.AttributeValue{
					"LockKey": rawKey["LockKey"], "Owner": me,
					"ExpiresAtMs": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(10 * time.Second).UnixMilli())},
				},
				ConditionExpression: aws.String("attribute_not_exists(LockKey)"),
			})
			if err != nil {
				return err
			}
			_, err = ddbc.DeleteItem(ctx, &ddb.DeleteItemInput{
				TableName: aws.String(table), Key: rawKey,
				ConditionExpression:       aws.String("#o = :me"),
				ExpressionAttributeNames:  map[string]string{"#o": "Owner"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":me": me},
			})
			return err
		}},
	}
	ctx := context.Background()
	for i := 0; i < 20; i++ { // warm the connections up
		for _, p := range pairs {
			if err := p.fn(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	lat := make([][]time.Duration, len(pairs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range pairs {
			k := (i + j) % len(pairs)
			t0 := time.Now()
			if err := pairs[k].fn(ctx); err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(pairs))
	for k, p := range pairs {
		l := lat[k]
		slices.Sort(l)
		p50[k] = l[len(l)/2]
		b.ReportMetric(float64(l[len(l)/2].Nanoseconds())/1e3, p.name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds())/1e3, p.name+"-p99-µs")
	}
	b.ReportMetric(float64(p50[0])/float64(p50[2]), "store/raw-p50")
}

// BenchmarkHandoff: in rounds, 8 clients start waiting for one lease at
// once; each holds it once (for 10ms, or 250ms so that the waiters' backoff
// reaches its cap), releases it and leaves, so every handoff goes to a
// client that has been polling for a while. Each b.N iteration is one
// handoff: the time from the holder's Release call until the next holder's
// Acquire returns. "polls/s" is the rate of acquire attempts on the store.
func BenchmarkHandoff(b *testing.B) {
	base := enginetest.DynamoDBURL(b)
	for _, hold := range []time.Duration{10 * time.Millisecond, 250 * time.Millisecond} {
		for _, bo := range []struct{ min, max time.Duration }{
			{2 * time.Millisecond, 250 * time.Millisecond}, // the Client's default
			{5 * time.Millisecond, 50 * time.Millisecond},
			{2 * time.Millisecond, 20 * time.Millisecond},
			{time.Millisecond, 10 * time.Millisecond},
		} {
			b.Run(fmt.Sprintf("hold=%s/backoff=%s-%s", hold, bo.min, bo.max), func(b *testing.B) {
				s := open(b, freshURL(b, base, "max_clock_skew", "1s"))
				defer s.Close()
				cs := &countingStore{Store: s}
				var lat []time.Duration
				start := time.Now()
				for len(lat) < b.N {
					lat = append(lat, handoffRound(b, cs, 8, hold, bo.min, bo.max)...)
				}
				b.ReportMetric(float64(cs.attempts.Load())/time.Since(start).Seconds(), "polls/s")
				reportPercentiles(b, lat[:b.N], "ms")
			})
		}
	}
}

// countingStore counts acquire attempts.
type countingStore struct {
	leasehold.Store
	attempts atomic.Int64
}

func (c *countingStore) TryAcquire(ctx context.Context, r leasehold.AcquireRequest) (leasehold.Record, error) {
	c.attempts.Add(1)
	return c.Store.TryAcquire(ctx, r)
}

// handoffRound runs one round and returns its waiters-1 handoff times.
func handoffRound(b *testing.B, s leasehold.Store, waiters int, hold, bmin, bmax time.Duration) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var releasedAt time.Time // when the last holder called Release
	var errs []error
	var wg sync.WaitGroup
	for w := 0; w < waiters; w++ {
		c, err := leasehold.New(s, leasehold.WithOwner(fmt.Sprintf("w%d", w)), leasehold.WithBackoff(bmin, bmax))
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "handoff", leasehold.TTL(30*time.Second))
			got := time.Now()
			mu.Lock()
			if err == nil && !releasedAt.IsZero() {
				lat = append(lat, got.Sub(releasedAt))
			}
			mu.Unlock()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			time.Sleep(hold)
			mu.Lock()
			releasedAt = time.Now()
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		b.Error(err)
	}
	return lat
}
