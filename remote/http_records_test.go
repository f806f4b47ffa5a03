package remote_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/storetest"
)

// Records are served over HTTP only: these tests open *remote.HTTPStore.

// openRecords opens an HTTP store (with its records API) on ts.
func openRecords(t testing.TB, ts *testServer, query string) *remote.HTTPStore {
	t.Helper()
	return ts.open(t, query).(*remote.HTTPStore)
}

// The records conformance suite through HTTP against the native engine.
func TestRecordsConformanceEngine(t *testing.T) {
	ts := startEngine(t, httpTransport, server.EngineConfig{Dir: t.TempDir(), NoSync: true}, serveOptions{})
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return openRecords(t, ts, "") },
		Txn:  true,
	})
}

// The suite through HTTP against a Proxy in front of the memory store.
func TestRecordsConformanceProxy(t *testing.T) {
	ts := startBackend(t, httpTransport, server.NewProxy(memory.New(), server.ProxyConfig{}), serveOptions{})
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return openRecords(t, ts, "") },
		Txn:  true,
	})
}

// Errors map back to leasehold's, with the server's current version; and
// records survive a restart of the server with their versions.
func TestRecordsErrorsAndRestart(t *testing.T) {
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "app", Token: "app-secret", Grants: []server.Grant{{Prefix: "app/", Access: "write"}}},
		{Identity: "ro", Token: "ro-secret", Grants: []server.Grant{{Prefix: "", Access: "read"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startEngine(t, httpTransport, server.EngineConfig{Dir: t.TempDir(), NoSync: true}, serveOptions{Auth: auth})
	s := openRecords(t, ts, "?token=app-secret")
	ctx := ctxT(t)

	if _, err := s.GetRecord(ctx, "app/k"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	v1, err := s.PutRecord(ctx, "app/k", []byte{0xff, 0, 'x'}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.PutRecord(ctx, "app/k", []byte("two"), v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("update: %d %v", v2, err)
	}
	var ce *leasehold.ConflictError
	_, err = s.PutRecord(ctx, "app/k", []byte("stale"), v1)
	if !errors.As(err, &ce) || ce.Key != "app/k" || ce.Expected != v1 || ce.Actual != v2 {
		t.Fatalf("stale put: %v", err)
	}
	if err := s.DeleteRecord(ctx, "app/k", 0); !errors.As(err, &ce) || ce.Actual != v2 {
		t.Fatalf("delete expecting absence: %v", err)
	}
	if err := s.DeleteRecord(ctx, "app/none", 0); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("delete of an absent key expecting absence: %v", err)
	}
	if err := s.DeleteRecord(ctx, "app/none", 3); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("delete of an absent key: %v", err)
	}
	if _, _, err := s.AddCounter(ctx, "app/k", 1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("add to a non-counter: %v", err)
	}
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: "app/k", Version: v1}}, Then: []leasehold.Write{{Key: "app/t", Value: []byte("x")}}})
	if !errors.As(err, &ce) || ce.Key != "app/k" || ce.Expected != v1 || ce.Actual != v2 {
		t.Fatalf("txn conflict: %v", err)
	}
	// Refused by the server's auth: nothing written.
	if _, err := s.PutRecord(ctx, "other/k", []byte("x"), 0); !errors.Is(err, remote.ErrForbidden) {
		t.Fatalf("put outside the grant: %v", err)
	}
	ro := openRecords(t, ts, "?token=ro-secret")
	if _, err := ro.PutRecord(ctx, "app/k", []byte("x"), v2); !errors.Is(err, remote.ErrForbidden) {
		t.Fatalf("put with a read-only token: %v", err)
	}
	if got, err := ro.GetRecord(ctx, "app/k"); err != nil || string(got.Value) != "two" || got.Version != v2 {
		t.Fatalf("read-only get: %+v %v", got, err)
	}
	res, err := s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "app/bin", Value: []byte{0, 1, 0xfe}}, {Key: "app/n", Add: 7}}})
	if err != nil {
		t.Fatal(err)
	}

	// Restart: same versions, and versions keep increasing.
	s.Close()
	ts.restart()
	s = openRecords(t, ts, "?token=app-secret")
	for key, want := range map[string]leasehold.Versioned{
		"app/k":   {Value: []byte("two"), Version: v2},
		"app/bin": {Value: []byte{0, 1, 0xfe}, Version: res.Versions["app/bin"]},
		"app/n":   {Value: []byte("7"), Version: res.Versions["app/n"]},
	} {
		got, err := s.GetRecord(ctx, key)
		if err != nil || string(got.Value) != string(want.Value) || got.Version != want.Version || got.Key != key {
			t.Errorf("%s after restart: %+v %v, want %+v", key, got, err, want)
		}
	}
	if v3, err := s.PutRecord(ctx, "app/k", []byte("three"), v2); err != nil || v3 <= v2 {
		t.Fatalf("update after restart: %d %v", v3, err)
	}
}

// A server whose store keeps no records says so.
func TestRecordsUnsupported(t *testing.T) {
	ts := startBackend(t, httpTransport, server.NewProxy(noRecords{memory.New()}, server.ProxyConfig{}), serveOptions{})
	s := openRecords(t, ts, "")
	if _, err := s.PutRecord(ctxT(t), "k", []byte("v"), 0); !errors.Is(err, remote.ErrRecordsUnsupported) {
		t.Fatalf("put: %v", err)
	}
	if _, err := s.GetRecord(ctxT(t), "k"); !errors.Is(err, remote.ErrRecordsUnsupported) {
		t.Fatalf("get: %v", err)
	}
}

type noRecords struct{ leasehold.Store }
