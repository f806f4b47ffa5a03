package stores_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/stores"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "x.db")
	s, err := stores.Open(ctx, "sqlite://"+p)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.(*sqlite.Store).Path(); got != p {
		t.Errorf("path %q, want %q", got, p)
	}
	s.Close()
	m, err := stores.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*memory.Store); !ok {
		t.Errorf("memory:// opened %T", m)
	}
	t.Setenv(stores.EnvStore, "sqlite://"+filepath.Join(t.TempDir(), "env.db"))
	e, err := stores.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/data")
	p, err := stores.DefaultPath()
	if err != nil || p != "/data/leasehold/leases.db" {
		t.Errorf("DefaultPath = %q, %v", p, err)
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, u := range []string{
		"nosuch://x", "sqlite://", "sqlite:///x.db?mode=ro", "sqlite:///x.db#frag", "://", "postgres ://x",
	} {
		if _, err := stores.Open(context.Background(), u); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", u, err)
		}
	}
}

// TestMultiHostURLReachesTheEngine: a URL that net/url rejects (PostgreSQL
// multi-host) is passed to the engine's own parser, not refused here.
func TestMultiHostURLReachesTheEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := stores.Open(ctx, "postgres://127.0.0.1:1,127.0.0.1:2/db?connect_timeout=2&sslmode=disable")
	if err == nil || errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("multi-host URL: %v, want a connection error from the engine", err)
	}
}
