package etcd_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/etcd"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// freshURL returns the shared etcd's URL with a key prefix of its own for
// this test; the keys under it are deleted when the test ends.
func freshURL(t testing.TB, base string) string {
	prefix := "leasehold-test/" + randid.Hex(6) + "/"
	t.Cleanup(func() {
		s, err := etcd.Open(context.Background(), base)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Client().Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return base + "/?prefix=" + url.QueryEscape(prefix)
}

func open(t testing.TB, u string, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := etcd.Open(ctxFor(t, time.Minute), u, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	return s
}

// TestConformance runs the whole suite. etcd leases last whole seconds,
// at least 2 s, so the expiry tests use a TTL of 1.6 s (its etcd lease, 2
// s, ends before they look again, 1.5 TTLs later) and the linearizability
// workload uses TTLs of 2 s and 3 s, which etcd keeps exactly.
//
// The suite counts expiry takeovers as grants whose token follows, by one,
// a token never released; etcd's tokens are revisions, which skip, so that
// count is every grant here. The grants are therefore also recorded
// (through a recording wrapper) and takeovers counted as grants that follow
// a grant of the same name never released.
func TestConformance(t *testing.T) {
	u := freshURL(t, enginetest.EtcdURL(t))
	rec := &recording{}
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return rec.wrap(open(t, u)) },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return rec.wrap(open(t, u))
		},
		TTL: 1600 * time.Millisecond,
		Queued: func(ctx context.Context, s leasehold.Store, name, owner string) (bool, error) {
			owners, err := etcd.QueuedOwners(ctx, s.(recorded).Store, name)
			return slices.Contains(owners, owner), err
		},
		// The session lease (5 s) and etcd's revocation loop (0.5 s).
		WaiterLiveness: etcd.DefaultQueueLiveness + time.Second,
		// A crashed process: its connection closes, nothing is removed.
		Abandon: func(s leasehold.Store) { s.(recorded).Store.Client().Close() },
		Histories: storetest.HistoryConfig{
			TTLs:     []time.Duration{2 * time.Second, 3 * time.Second},
			Parallel: 100,
			// An acquire whose answer was lost: endUnheard revokes it.
			EndsUnheard: true,
		},
	})
	grants, takeovers := rec.takeovers("linear/")
	t.Logf("linearizability workload: %d grants, %d of them expiry takeovers (counted by name)", grants, takeovers)
	if grants > 0 && takeovers == 0 {
		t.Errorf("the linearizability workload had no expiry takeover among %d grants", grants)
	}
}

// recording wraps the stores the suite opens and records successful
// grants and releases.
type recording struct {
	mu       sync.Mutex
	grants   map[string][]uint64
	released map[string]bool // name + "#" + token
}

type recorded struct {
	*etcd.Store
	r *recording
}

func (r *recording) wrap(s *etcd.Store) leasehold.Store { return recorded{s, r} }

func (s recorded) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := s.Store.TryAcquire(ctx, req)
	if err == nil {
		s.r.add(req.Name, rec.Token)
	}
	return rec, err
}

func (s recorded) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := s.Store.AcquireWait(ctx, req)
	if err == nil {
		s.r.add(req.Name, rec.Token)
	}
	return rec, err
}

func (r *recording) add(name string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.grants == nil {
		r.grants, r.released = map[string][]uint64{}, map[string]bool{}
	}
	r.grants[name] = append(r.grants[name], token)
}

func (s recorded) Release(ctx context.Context, name, owner string, token uint64) error {
	err := s.Store.Release(ctx, name, owner, token)
	if err == nil {
		s.r.mu.Lock()
		if s.r.released == nil {
			s.r.released = map[string]bool{}
		}
		s.r.released[name+"#"+strconv.FormatUint(token, 10)] = true
		s.r.mu.Unlock()
	}
	return err
}

// takeovers counts, over names with prefix, the distinct grants and those
// whose predecessor (the next lower token of the name) was never released.
func (r *recording) takeovers(prefix string) (grants, takeovers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, toks := range r.grants {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		toks = slices.Compact(slices.Sorted(slices.Values(toks)))
		grants += len(toks)
		for i := 1; i < len(toks); i++ {
			if !r.released[name+"#"+strconv.FormatUint(toks[i-1], 10)] {
				takeovers++
			}
		}
	}
	return grants, takeovers
}

func TestBadURLs(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for _, u := range []string{
		"etcd://",
		"etcd:///?prefix=x",
		"http://127.0.0.1:2379",
		"etcd:127.0.0.1",
		"etcd://127.0.0.1:99999",
		"etcd://127.0.0.1:2379,:2379",
		"etcd://127.0.0.1:x",
		"etcd://127.0.0.1:2379/path",
		"etcd://127.0.0.1:2379/#frag",
		"etcd://127.0.0.1:2379/?prefix=",
		"etcd://127.0.0.1:2379/?prefix=a%00b",
		"etcd://127.0.0.1:2379/?prefix=a&prefix=b",
		"etcd://127.0.0.1:2379/?dial_timeout=soon",
		"etcd://127.0.0.1:2379/?dial_timeout=0s",
		"etcd://127.0.0.1:2379/?dial_timeout=-1s",
		"etcd://127.0.0.1:2379/?dial_timeout=1h",
		"etcd://127.0.0.1:2379/?table=x",
		"etcd://:secret@127.0.0.1:2379",
		"etcd://127.0.0.1:2379/?%zz",
	} {
		s, err := etcd.Open(ctx, u)
		var ie *leasehold.InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%q) = %v, %v; want an *InvalidError", u, s, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): error shows the password: %v", u, err)
		}
	}
	if _, err := etcd.New(nil); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New(nil) = %v, want ErrInvalid", err)
	}
	// Through the stores registry: an invalid URL is an error and a nil
	// Store (not a typed nil).
	if s, err := stores.Open(ctx, "etcd://127.0.0.1:2379/?bogus=1"); s != nil || !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("stores.Open(bad etcd URL) = %v, %v", s, err)
	}
}

