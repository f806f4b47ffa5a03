package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/storetest"
)

func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoOpeners opens two Stores on one new file, as two processes would;
// they are closed when the test ends.
func twoOpeners(t testing.TB) (*sqlite.Store, *sqlite.Store) {
	p := filepath.Join(t.TempDir(), "shared.db")
	s1, s2 := open(t, p), open(t, p)
	t.Cleanup(func() {
		s1.Close()
		s2.Close()
	})
	return s1, s2
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store {
			return open(t, filepath.Join(t.TempDir(), "leases.db"))
		},
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			p := s.(*sqlite.Store).Path()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, p)
		},
	})
}
