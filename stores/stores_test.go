package stores_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestFailedOpenIsNil: a store that fails to open is a nil Store, not a
// nil *sqlite.Store in the interface (which a caller's "if s != nil
// { s.Close() }" would call). A directory is no database file.
func TestFailedOpenIsNil(t *testing.T) {
	s, err := stores.Open(context.Background(), "sqlite://"+t.TempDir())
	if err == nil || s != nil {
		t.Errorf("Open of a directory = %#v, %v; want nil and an error", s, err)
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

// TestSQLiteURLs: every accepted form names one file whatever the working
// directory, and the ambiguous forms are refused with a hint and leave the
// disk untouched.
func TestSQLiteURLs(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	for _, tc := range []struct{ url, hint string }{
		{"sqlite://var/lib/x.db", "did you mean sqlite:///var/lib/x.db?"},
		{"sqlite://x.db", "did you mean sqlite:///x.db?"},
		{"sqlite://./x.db", "did you mean sqlite:./x.db (relative"},
		{"sqlite://../x.db", "did you mean sqlite:../x.db (relative"},
		{"sqlite://user@/x.db", "no host part"},
		{"sqlite://localhost:1/x.db", "no host part"},
		{"sqlite:relative.db", "did you mean sqlite:./relative.db (relative to the working directory) or sqlite:///relative.db"},
		{"sqlite:var/x.db", "did you mean sqlite:./var/x.db"},
		{"sqlite://", "no path"},
		{"sqlite:", "no path"},
		{"sqlite:///x.db?mode=ro", "no query"},
		{"sqlite:./x.db?", "no query"},
		{"sqlite:///x.db#frag", "no query or fragment"},
	} {
		_, err := stores.Open(context.Background(), tc.url)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("Open(%q) = %v, want ErrInvalid with %q", tc.url, err, tc.hint)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", "*")); len(left) != 0 {
		t.Errorf("refused URLs left files behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.db")); len(left) != 0 {
		t.Errorf("refused URLs left files behind: %v", left)
	}

	for _, tc := range []struct{ url, want string }{
		{"sqlite:./rel.db", filepath.Join(work, "rel.db")},
		{"sqlite:../up.db", filepath.Join(dir, "up.db")},
		{"sqlite:./sub/dir%20x/in.db", filepath.Join(work, "sub", "dir x", "in.db")},
		{"sqlite://" + filepath.Join(dir, "abs.db"), filepath.Join(dir, "abs.db")},
		{"sqlite:" + filepath.Join(dir, "abs1.db"), filepath.Join(dir, "abs1.db")},
	} {
		s, err := stores.Open(context.Background(), tc.url)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		s.Close()
		if _, err := os.Stat(tc.want); err != nil {
			t.Errorf("Open(%q) did not create %s: %v", tc.url, tc.want, err)
		}
	}
}

// TestMemoryURLTakesNoParameters: memory:// has no parameters, so one is
// refused rather than ignored.
func TestMemoryURLTakesNoParameters(t *testing.T) {
	for _, u := range []string{"memory://?size=10", "memory:?x", "MEMORY://x?y#z"} {
		if _, err := stores.Open(context.Background(), u); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "no parameters") {
			t.Errorf("Open(%q) = %v, want ErrInvalid saying memory:// takes no parameters", u, err)
		}
	}
	for _, u := range []string{"memory://", "memory:", "memory://?", "memory://#a?b"} {
		s, err := stores.Open(context.Background(), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		s.Close()
	}
}

// TestOpenExisting (issue 29, item 4): OpenExisting opens a SQLite store
// only if its file exists, and creates nothing otherwise (no file, no
// directory), also for the default file; other schemes open as with Open.
func TestOpenExisting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo", "leses.db")
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "xdg"))
	t.Setenv(stores.EnvStore, "")
	for _, u := range []string{"sqlite://" + typo, "sqlite:" + typo, ""} {
		s, err := stores.OpenExisting(ctx, u)
		var nse *stores.NoStoreError
		if err == nil {
			s.Close()
		}
		if !errors.As(err, &nse) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("OpenExisting(%q) = %v, want a *NoStoreError", u, err)
		}
	}
	t.Setenv(stores.EnvStore, "sqlite://"+typo)
	if _, err := stores.OpenExisting(ctx, ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenExisting with $%s naming a missing file: %v", stores.EnvStore, err)
	}
	for _, p := range []string{filepath.Join(dir, "typo"), filepath.Join(dir, "xdg")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was created: %v", p, err)
		}
	}
	if _, err := stores.OpenExisting(ctx, "sqlite:x.db"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("OpenExisting(sqlite:x.db) = %v, want the usual invalid URL", err)
	}
	// An existing file opens.
	made := filepath.Join(dir, "made.db")
	s, err := stores.Open(ctx, "sqlite://"+made)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, u := range []string{"sqlite://" + made, "memory://"} {
		s, err := stores.OpenExisting(ctx, u)
		if err != nil {
			t.Errorf("OpenExisting(%q): %v", u, err)
			continue
		}
		s.Close()
	}
}