func TestUnreachable(t *testing.T) {
	port := enginetest.FreePort(t)
	start := time.Now()
	s, err := etcd.Open(ctxFor(t, time.Minute), "etcd://127.0.0.1:"+strconv.Itoa(port)+"/?dial_timeout=300ms")
	if err == nil {
		s.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("unreachable etcd reported as invalid input: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open took %s with dial_timeout=300ms", d)
	}
}

func TestOpenOptions(t *testing.T) {
	base := enginetest.EtcdURL(t)
	u := freshURL(t, base)
	ctx := ctxFor(t, time.Minute)
	s := open(t, u)
	defer s.Close()
	if !strings.HasPrefix(s.Prefix(), "leasehold-test/") {
		t.Errorf("Prefix() = %q", s.Prefix())
	}
	if _, err := etcd.Open(ctx, u, etcd.WithPrefix("")); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("WithPrefix(\"\"): %v, want ErrInvalid", err)
	}
	// The URL's prefix overrides the option.
	s3, err := etcd.Open(ctx, u, etcd.WithPrefix("elsewhere/"))
	if err != nil {
		t.Fatal(err)
	}
	if s3.Prefix() != s.Prefix() {
		t.Errorf("Prefix() = %q with the URL's %q", s3.Prefix(), s.Prefix())
	}
	s3.Close()
	if s4, err := etcd.Open(ctx, base, etcd.WithPrefix("elsewhere/")); err != nil || s4.Prefix() != "elsewhere/" {
		t.Errorf("WithPrefix without a URL prefix: %v", err)
	} else {
		s4.Close()
	}
	// Through the stores registry.
	st, err := stores.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*etcd.Store); !ok {
		t.Errorf("stores.Open(%q) = %T", u, st)
	}
	// New wraps a client without closing it.
	s2, err := etcd.New(s.Client(), etcd.WithPrefix(s.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s2.TryAcquire(ctx, leasehold.AcquireRequest{Name: "shared", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if _, err := s2.Get(ctx, "shared"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if got, err := s.Get(ctx, "shared"); err != nil || got.Token != rec.Token {
		t.Errorf("the other store after New's Close: %+v, %v", got, err)
	}
	// Another prefix is another store.
	other := open(t, base+"/?prefix="+url.QueryEscape(s.Prefix()+"x/"))
	defer other.Close()
	if _, err := other.Get(ctx, "shared"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("a store with another prefix sees the lease: %v", err)
	}
}

// TestExpiryIsPushed: etcd deletes an expired grant's key, and Watch
// reports it; the lease is then free.
func TestExpiryIsPushed(t *testing.T) {
	s := open(t, freshURL(t, enginetest.EtcdURL(t)))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	// Timed from before the grant: a Watch slow to set up on a loaded
	// machine left less than a second between it and the expiry.
	start := time.Now()
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "a", TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no notification of the expiry")
	}
	took := time.Since(start)
	if took < time.Second {
		t.Errorf("expired after %s; etcd leases last at least 2s", took)
	}
	next, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "b", TTL: time.Minute})
	if err != nil || next.Token <= rec.Token {
		t.Fatalf("after expiry: %+v, %v (old token %d)", next, err, rec.Token)
	}
	if err := s.Renew(ctx, "x", "a", rec.Token, time.Second); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("renew of the expired grant: %v", err)
	}
	t.Logf("50ms lease expired on etcd after %s", took.Round(time.Millisecond))
}

// TestRenewNewTTL: a renewal with another TTL moves the grant to an etcd
// lease of that length and keeps its token.
func TestRenewNewTTL(t *testing.T) {
	s := open(t, freshURL(t, enginetest.EtcdURL(t)))
	defer s.Close()
	ctx := ctxFor(t, time.Minute)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{2 * time.Second, 2500 * time.Millisecond, time.Hour} {
		if err := s.Renew(ctx, "x", "a", rec.Token, ttl); err != nil {
			t.Fatalf("Renew(%s): %v", ttl, err)
		}
		got, err := s.Get(ctx, "x")
		if err != nil || got.TTL != ttl || got.Token != rec.Token || got.Remaining > ttl+time.Second {
			t.Errorf("after Renew(%s): %+v, %v", ttl, got, err)
		}
	}
	// A retried acquire with a new TTL keeps the token too.
	r := leasehold.AcquireRequest{Name: "y", Owner: "a", RequestID: "r1", TTL: 3 * time.Second, Data: []byte("one")}
	first, err := s.TryAcquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	r.TTL, r.Data = 10*time.Second, []byte("two")
	again, err := s.TryAcquire(ctx, r)
	if err != nil || again.Token != first.Token {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	got, err := s.Get(ctx, "y")
	if err != nil || got.TTL != r.TTL || string(got.Data) != "two" || got.Remaining < 8*time.Second {
		t.Errorf("after a retry with a new TTL: %+v, %v", got, err)
	}
}
