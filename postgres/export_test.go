package postgres

import "context"

// Setting returns a run-time setting as the Store's sessions see it.
func Setting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// Listens reports how many times the store's Watch listener has
// established LISTEN (1 after the first connection, more after reconnects).
func Listens(s *Store) int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.listens
}

// LostConnections reports how many operations met a lost connection (and
// were retried where that is safe).
func LostConnections(s *Store) int64 { return s.lost.Load() }

// AcquireReruns reports how many times TryAcquire ran its statement again
// because the holder it was refused for was inserted after the statement's
// snapshot.
func AcquireReruns(s *Store) int64 { return s.reruns.Load() }
