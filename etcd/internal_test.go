package etcd

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []record{
		{owner: "a", ttl: time.Second, acquired: time.Unix(0, 1)},
		{owner: "é/ü", requestID: "req-1", ttl: 24 * time.Hour, acquired: time.Unix(1700000000, 123), data: []byte{0, 1, 0xff}},
		{owner: "o", requestID: "r", ttl: 10 * time.Millisecond, acquired: time.Unix(-5, 0), data: bytes.Repeat([]byte("x"), 64<<10)},
	} {
		got, err := decodeRecord([]byte(r.encode()))
		if err != nil || got.owner != r.owner || got.requestID != r.requestID || got.ttl != r.ttl ||
			!got.acquired.Equal(r.acquired) || !bytes.Equal(got.data, r.data) {
			t.Errorf("round trip of %+v = %+v, %v", r, got, err)
		}
	}
	for _, bad := range []string{"", "\x02", "\x01", "\x01\x80", "\x01\x01\x02\x05ab"} {
		if _, err := decodeRecord([]byte(bad)); err == nil {
			t.Errorf("decodeRecord(%q) succeeded", bad)
		}
	}
}

func TestLeaseSeconds(t *testing.T) {
	for ttl, want := range map[time.Duration]int64{
		10 * time.Millisecond: 2, time.Second: 2, 2 * time.Second: 2, 2*time.Second + 1: 3,
		3 * time.Second: 3, 15 * time.Second: 15, 24 * time.Hour: 86400,
	} {
		if got := leaseSeconds(ttl); got != want {
			t.Errorf("leaseSeconds(%s) = %d, want %d", ttl, got, want)
		}
	}
}

func TestPool(t *testing.T) {
	p := newPool()
	now := time.Now()
	if _, ok, _ := p.take(2, now); ok {
		t.Fatal("empty pool gave a spare")
	}
	p.put(2, leaseRef{id: 1, granted: 2, born: now.Add(-1500 * time.Millisecond)}) // stale: over half its TTL
	p.put(2, leaseRef{id: 2, granted: 2, born: now.Add(-100 * time.Millisecond)})
	p.put(3, leaseRef{id: 3, granted: 3, born: now})
	sp, ok, stale := p.take(2, now)
	if !ok || sp.id != 2 || len(stale) != 0 {
		t.Fatalf("take = %+v, %v, %v", sp, ok, stale)
	}
	sp, ok, stale = p.take(2, now)
	if ok || len(stale) != 1 || stale[0].id != 1 {
		t.Fatalf("take of a stale spare = %+v, %v, %v", sp, ok, stale)
	}
	for i := 0; i < maxSparesPerTTL; i++ {
		if !p.put(5, leaseRef{id: 10, granted: 5, born: now}) {
			t.Fatalf("put %d refused", i)
		}
	}
	if p.put(5, leaseRef{id: 11, granted: 5, born: now}) {
		t.Error("pool took more than maxSparesPerTTL")
	}
	if n := len(p.drain()); n != 1+maxSparesPerTTL {
		t.Errorf("drain = %d spares", n)
	}
}

// TestDialTimeout (issue 29, item 5): the URL's dial_timeout wins, else the
// time left to ctx's deadline (connect_timeout=, --connect-timeout), else
// the default; the dial ignored the deadline and gave up at 5 s whatever
// connect_timeout said.
func TestDialTimeout(t *testing.T) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Second))
	defer cancel()
	if got := dialTimeout(ctx, 0, now); got != 20*time.Second {
		t.Errorf("deadline in 20s: %s", got)
	}
	if got := dialTimeout(ctx, 2*time.Second, now); got != 2*time.Second {
		t.Errorf("dial_timeout=2s: %s", got)
	}
	if got := dialTimeout(context.Background(), 0, now); got != DefaultDialTimeout {
		t.Errorf("no deadline: %s", got)
	}
	if got := dialTimeout(ctx, 0, now.Add(time.Minute)); got != time.Millisecond {
		t.Errorf("deadline passed: %s", got)
	}
}
