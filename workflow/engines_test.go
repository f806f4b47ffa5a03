package workflow_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// engine is a store to run the workflow tests on: records and leases.
type engine struct {
	name    string
	records leasehold.RecordStore
	leases  leasehold.Store
}

// engines returns memory always, and SQLite, PostgreSQL and Redis when
// they are configured (scripts/engines.sh) and their stores keep records.
func engines(t *testing.T) []engine {
	t.Helper()
	ctx := context.Background()
	m := memory.New()
	out := []engine{{"memory", m, m}}
	add := func(name string, s leasehold.Store, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { s.Close() })
		rs, ok := s.(leasehold.RecordStore)
		if !ok {
			t.Logf("%s: the store does not keep records yet; skipped", name)
			return
		}
		out = append(out, engine{name, rs, s})
	}
	if path := filepath.Join(t.TempDir(), "wf.db"); true {
		s, err := sqlite.Open(path)
		add("sqlite", s, err)
	}
	if url := os.Getenv("LEASEHOLD_TEST_POSTGRES"); url != "" {
		s, err := postgres.Open(ctx, url)
		add("postgres", s, err)
	} else {
		enginetest.Partial(t, "PostgreSQL", "$LEASEHOLD_TEST_POSTGRES is empty; the workflow tests do not run on it")
	}
	if url := os.Getenv("LEASEHOLD_TEST_REDIS"); url != "" {
		s, err := redis.Open(ctx, url)
		add("redis", s, err)
	} else {
		enginetest.Partial(t, "Redis", "$LEASEHOLD_TEST_REDIS is empty; the workflow tests do not run on it")
	}
	return out
}

func unique(prefix string) string {
	return prefix + randid.Hex(4)
}
